"""The `tracegrad` command (also `python3 -m tracegrad`).

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
import ast
import contextlib
import difflib
import importlib
import importlib.util
import inspect
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import tracegrad as tg
from tracegrad import config
from tracegrad import examples as _examples
from tracegrad.examples._common import ExampleError
from tracegrad.ir import DTYPE_NAMES, type_str

PROG = "tracegrad"


class CLIError(Exception):
    """A problem the user can fix: printed as `tracegrad: error: MESSAGE` and `  hint: HINT`."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


class UsageError(CLIError):
    """A mistake in the command line itself (a bad option or argument value): exit status 2."""

    usage = True


EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


# ----------------------------------------------------------------------------------------------
# tracegrad examples / tracegrad run


def cmd_examples(args: argparse.Namespace) -> int:
    print("tracegrad examples (run one with: tracegrad run NAME)")
    print()
    width = max(map(len, _examples.names()))
    for name in _examples.names():
        print(f"  {name:<{width}}  {_examples.load(name).DESCRIPTION}")
    print()
    print(f"options: --backend numpy|cpu|cuda (default here: {_default_backend()}), --size N, "
          "--steps N, --plot FILE.png, --quiet; `tracegrad run --help` says what --size and "
          "--steps mean for each")
    print()
    print("notebooks (in the source tree): examples/notebooks/ holds Jupyter notebooks of the "
          "tutorial derivatives, Newton's method and an MLP; open them with "
          "`python3 -m pip install -e \".[notebook]\"` and `jupyter lab examples/notebooks`")
    return 0


def _default_backend() -> str:
    name, error = guarded(tg.default_backend_name)  # a bad TRACEGRAD_BACKEND must not break this
    return name if error is None else f"unknown ({error})"


def _run_epilog() -> str:
    lines = ["what --size and --steps mean, and their defaults:"]
    for name in _examples.names():
        module = _examples.load(name)
        parts = []
        for option in ("size", "steps", *_examples.EXTRA_OPTIONS):
            meaning = _examples.option_help(module, option)
            if meaning:
                parts.append(f"--{option}: {meaning} ({getattr(module, f'DEFAULT_{option.upper()}')})")
        if getattr(module, "PLOT", False):
            parts.append("--plot")
        lines.append(f"  {name}: " + ("; ".join(parts) if parts else "no options besides --backend"))
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    try:
        module = _examples.load(args.name)
    except KeyError as exc:
        raise UsageError(exc.args[0], hint="`tracegrad examples` lists them") from None
    _check_backend_name(args.backend, ("numpy", "cpu", "cuda"))
    kwargs: dict[str, Any] = {"backend": args.backend, "plot": args.plot, "quiet": args.quiet}
    for option in ("size", "steps", *_examples.EXTRA_OPTIONS):
        value = getattr(args, option)
        if value is None:
            continue
        if _examples.option_help(module, option) is None:
            raise UsageError(f"the {module.NAME} example takes no --{option}", hint=f"leave out --{option}")
        kwargs[option] = value
    result = module.run(**kwargs)
    return 0 if result.get("ok", True) else 1


def _check_backend_name(name: str | None, known: tuple[str, ...]) -> None:
    """An unknown backend name is a usage mistake (an unusable known one is not)."""
    if name is not None and name not in known:
        raise UsageError(f"unknown backend {name!r}; choose one of {', '.join(known)}",
                         hint="`tracegrad doctor` says which backends work on this machine")


# ----------------------------------------------------------------------------------------------
# tracegrad ir


ARGS_HELP = """\
--args gives one item per positional argument of FUNC, separated by commas:
  f64[3]      a float64 array of shape (3,)     (dtypes: f64 f32 f16 i64 i32 i16 i8 u8 bool)
  f32[2,4]    a float32 array of shape (2, 4)
  [5]         a float64 array of shape (5,)     (f64 is the default dtype)
  f64[]       a 0-d float64 array               (so is a bare dtype: f64)
  2.0         a Python number (traced as f64[]; tracegrad traces numbers like 0-d arrays)
  static:3    a static argument, passed as it is and not traced (any Python literal:
              static:(2,3), static:'tanh', static:True); the IR is specialised on its value
Arrays are filled with numbers in [0.5, 1.5); only shapes and dtypes shape the IR.

examples:
  tracegrad ir examples/model.py:loss --args 'f64[3],f64[100,3],f64[100]' --grad
  tracegrad ir examples/model.py:energy --args 'f64[4]' --hessian
  tracegrad ir examples/model.py:step --args 'f32[8],static:3' --grad --argnums 0"""

_DTYPES = {name: dtype for dtype, name in DTYPE_NAMES.items()}


