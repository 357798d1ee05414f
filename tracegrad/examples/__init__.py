"""Runnable examples. Each is a module with `run(backend=None, size=..., steps=..., plot=None,
quiet=False) -> dict` that prints its report and returns its key numbers.

    python3 -m tracegrad examples          # the list
    python3 -m tracegrad run mlp --plot boundary.png

or in Python:

    from tracegrad.examples import load
    numbers = load("newton").run(size=5, quiet=True)
"""

from __future__ import annotations

import difflib
import importlib
from types import ModuleType

# command-line name -> module name, in the order a new user should meet them
EXAMPLES = {
    "basics": "basics",
    "linear-regression": "linear_regression",
    "mlp": "mlp",
    "newton": "newton",
    "gaussian-process": "gaussian_process",
    "lennard-jones": "lennard_jones",
    "embedding-classifier": "embedding_classifier",
    "ode-sensitivity": "ode_sensitivity",
    "higher-order": "higher_order",
    "custom-gradient": "custom_gradient",
    "gradient-flow": "gradient_flow",
    "distributed-logreg": "distributed_logreg",
}

# Options beyond --size and --steps that some examples take (an example that does declares
# DEFAULT_<OPTION> and <OPTION>_HELP, like size and steps): name -> metavar.
EXTRA_OPTIONS = {"workers": "N", "rows": "N"}


def names() -> list[str]:
    return list(EXAMPLES)


def option_help(module: ModuleType, option: str) -> str | None:
    """What --size or --steps means for this example, or None when it takes no such option."""
    meaning = getattr(module, f"{option.upper()}_HELP", "")
    if meaning == "":  # not declared: generic words if the option has a default
        default = getattr(module, f"DEFAULT_{option.upper()}", 0)
        meaning = ("problem size" if option == "size" else "iterations") if default else None
    return meaning


def load(name: str) -> ModuleType:
    """The example module called `name` ('linear-regression' or 'linear_regression').

    Raises KeyError with the closest names when there is no such example."""
    key = name.strip().lower().replace("_", "-")
    if key not in EXAMPLES:
        close = difflib.get_close_matches(key, EXAMPLES, n=2)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise KeyError(f"no example called {name!r}{hint}")
    return importlib.import_module(f"{__name__}.{EXAMPLES[key]}")
