"""`tracegrad examples` and `tracegrad run NAME`: list the runnable examples, run one."""

from __future__ import annotations

import argparse
from typing import Any

from tracegrad import examples as _examples

from .common import UsageError, check_backend_name, default_backend


def cmd_examples(args: argparse.Namespace) -> int:
    print("tracegrad examples (run one with: tracegrad run NAME)")
    print()
    width = max(map(len, _examples.names()))
    for name in _examples.names():
        print(f"  {name:<{width}}  {_examples.load(name).DESCRIPTION}")
    print()
    print(
        f"options: --backend numpy|cpu|cuda (default here: {default_backend()}), --size N, "
        "--steps N, --plot FILE.png, --quiet; `tracegrad run --help` says what --size and "
        "--steps mean for each"
    )
    print()
    print(
        "notebooks (in the source tree): examples/notebooks/ holds Jupyter notebooks of the "
        "tutorial derivatives, Newton's method and an MLP; open them with "
        '`python3 -m pip install -e ".[notebook]"` and `jupyter lab examples/notebooks`'
    )
    return 0


def run_epilog() -> str:
    lines = ["what --size and --steps mean, and their defaults:"]
    for name in _examples.names():
        module = _examples.load(name)
        parts = []
        for option in ("size", "steps", *_examples.EXTRA_OPTIONS):
            meaning = _examples.option_help(module, option)
            if meaning:
                parts.append(
                    f"--{option}: {meaning} ({getattr(module, f'DEFAULT_{option.upper()}')})"
                )
        if getattr(module, "PLOT", False):
            parts.append("--plot")
        lines.append(
            f"  {name}: " + ("; ".join(parts) if parts else "no options besides --backend")
        )
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    try:
        module = _examples.load(args.name)
    except KeyError as exc:
        raise UsageError(exc.args[0], hint="`tracegrad examples` lists them") from None
    check_backend_name(args.backend, ("numpy", "cpu", "cuda"))
    kwargs: dict[str, Any] = {"backend": args.backend, "plot": args.plot, "quiet": args.quiet}
    for option in ("size", "steps", *_examples.EXTRA_OPTIONS):
        value = getattr(args, option)
        if value is None:
            continue
        if _examples.option_help(module, option) is None:
            raise UsageError(
                f"the {module.NAME} example takes no --{option}", hint=f"leave out --{option}"
            )
        kwargs[option] = value
    result = module.run(**kwargs)
    return 0 if result.get("ok", True) else 1
