"""`python3 -m tracegrad ...` is the `tracegrad` command."""

import os
import sys


def _load_this_package() -> bool:
    """Run from a folder holding a clone named tracegrad (no __init__.py at its root), Python
    imports that folder as an empty namespace package `tracegrad` and finds this file through an
    editable install's finder: load the package this file belongs to in its place, so the command
    works (and says why the user's own `import tracegrad` does not). Whether it did."""
    package = sys.modules.get("tracegrad")
    if package is None or getattr(package, "__file__", None) is not None:
        return False
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for name in [n for n in sys.modules if n.startswith("tracegrad.")]:
        del sys.modules[name]  # found under the namespace package: found again under this one
    spec = importlib.util.spec_from_file_location(
        "tracegrad", os.path.join(here, "__init__.py"), submodule_search_locations=[here]
    )
    sys.modules["tracegrad"] = module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return True


if _load_this_package() and sys.argv[1:2] != ["doctor"]:  # doctor says it in its report
    from tracegrad.cli.doctor import shadowing

    why = shadowing() or "a namespace package stands in for tracegrad"
    here = os.path.dirname(os.path.abspath(__file__))
    print(f"tracegrad: warning: {why}\ntracegrad: this command runs {here}\n", file=sys.stderr)

from tracegrad.cli import main  # noqa: E402

sys.exit(main())
