"""`tracegrad doctor`: versions, usable backends, CUDA devices, the disk cache, the environment."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

import tracegrad as tg
from tracegrad import config

from .common import default_backend, describe_cache, guarded


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def _list_cuda_devices() -> list[str]:
    from numba import cuda

    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM", "") == "1"
    devices = []
    for gpu in cuda.gpus:
        name = getattr(gpu, "name", None) or ("simulated device" if simulated else "unnamed device")
        name = name.decode() if isinstance(name, bytes) else str(name)
        cc = ".".join(map(str, getattr(gpu, "compute_capability", ()) or ()))
        devices.append(
            f"{getattr(gpu, 'id', len(devices))}: {name}"
            + (f", compute capability {cc}" if cc else "")
            + (" (the CUDA simulator: NUMBA_ENABLE_CUDASIM=1)" if simulated else "")
        )
    return devices


def cuda_devices() -> tuple[list[str], str]:
    """(a line per CUDA device, why there are none). Never raises."""
    devices, error = guarded(_list_cuda_devices)
    if error is not None:
        return [], error
    return devices, "" if devices else "numba.cuda found no device"


ENVIRONMENT = {v.name: v.summary for v in config.VARIABLES}


def _smoke_test(backend: str) -> str:
    """Compute one known gradient on `backend`: how long it took, or what went wrong."""
    start = time.perf_counter()
    fun = tg.grad(lambda w, x, b: (w * x + b - 5.0) ** 2, backend=backend)
    value, error = guarded(fun, 2.0, 3.0, 1.0)
    seconds = time.perf_counter() - start
    if error is not None:
        return f"FAILED: {error}"
    if float(value) != 12.0:
        return f"WRONG: d/dw (w*x + b - 5)**2 at (2, 3, 1) gave {float(value)}, not 12"
    return f"a first gradient took {seconds * 1e3:.0f} ms (tracing and compiling included)"


def cmd_doctor(args: argparse.Namespace) -> int:
    problems = 0
    print("versions")
    rows = [
        ("tracegrad", f"{tg.__version__}  ({os.path.dirname(os.path.abspath(tg.__file__))})"),
        ("Python", f"{platform.python_version()}  ({sys.executable})"),
        ("NumPy", np.__version__),
        ("Numba", _version("numba")),
        ("llvmlite", _version("llvmlite")),
        ("platform", f"{platform.platform()}, {os.cpu_count()} CPUs"),
    ]
    for key, value in rows:
        print(f"  {key:<10} {value}")
    print()

    available, error = guarded(tg.available_backends)
    if error is not None:
        print(f"backends: could not list them: {error}")
        problems += 1
    if available:
        print(f"backends (default: {default_backend()})")
        for name, why in available.items():
            if why:
                print(f"  {name:<6} not usable: {why}")
            else:
                result = _smoke_test(name)
                problems += result.startswith(("WRONG", "FAILED"))
                print(f"  {name:<6} usable; {result}")
    print()

    print("CUDA devices")
    devices, why = cuda_devices()
    for line in devices:
        print(f"  {line}")
    if not devices:
        print(f"  none: {why}")
    print()

    print("disk cache")
    cache_info = getattr(tg, "cache_info", None)
    if cache_info is None:
        print(
            "  not available in this build of tracegrad (compiled programs are cached in memory, "
            "per process)"
        )
    else:
        info, error = guarded(cache_info)
        if error is not None:
            print(f"  could not read it: {error}")
            problems += 1
        for line in describe_cache(info) if error is None else []:
            print(f"  {line}")
    print()

    print("environment")
    shown = {
        key: repr(os.environ[key]) if key in os.environ else "(not set)" for key in ENVIRONMENT
    }
    width = max(map(len, shown.values()))
    for key, meaning in ENVIRONMENT.items():
        print(f"  {key:<27} {shown[key]:<{width}}  {meaning}")
    print()
    print(
        "doctor: everything works" if not problems else f"doctor: {problems} problem(s) found above"
    )
    return 0 if not problems else 1
