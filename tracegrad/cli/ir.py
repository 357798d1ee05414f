"""`tracegrad ir FILE.py:FUNC --args SPEC`: the IR of a user's function, its derivatives, kernels."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

import tracegrad as tg
from tracegrad.ir import type_str

from .common import CLIError, UsageError, check_backend_name
from .inputs import load_function, parse_args_spec


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
        params = [
            p
            for p in signature.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
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
            raise UsageError(
                "there is no traced argument to differentiate",
                hint="give at least one array or number in --args",
            )
        return candidates[0]
    try:
        nums = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise UsageError(
            f"--argnums takes whole numbers separated by commas, got {text!r}"
        ) from None
    if len(set(nums)) != len(nums):
        raise UsageError(f"--argnums names an argument twice: {text!r}")
    for i in nums:
        if not 0 <= i < count or i in static:
            what = "static" if i in static else "out of range"
            raise UsageError(
                f"--argnums {i} is {what}: --args gives {count} argument(s), counted from 0",
                hint="differentiate with respect to a traced (non-static) argument",
            )
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
    check_backend_name(args.backend, ("cpu", "cuda"))
    fun, name = load_function(args.target)
    values, static = parse_args_spec(args.args or "")
    _check_arity(fun, name, values)
    optimize = not args.no_optimize
    stage = "optimised" if optimize else "as traced, unoptimised"

    # Build everything before printing anything, so an error is not preceded by half a report.
    sections = [
        (
            f"{_signature_text(name, values, static)}: the traced IR ({stage})",
            tg.make_ir(fun, static_argnums=static, optimize=optimize)(*values),
        )
    ]
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
        sections.append(
            (
                f"generated kernels (backend: {backend})",
                _kernel_source(make_kernels, shown, static, args.backend, values),
            )
        )
    for i, (title, body) in enumerate(sections):
        if i:
            print()
        print(f"# {title}")
        print(body)
    return 0


def _kernel_source(
    make_kernels: Callable,
    fun: Callable,
    static: tuple[int, ...],
    backend: str | None,
    values: list[Any],
) -> str:
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
