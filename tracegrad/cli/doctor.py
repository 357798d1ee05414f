"""`tracegrad doctor`: versions, what `import tracegrad` finds here, usable backends, CUDA devices,
the disk cache, the environment."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import textwrap
import time

import numpy as np

import tracegrad as tg
from tracegrad.base import config

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


def shadowing(cwd: str | None = None, path: list[str] | None = None) -> str | None:
    """What stands in for this package when a Python started in `cwd` (the current folder) runs
    `import tracegrad`: a `tracegrad` folder found first on its import path (`path`: the folder,
    then this process's sys.path after its first entry), said with the fix; None when none does.
    A clone of the repository in `cwd` is the usual one: a folder without __init__.py, imported
    as an empty namespace package while an editable install's finder comes after it."""
    from importlib import invalidate_caches
    from importlib.machinery import PathFinder

    cwd = os.path.abspath(cwd or os.getcwd())
    if path is None:
        path = [cwd] + [os.path.abspath(p) if p else cwd for p in sys.path[1:]]
    invalidate_caches()  # a folder made since this process last looked
    spec = PathFinder.find_spec("tracegrad", path)
    here = os.path.dirname(os.path.abspath(tg.__file__))
    if spec is None:
        return None  # only the installed package's own finder (an editable install) finds it
    namespace = spec.origin is None or not os.path.isfile(spec.origin)
    if namespace:
        folder = next(iter(spec.submodule_search_locations))
    else:
        folder = os.path.dirname(spec.origin)
    if not namespace and os.path.samefile(folder, here):
        return None
    parent = os.path.dirname(folder)
    in_cwd = parent == cwd
    where = "the folder it runs in" if in_cwd else f"{parent}, on sys.path (PYTHONPATH?)"
    if namespace:
        what = (
            f"{folder} stands in for tracegrad: a Python started in {cwd} finds it first on its "
            f"import path ({where}), ahead of the installed package ({here}), and with no "
            "__init__.py in it imports it as an empty namespace package: `import tracegrad` "
            "succeeds, then tg.grad fails with \"module 'tracegrad' has no attribute 'grad'\"."
        )
    else:
        what = (
            f"{folder} stands in for tracegrad: `import tracegrad` in a Python started in {cwd} "
            f"imports that package ({where}), not the installed one ({here})."
        )
    clone = os.path.isfile(os.path.join(folder, "pyproject.toml"))
    if in_cwd and clone:
        fix = (
            f"It is a clone of the repository: run Python from inside it (cd {folder}), where "
            "tracegrad/ is the package itself, or from another folder."
        )
    elif in_cwd:
        fix = "Run Python from another folder, or rename that folder."
    else:
        fix = f"Take {parent} off PYTHONPATH (or sys.path), or rename that folder."
    return f"{what} {fix}"


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

    print("import path")
    shadow, error = guarded(shadowing)
    if error is not None:
        print(f"  could not check it: {error}")
    elif shadow is None:
        print(f"  `import tracegrad` in a Python started in {os.getcwd()} finds this package")
    else:
        problems += 1
        lines = textwrap.wrap(
            f"PROBLEM: {shadow}", 98, break_long_words=False, break_on_hyphens=False
        )
        print("\n".join(f"  {line}" for line in lines))  # paths stay whole, to copy
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
