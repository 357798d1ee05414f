"""Backends turn an optimised graph into a callable on NumPy arrays.

`numpy` is the reference interpreter. The fused backends (`cpu`, `cuda`) live in their code
generator modules and are imported only when asked for, so importing tracegrad stays cheap.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from ..base import config
from .. import interpreter
from ..base.errors import BackendError
from ..cpu import cpu_available, cpu_variant
from ..ir import Graph

Executable = Callable[[Sequence[np.ndarray]], list[np.ndarray]]


class Backend(Protocol):
    name: str

    def available(self) -> tuple[bool, str]:
        """(usable here, why not)."""

    def compile(self, graph: Graph) -> Executable: ...


class NumpyBackend:
    name = "numpy"

    def available(self) -> tuple[bool, str]:
        return True, ""

    def compile(self, graph: Graph) -> Executable:
        return lambda args: interpreter.evaluate(graph, args)


# name -> module that defines `BACKEND`; fastest first.
_FUSED = {"cpu": "tracegrad.codegen_cpu", "cuda": "tracegrad.codegen_cuda"}
_PREFERENCE = ("cpu", "numpy")
_loaded: dict[str, Backend] = {"numpy": NumpyBackend()}

NAMES = ("numpy", "cpu", "cuda")


_missing: set[str] = set()


class _Deferred:
    """The cpu backend before its code generator is needed: found and keyed without importing
    `tracegrad.codegen_cpu` (and the fusion planner), which is imported when it compiles."""

    name = "cpu"

    def __init__(self, module_name: str):
        self._module_name = module_name

    def _real(self) -> Backend:
        return importlib.import_module(self._module_name).BACKEND

    def available(self) -> tuple[bool, str]:
        return cpu_available()

    def variant(self) -> tuple:
        return cpu_variant()

    def compile(self, graph: Graph) -> Executable:
        return self._real().compile(graph)

    def __getattr__(self, attr: str):
        return getattr(self._real(), attr)


def _load(name: str) -> Backend | None:
    if name in _loaded:
        return _loaded[name]
    module_name = _FUSED.get(name)
    if module_name is None or name in _missing:
        return None
    if name == "cpu" and module_name not in sys.modules:
        if importlib.util.find_spec(module_name) is None:  # not part of this build
            _missing.add(name)
            return None
        _loaded[name] = _Deferred(module_name)
        return _loaded[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:  # this backend is not part of this build
            _missing.add(name)
            return None
        raise
    _loaded[name] = module.BACKEND
    return module.BACKEND


def available_backends() -> dict[str, str]:
    """Each known backend name -> '' if usable here, else why not."""
    out = {}
    for name in NAMES:
        backend = _load(name)
        if backend is None:
            out[name] = "not part of this build"
        else:
            ok, why = backend.available()
            out[name] = "" if ok else why
    return out


def default_backend_name() -> str:
    chosen = config.backend()
    if chosen:
        return chosen
    for name in _PREFERENCE:
        backend = _load(name)
        if backend is not None and backend.available()[0]:
            return name
    return "numpy"


_resolved: dict[tuple[str | None, str], Backend] = {}


def get_backend(name: str | None) -> Backend:
    """The backend called `name` (None: TRACEGRAD_BACKEND, else the fastest available)."""
    key = (name, config.backend())
    backend = _resolved.get(key)
    if backend is None:
        backend = _resolved[key] = _get_backend(name)
    return backend


def _get_backend(name: str | None) -> Backend:
    name = default_backend_name() if name is None else name
    if name not in NAMES:
        raise BackendError(
            f"unknown backend {name!r}; choose one of {', '.join(map(repr, NAMES))} "
            "(or unset TRACEGRAD_BACKEND for the fastest available)"
        )
    backend = _load(name)
    if backend is None:
        raise BackendError(f"backend {name!r} is not part of this build of tracegrad; use 'numpy'")
    ok, why = backend.available()
    if not ok:
        raise BackendError(
            f"backend {name!r} is not available here: {why}. Run `tracegrad doctor` to see what "
            "this machine supports, or use backend='cpu'."
        )
    return backend