def _split_top_level(spec: str) -> list[str]:
    """Split at commas outside brackets, parentheses and quotes."""
    items, depth, quote, current = [], 0, "", []
    for ch in spec:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    items.append("".join(current).strip())
    return items


def parse_args_spec(spec: str, seed: int = 0) -> tuple[list[Any], tuple[int, ...]]:
    """'f64[3],f32[2,4],2.0,static:3' -> (argument values, positions of the static ones)."""
    if not spec.strip():
        return [], ()
    rng = np.random.default_rng(seed)
    values: list[Any] = []
    static: list[int] = []
    for position, item in enumerate(_split_top_level(spec)):
        values.append(_parse_item(item, rng))
        if item.startswith("static:"):
            static.append(position)
    return values, tuple(static)


def _bad_item(item: str, why: str) -> CLIError:
    return UsageError(
        f"cannot read the --args item {item!r}: {why}",
        hint="items look like f64[3], f32[2,4], 2.0 or static:3, separated by commas; see "
        "`tracegrad ir --help`",
    )


def _parse_item(item: str, rng: np.random.Generator) -> Any:
    if not item:
        raise _bad_item(item, "it is empty (two commas in a row?)")
    if item.startswith("static:"):
        text = item[len("static:"):].strip()
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise _bad_item(item, f"{text!r} is not a Python literal (a number, string, tuple...)") from None
    head, bracket, rest = item.partition("[")
    head = head.strip()
    if not bracket:
        if head in _DTYPES:
            return _fill((), _DTYPES[head], rng)
        try:
            number = ast.literal_eval(item)
        except (ValueError, SyntaxError):
            number = None
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise _bad_item(item, "it is neither an array type like f64[3] nor a number")
        return float(number)
    if not rest.endswith("]"):
        raise _bad_item(item, "the shape has no closing ]")
    dtype = _DTYPES.get(head or "f64")
    if dtype is None:
        raise _bad_item(item, f"unknown dtype {head!r}; use one of {', '.join(_DTYPES)}")
    dims_text = rest[:-1].strip()
    try:
        shape = tuple(int(d) for d in dims_text.split(",")) if dims_text else ()
    except ValueError:
        raise _bad_item(item, "a shape is a list of whole numbers, like [2,4]") from None
    if any(d < 0 for d in shape):
        raise _bad_item(item, "dimensions cannot be negative")
    return _fill(shape, dtype, rng)


def _fill(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if dtype == np.bool_:
        return np.ones(shape, dtype=bool)
    if np.issubdtype(dtype, np.integer):
        return np.ones(shape, dtype=dtype)
    return rng.uniform(0.5, 1.5, shape).astype(dtype)


def load_function(target: str) -> tuple[Callable, str]:
    """'path/to/file.py:name' or 'package.module:name' -> (the function, its name)."""
    where, colon, attr = target.rpartition(":")
    if not colon or not where or not attr:
        raise UsageError(
            f"expected FILE.py:FUNCTION, got {target!r}",
            hint="for example: tracegrad ir examples/model.py:loss --args 'f64[3]'",
        )
    if where.endswith(".py") or os.sep in where or os.path.exists(where):
        module = _import_file(where)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            missing = isinstance(exc, ModuleNotFoundError) and exc.name == where.split(".")[0]
            raise (UsageError if missing else CLIError)(
                f"cannot import module {where!r}: {exc}",
                hint="give a path to a .py file, or a module on sys.path") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            known = [k for k, v in vars(module).items() if callable(v) and not k.startswith("_")]
            close = difflib.get_close_matches(part, known, n=3)
            hint = (f"did you mean {', '.join(close)}?" if close
                    else f"callables there: {', '.join(sorted(known)) or 'none'}")
            raise UsageError(f"{where} has no {attr!r}", hint=hint)
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"{where}:{attr} is a {type(obj).__name__}, not a function")
    return obj, attr


