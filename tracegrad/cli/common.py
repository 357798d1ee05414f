"""What every subcommand shares: the errors a user can fix and the helpers of their reports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tracegrad as tg

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


def default_backend() -> str:
    name, error = guarded(tg.default_backend_name)  # a bad TRACEGRAD_BACKEND must not break this
    return name if error is None else f"unknown ({error})"


def check_backend_name(name: str | None, known: tuple[str, ...]) -> None:
    """An unknown backend name is a usage mistake (an unusable known one is not)."""
    if name is not None and name not in known:
        raise UsageError(
            f"unknown backend {name!r}; choose one of {', '.join(known)}",
            hint="`tracegrad doctor` says which backends work on this machine",
        )


def guarded(fun: Callable, *args: Any) -> tuple[Any, str | None]:
    """(fun(*args), None), or (None, 'Error: message') if it raised anything at all.

    The doctor must report whatever is broken on a machine, never crash on it."""
    try:
        return fun(*args), None
    except Exception as exc:  # reporting any failure is the point
        return None, f"{type(exc).__name__}: {one_line(exc)}"


def one_line(text: str) -> str:
    return " ".join(str(text).split()).rstrip(" :")


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# Counters of the process that asks (kernels loaded, programs in memory): they describe the
# Python API's process (tg.cache_info()), and mean nothing to a command that has just started.
_IN_PROCESS = ("loaded", "programs")


def describe_cache(info: Any) -> list[str]:
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
            value = f"{format_bytes(value)} ({value:,} bytes)"
        lines.append(f"{key!s:<{width}}  {value}")
    return lines
