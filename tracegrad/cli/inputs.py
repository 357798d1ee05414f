"""The inputs of `tracegrad ir`: the --args specification of argument types, and FILE.py:FUNC."""

from __future__ import annotations

import ast
import contextlib
import difflib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from tracegrad.ir import DTYPE_NAMES

from .common import CLIError, UsageError

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
        text = item[len("static:") :].strip()
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise _bad_item(
                item, f"{text!r} is not a Python literal (a number, string, tuple...)"
            ) from None
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
                hint="give a path to a .py file, or a module on sys.path",
            ) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            known = [k for k, v in vars(module).items() if callable(v) and not k.startswith("_")]
            close = difflib.get_close_matches(part, known, n=3)
            hint = (
                f"did you mean {', '.join(close)}?"
                if close
                else f"callables there: {', '.join(sorted(known)) or 'none'}"
            )
            raise UsageError(f"{where} has no {attr!r}", hint=hint)
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"{where}:{attr} is a {type(obj).__name__}, not a function")
    return obj, attr


def _import_file(path: str):
    if not os.path.isfile(path):
        raise UsageError(
            f"no such file: {path}",
            hint="give the path of a .py file that defines the function, e.g. "
            "examples/model.py:loss in the source tree",
        )
    path = os.path.abspath(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    name = (
        stem
        if stem.isidentifier() and stem not in sys.modules
        else f"_tracegrad_user_{abs(hash(path))}"
    )
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
        raise CLIError(
            f"{path} called sys.exit() while being imported",
            hint='put its script part under `if __name__ == "__main__":`',
        ) from None
    except Exception as exc:
        sys.modules.pop(name, None)
        raise CLIError(
            f"importing {path} failed: {type(exc).__name__}: {exc}",
            hint="run again with --debug for the traceback",
        ) from exc
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(os.path.dirname(path))
    return module
