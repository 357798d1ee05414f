"""The `tracegrad` command (also `python3 -m tracegrad`): the last stage, above the public API.

It uses only `tracegrad`'s public API and the examples. One module per subcommand (run.py: the
examples; ir.py; doctor.py; cache.py), the inputs of `ir` in inputs.py, and what they share in
common.py; this module builds the parser and reports errors.

    tracegrad examples                      list the runnable examples
    tracegrad run NAME [options]            run one: --backend, --size, --steps, --plot, --quiet
    tracegrad ir FILE.py:FUNC --args SPEC   print the IR of your own function (--grad, --hessian,
                                            --kernels)
    tracegrad doctor                        versions, backends, CUDA devices, the disk cache
    tracegrad cache info|list|clear         the compiled-kernel disk cache

Errors print as one line and a hint; --debug shows the traceback instead. Exit status: 0 ok,
1 failed, 2 a usage mistake (a bad option or argument value).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import tracegrad as tg
from tracegrad import examples as _examples
from tracegrad.examples._common import ExampleError

from . import cache, doctor, ir, run
from .common import EXIT_FAILED, EXIT_USAGE, PROG, CLIError, UsageError
from .inputs import ARGS_HELP, load_function, parse_args_spec

__all__ = ["CLIError", "UsageError", "build_parser", "load_function", "main", "parse_args_spec"]


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the full traceback on errors",
    )
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="tracegrad: exact derivatives of plain NumPy code, compiled to fused kernels.",
        epilog="Start with: tracegrad run basics. Documentation: docs/ in the source tree.",
    )
    parser.add_argument("--version", action="version", version=f"tracegrad {tg.__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("examples", parents=[common], help="list the runnable examples")
    p.set_defaults(handler=run.cmd_examples)

    p = sub.add_parser(
        "run",
        parents=[common],
        help="run an example",
        description="Run one of the examples (`tracegrad examples` lists them).",
        epilog=run.run_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", metavar="NAME", help="the example, e.g. basics or linear-regression")
    p.add_argument(
        "--backend",
        metavar="{numpy,cpu,cuda}",
        help="where to run (default: the fastest available here, or $TRACEGRAD_BACKEND)",
    )
    p.add_argument("--size", type=int, metavar="N", help="problem size (see below)")
    p.add_argument("--steps", type=int, metavar="N", help="iterations (see below)")
    for option, metavar in _examples.EXTRA_OPTIONS.items():  # the examples that take them say so
        p.add_argument(f"--{option}", type=int, metavar=metavar, help=f"{option} (see below)")
    p.add_argument("--plot", metavar="FILE.png", help="save a plot (needs matplotlib)")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing, not even progress")
    p.set_defaults(handler=run.cmd_run)

    p = sub.add_parser(
        "ir",
        parents=[common],
        help="print the IR of a function in your own file",
        description="Trace FUNC from FILE.py on arguments of the shapes in --args and print its "
        "IR; with --grad or --hessian, the derivative's IR too; with --kernels, the generated "
        "kernel source.",
        epilog=ARGS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="FILE.py:FUNC", help="the function (FUNC may be dotted)")
    p.add_argument(
        "--args",
        metavar="SPEC",
        default="",
        help="argument shapes and values, e.g. 'f64[3],f32[2,4],2.0' (see below)",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--grad", action="store_true", help="also print the gradient's IR")
    which.add_argument("--hessian", action="store_true", help="also print the hessian's IR")
    p.add_argument(
        "--argnums",
        metavar="I[,J...]",
        help="the argument(s) to differentiate (default: the first traced one)",
    )
    p.add_argument(
        "--kernels",
        action="store_true",
        help="also print the generated kernel source (needs a fused backend)",
    )
    p.add_argument(
        "--backend", metavar="{cpu,cuda}", help="the backend whose kernels --kernels shows"
    )
    p.add_argument(
        "--no-optimize", action="store_true", help="show the graphs before simplification"
    )
    p.set_defaults(handler=ir.cmd_ir)

    p = sub.add_parser(
        "doctor",
        parents=[common],
        help="versions, usable backends, CUDA devices and the disk cache",
    )
    p.set_defaults(handler=doctor.cmd_doctor)

    p = sub.add_parser(
        "cache",
        parents=[common],
        help="the compiled-kernel disk cache",
        description="info: the folder, its entries and their size on disk; list: each entry "
        "(backend, size, last use, the array types or shapes and source lines it was compiled "
        "for); clear: delete them all.",
    )
    p.add_argument("action", choices=["info", "list", "clear"])
    p.set_defaults(handler=cache.cmd_cache)
    return parser


def _report(exc: BaseException) -> None:
    """One readable line (or a few, for a traced-source excerpt) and a hint, on stderr."""
    hint = getattr(exc, "hint", "")
    if isinstance(exc, (CLIError, ExampleError)):
        text = str(exc)
    elif isinstance(exc, (tg.TracingError, tg.ShapeError, tg.BackendError, tg.GradientCheckError)):
        text = f"{type(exc).__name__}: {exc}"
    else:
        text = f"{type(exc).__name__}: {exc}"
        hint = hint or "run again with --debug for the full traceback"
    first, *rest = text.strip().splitlines() or [""]
    print(f"{PROG}: error: {first}", file=sys.stderr)
    for line in rest:
        print(f"  {line.strip()}", file=sys.stderr)
    if hint:
        print(f"  hint: {hint}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 failed, 2 usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`tracegrad examples | head`): stop quietly, as `git log | head`
        # does, and point stdout at nothing so the interpreter's flush at exit cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13  # SIGPIPE
    except Exception as exc:
        if args.debug:
            raise
        _report(exc)
        return EXIT_USAGE if getattr(exc, "usage", False) else EXIT_FAILED
