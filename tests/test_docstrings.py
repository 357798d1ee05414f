"""Every example in a docstring of the package runs and prints what it shows."""

import doctest
import importlib
import pkgutil

import pytest

import tracegrad

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(tracegrad.__path__, "tracegrad.")
    # __main__ runs the command when imported; the cuda modules and dask need optional packages
    if m.name != "tracegrad.__main__"
    and not m.name.startswith(("tracegrad.codegen_cuda", "tracegrad.cuda_", "tracegrad.dask"))
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed (output above)"
