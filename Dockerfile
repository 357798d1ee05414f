# tracegrad on an NVIDIA GPU, with JupyterLab and the example notebooks.
#
#   docker build -t tracegrad .
#   docker run --rm --gpus all -p 8888:8888 tracegrad             # JupyterLab on port 8888
#   docker run --rm --gpus all tracegrad tracegrad doctor         # what the container sees
#
# docs/container.md says more. The image is not built by the test suite (it has no Docker); the
# suite lints this file with hadolint and runs docker/entrypoint.sh and docker/healthcheck.py.

# A pinned CUDA runtime base: the host's driver comes in through the NVIDIA container toolkit;
# the CUDA libraries numba-cuda needs (NVVM, NVRTC, the runtime) come as wheels with `cuda12`.
FROM nvidia/cuda:12.6.3-runtime-ubuntu24.04

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    TRACEGRAD_BACKEND=cuda \
    JUPYTER_PORT=8888

# Python and tini (a PID 1 that reaps Jupyter's kernels). Their versions are those of the base
# image's Ubuntu release, which the pinned tag fixes; Ubuntu's archive keeps only the latest patch
# of each package, so pinning an exact version here would break the build when it is replaced.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv tini \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv "$VIRTUAL_ENV" \
    && useradd --create-home --shell /bin/bash --uid 1001 --user-group tracegrad

# tracegrad with the cuda backend's CUDA wheels and the notebook tools (JupyterLab, ipykernel,
# matplotlib): installed from this source tree, so the image holds this version, with its
# dependencies at the versions in docker/constraints.txt.
WORKDIR /opt/tracegrad
COPY pyproject.toml README.md docker/constraints.txt ./
COPY tracegrad ./tracegrad
RUN pip install --no-cache-dir --constraint constraints.txt ".[cuda12,notebook]"

COPY --chmod=755 docker/entrypoint.sh /usr/local/bin/tracegrad-entrypoint
COPY --chmod=755 docker/healthcheck.py /usr/local/bin/tracegrad-healthcheck
COPY --chown=1001:1001 examples/notebooks /home/tracegrad/notebooks

USER 1001:1001
WORKDIR /home/tracegrad/notebooks
EXPOSE 8888

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["tracegrad-healthcheck"]

ENTRYPOINT ["tini", "--", "tracegrad-entrypoint"]
CMD ["lab"]
