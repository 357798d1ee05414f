#!/bin/sh
# The container's entry point.
#
#   tracegrad-entrypoint lab [JUPYTER OPTIONS...]   tracegrad doctor, then JupyterLab (the default)
#   tracegrad-entrypoint COMMAND [ARGS...]          run COMMAND instead (e.g. tracegrad doctor)
#
# JupyterLab listens on all interfaces of the container on $JUPYTER_PORT (8888), serves
# $NOTEBOOK_DIR (~/notebooks) and asks for a token: a fresh random one each start, printed in the
# log with the URL to open, unless $JUPYTER_TOKEN sets one. TRACEGRAD_DOCTOR=0 skips the doctor.
set -eu

if [ "$#" -gt 0 ] && [ "$1" != "lab" ]; then
    exec "$@"
fi
if [ "$#" -gt 0 ]; then
    shift  # "lab"
fi

if [ "${TRACEGRAD_DOCTOR:-1}" != "0" ]; then
    # What this container can use, in the log: the GPU should be listed under "CUDA devices".
    tracegrad doctor || echo "tracegrad-entrypoint: tracegrad doctor reported problems (above); starting JupyterLab anyway" >&2
fi

exec jupyter lab \
    --ip=0.0.0.0 \
    --port="${JUPYTER_PORT:-8888}" \
    --no-browser \
    --ServerApp.root_dir="${NOTEBOOK_DIR:-$HOME/notebooks}" \
    "$@"
