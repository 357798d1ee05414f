"""Every example in a docstring of the package runs and prints what it shows."""

import doctest
import importlib
import pkgutil

import pytest

import tracegrad

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(tracegrad.__path__, "tracegrad.")
    # __main__ runs the command when imported; the cuda modules and dask need optional packages
    if m.name != "tracegrad.__main__"
    and not m.name.startswith(("tracegrad.codegen_cuda", "tracegrad.cuda_", "tracegrad.dask"))
)


# the transforms whose docstrings must show an example (the style: a public API shows one, run here)
TRANSFORMS = (
    "grad",
    "value_and_grad",
    "jacobian",
    "hessian",
    "jit",
    "vmap",
    "jvp",
    "vjp",
    "linearize",
    "jacfwd",
    "jacrev",
    "hvp",
    "stop_gradient",
    "tap",
    "make_ir",
    "check_grad",
)


@pytest.mark.parametrize("name", TRANSFORMS)
def test_the_transforms_show_an_example(name):
    assert ">>>" in (getattr(tracegrad, name).__doc__ or ""), f"tg.{name} has no docstring example"


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, (
        f"{result.failed} docstring example(s) of {name} failed (output above)"
    )