def _import_file(path: str):
    if not os.path.isfile(path):
        raise UsageError(f"no such file: {path}",
                         hint="give the path of a .py file that defines the function, e.g. "
                         "examples/model.py:loss in the source tree")
    path = os.path.abspath(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    name = stem if stem.isidentifier() and stem not in sys.modules else f"_tracegrad_user_{abs(hash(path))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, os.path.dirname(path))
    try:
        spec.loader.exec_module(module)
    except CLIError:
        raise
    except SystemExit:
        raise CLIError(f"{path} called sys.exit() while being imported",
                       hint='put its script part under `if __name__ == "__main__":`') from None
    except Exception as exc:
        sys.modules.pop(name, None)
        raise CLIError(f"importing {path} failed: {type(exc).__name__}: {exc}",
                       hint="run again with --debug for the traceback") from exc
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(os.path.dirname(path))
    return module


def _check_arity(fun: Callable, name: str, values: list[Any]) -> None:
    if isinstance(fun, (tg.Transformed, tg.custom_vjp)):
        fun = fun.fun
    try:
        signature = inspect.signature(fun)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*values)
    except TypeError:
        params = [p for p in signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        raise UsageError(
            f"{name}{signature} does not take the {len(values)} argument(s) that --args gives",
            hint=f"give one --args item per argument ({', '.join(p.name for p in params)}); "
            "see `tracegrad ir --help`",
        ) from None


def _signature_text(name: str, values: list[Any], static: tuple[int, ...]) -> str:
    parts = []
    for i, v in enumerate(values):
        if i in static:
            parts.append(f"static {v!r}")
        else:
            a = np.asarray(v)
            parts.append(type_str(a.shape, a.dtype))
    return f"{name}({', '.join(parts)})"


def _argnums(text: str | None, static: tuple[int, ...], count: int) -> int | tuple[int, ...]:
    if text is None:
        candidates = [i for i in range(count) if i not in static]
        if not candidates:
            raise UsageError("there is no traced argument to differentiate",
                           hint="give at least one array or number in --args")
        return candidates[0]
    try:
        nums = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise UsageError(f"--argnums takes whole numbers separated by commas, got {text!r}") from None
    for i in nums:
        if not 0 <= i < count or i in static:
            what = "static" if i in static else "out of range"
            raise UsageError(f"--argnums {i} is {what}: --args gives {count} argument(s), counted from 0",
                           hint="differentiate with respect to a traced (non-static) argument")
    return nums[0] if len(nums) == 1 else nums


def _parameter_names(fun: Callable) -> list[str]:
    inner = fun.fun if isinstance(fun, (tg.Transformed, tg.custom_vjp)) else fun
    try:
        return list(inspect.signature(inner).parameters)
    except (TypeError, ValueError):
        return []


def _describe_argnums(fun: Callable, argnums: int | tuple[int, ...]) -> str:
    names = _parameter_names(fun)
    nums = (argnums,) if isinstance(argnums, int) else argnums
    return ", ".join(names[i] if i < len(names) else f"argument {i}" for i in nums)


def cmd_ir(args: argparse.Namespace) -> int:
    make_kernels = getattr(tg, "make_kernels", None)
    if args.kernels and make_kernels is None:
        raise CLIError(
            "this build of tracegrad has no fused backend, so there is no kernel source to show",
            hint="leave out --kernels to see the IR; the kernels come with the cpu and cuda backends",
        )
    _check_backend_name(args.backend, ("cpu", "cuda"))
    fun, name = load_function(args.target)
    values, static = parse_args_spec(args.args or "")
    _check_arity(fun, name, values)
    optimize = not args.no_optimize
    stage = "optimised" if optimize else "as traced, unoptimised"

    # Build everything before printing anything, so an error is not preceded by half a report.
    sections = [(f"{_signature_text(name, values, static)}: the traced IR ({stage})",
                 tg.make_ir(fun, static_argnums=static, optimize=optimize)(*values))]
    shown: Callable = fun
    if args.grad or args.hessian:
        argnums = _argnums(args.argnums, static, len(values))
        wrt = _describe_argnums(fun, argnums)
        if args.hessian:
            shown = tg.hessian(fun, argnums=argnums, static_argnums=static)
            title = f"hessian of {name} with respect to {wrt} ({stage})"
        else:
            shown = tg.grad(fun, argnums=argnums, static_argnums=static)
            title = f"grad of {name} with respect to {wrt}: the adjoint IR ({stage})"
        sections.append((title, tg.make_ir(shown, optimize=optimize)(*values)))
    if args.kernels:
        backend = args.backend or tg.default_backend_name()
        sections.append((f"generated kernels (backend: {backend})",
                         _kernel_source(make_kernels, shown, static, args.backend, values)))
    for i, (title, body) in enumerate(sections):
        if i:
            print()
        print(f"# {title}")
        print(body)
    return 0


def _kernel_source(make_kernels: Callable, fun: Callable, static: tuple[int, ...],
                   backend: str | None, values: list[Any]) -> str:
    kwargs: dict[str, Any] = {}
    try:
        params = inspect.signature(make_kernels).parameters
    except (TypeError, ValueError):
        params = {}
    if "static_argnums" in params and not isinstance(fun, tg.Transformed):
        kwargs["static_argnums"] = static
    if backend is not None and "backend" in params:
        kwargs["backend"] = backend
    result = make_kernels(fun, **kwargs)(*values)
    if isinstance(result, str):
        return result
    source = getattr(result, "source", None)
    return source if isinstance(source, str) else str(result)


# ----------------------------------------------------------------------------------------------
# tracegrad doctor


def guarded(fun: Callable, *args: Any) -> tuple[Any, str | None]:
    """(fun(*args), None), or (None, 'Error: message') if it raised anything at all.

    The doctor must report whatever is broken on a machine, never crash on it."""
    try:
        return fun(*args), None
    except Exception as exc:  # reporting any failure is the point
        return None, f"{type(exc).__name__}: {_one_line(exc)}"


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def _one_line(text: str) -> str:
    return " ".join(str(text).split()).rstrip(" :")


def _list_cuda_devices() -> list[str]:
    from numba import cuda

    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM", "") == "1"
    devices = []
    for gpu in cuda.gpus:
        name = getattr(gpu, "name", None) or ("simulated device" if simulated else "unnamed device")
        name = name.decode() if isinstance(name, bytes) else str(name)
        cc = ".".join(map(str, getattr(gpu, "compute_capability", ()) or ()))
        devices.append(f"{getattr(gpu, 'id', len(devices))}: {name}"
                       + (f", compute capability {cc}" if cc else "")
                       + (" (the CUDA simulator: NUMBA_ENABLE_CUDASIM=1)" if simulated else ""))
    return devices


def cuda_devices() -> tuple[list[str], str]:
    """(a line per CUDA device, why there are none). Never raises."""
    devices, error = guarded(_list_cuda_devices)
    if error is not None:
        return [], error
    return devices, "" if devices else "numba.cuda found no device"


def _format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# Counters of the process that asks (kernels loaded, programs in memory): they describe the
# Python API's process (tg.cache_info()), and mean nothing to a command that has just started.
_IN_PROCESS = ("loaded", "programs")


def _describe_cache(info: Any) -> list[str]:
    """Lines describing what is on disk, from whatever tracegrad.cache_info() returns (a mapping
    or an object)."""
    if hasattr(info, "_asdict"):
        info = info._asdict()
    elif not isinstance(info, dict) and hasattr(info, "__dict__"):
        info = {k: v for k, v in vars(info).items() if not k.startswith("_")}
    if not isinstance(info, dict):
        return [str(info)]
    info = {k: v for k, v in info.items() if k not in _IN_PROCESS}
    if "directory" in info and info["directory"] is None:
        info["directory"] = "(none: the disk cache is off, TRACEGRAD_CACHE_DIR=off)"
    lines = []
    width = max((len(str(k)) for k in info), default=0)
    for key, value in info.items():
        if isinstance(value, (int, float)) and ("bytes" in str(key) or str(key) == "size"):
            value = f"{_format_bytes(value)} ({value:,} bytes)"
        lines.append(f"{key!s:<{width}}  {value}")
    return lines


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
        print(f"backends (default: {_default_backend()})")
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
        print("  not available in this build of tracegrad (compiled programs are cached in memory, "
              "per process)")
    else:
        info, error = guarded(cache_info)
        if error is not None:
            print(f"  could not read it: {error}")
            problems += 1
        for line in _describe_cache(info) if error is None else []:
            print(f"  {line}")
    print()

    print("environment")
    shown = {key: repr(os.environ[key]) if key in os.environ else "(not set)" for key in ENVIRONMENT}
    width = max(map(len, shown.values()))
    for key, meaning in ENVIRONMENT.items():
        print(f"  {key:<27} {shown[key]:<{width}}  {meaning}")
    print()
    print("doctor: everything works" if not problems else f"doctor: {problems} problem(s) found above")
    return 0 if not problems else 1


# ----------------------------------------------------------------------------------------------
# tracegrad cache


def cmd_cache(args: argparse.Namespace) -> int:
    info, clear = getattr(tg, "cache_info", None), getattr(tg, "clear_cache", None)
    if info is None or clear is None:
        raise CLIError(
            "the disk cache is not available in this build of tracegrad",
            hint="compiled programs are still cached in memory for the life of the process; "
            "tracegrad.clear_programs() empties that cache",
        )
    if args.action == "info":
        for line in _describe_cache(info()):
            print(line)
        limit, _ = guarded(lambda: importlib.import_module("tracegrad.cache")._max_bytes())
        if limit is not None:
            print(f"{'limit':<9}  {_format_bytes(limit)} (TRACEGRAD_CACHE_MAX_MB; the least "
                  "recently used kernels go first)")
        print("`tracegrad cache list` shows each entry")
        return 0
    if args.action == "list":
        return _cache_list()
    result = clear()
    print("cache cleared" + (f": {result}" if result not in (None, "") else ""))
    return 0


def _cache_list() -> int:
    cache = importlib.import_module("tracegrad.cache")
    root, entries = cache.cache_dir(), cache.entries()
    if root is None:
        print("the disk cache is off (TRACEGRAD_CACHE_DIR=off): nothing is on disk")
        return 0
    total = sum(e.bytes for e in entries)
    print(f"kernel cache {root}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, "
          f"{_format_bytes(total)}" + ("" if entries else " (empty)"))
    if not entries:
        return 0
    print()
    print(f"  {'key':<12}  {'backend':<7}  {'size':>9}  {'last used':<16}  contents")
    for e in entries:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used))
        what = [e.summary]
        if e.signatures:
            what.append("compiled for arrays " + " | ".join(f"({s})" for s in e.signatures))
        if e.shapes:
            what.append("shapes " + " ".join(e.shapes))
        if e.sources:
            what.append("from " + " ".join(e.sources))
        print(f"  {e.key[:12]:<12}  {e.backend:<7}  {_format_bytes(e.bytes):>9}  {used:<16}  "
              + "; ".join(what))
    print()
    print("Entries are kernels keyed by their source, shared by every function and shape that "
          "generates the same code. A cpu kernel is compiled per array rank and dtype (any "
          "shape); a cuda program bakes in its shapes and names the source lines it came from.")
    return 0


# ----------------------------------------------------------------------------------------------
# The parser and the error handling


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback on errors")
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="tracegrad: exact derivatives of plain NumPy code, compiled to fused kernels.",
        epilog="Start with: tracegrad run basics. Documentation: docs/ in the source tree.",
    )
    parser.add_argument("--version", action="version", version=f"tracegrad {tg.__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("examples", parents=[common], help="list the runnable examples")
    p.set_defaults(handler=cmd_examples)

    p = sub.add_parser(
        "run", parents=[common], help="run an example",
        description="Run one of the examples (`tracegrad examples` lists them).",
        epilog=_run_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", metavar="NAME", help="the example, e.g. basics or linear-regression")
    p.add_argument("--backend", metavar="{numpy,cpu,cuda}",
                   help="where to run (default: the fastest available here, or $TRACEGRAD_BACKEND)")
    p.add_argument("--size", type=int, metavar="N", help="problem size (see below)")
    p.add_argument("--steps", type=int, metavar="N", help="iterations (see below)")
    for option, metavar in _examples.EXTRA_OPTIONS.items():  # the examples that take them say so
        p.add_argument(f"--{option}", type=int, metavar=metavar, help=f"{option} (see below)")
    p.add_argument("--plot", metavar="FILE.png", help="save a plot (needs matplotlib)")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing, not even progress")
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser(
        "ir", parents=[common], help="print the IR of a function in your own file",
        description="Trace FUNC from FILE.py on arguments of the shapes in --args and print its "
        "IR; with --grad or --hessian, the derivative's IR too; with --kernels, the generated "
        "kernel source.",
        epilog=ARGS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="FILE.py:FUNC", help="the function (FUNC may be dotted)")
    p.add_argument("--args", metavar="SPEC", default="",
                   help="argument shapes and values, e.g. 'f64[3],f32[2,4],2.0' (see below)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--grad", action="store_true", help="also print the gradient's IR")
    which.add_argument("--hessian", action="store_true", help="also print the hessian's IR")
    p.add_argument("--argnums", metavar="I[,J...]",
                   help="the argument(s) to differentiate (default: the first traced one)")
    p.add_argument("--kernels", action="store_true",
                   help="also print the generated kernel source (needs a fused backend)")
    p.add_argument("--backend", metavar="{cpu,cuda}", help="the backend whose kernels --kernels shows")
    p.add_argument("--no-optimize", action="store_true", help="show the graphs before simplification")
    p.set_defaults(handler=cmd_ir)

    p = sub.add_parser("doctor", parents=[common],
                       help="versions, usable backends, CUDA devices and the disk cache")
    p.set_defaults(handler=cmd_doctor)

    p = sub.add_parser(
        "cache", parents=[common], help="the compiled-kernel disk cache",
        description="info: the folder, its entries and their size on disk; list: each entry "
        "(backend, size, last use, the array types or shapes and source lines it was compiled "
        "for); clear: delete them all.",
    )
    p.add_argument("action", choices=["info", "list", "clear"])
    p.set_defaults(handler=cmd_cache)
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
    except Exception as exc:
        if args.debug:
            raise
        _report(exc)
        return EXIT_USAGE if getattr(exc, "usage", False) else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
