"""autograd's n-ary wrapping of unary operators: `op(fun, argnum)(*args, **kwargs)` applies
`op` to `fun` seen as a function of argument(s) `argnum` alone."""

from __future__ import annotations

import functools


def get_name(fun) -> str:
    return getattr(fun, "__name__", "[unknown name]")


def substitute(args: tuple, argnum, x) -> tuple:
    """`args` with position `argnum` (an int) or positions `argnum` (a sequence) replaced."""
    out = list(args)
    if isinstance(argnum, int):
        out[argnum] = x
    else:
        for i, value in zip(argnum, x, strict=True):
            out[i] = value
    return tuple(out)


def unary_to_nary(unary_op):
    """Make `unary_op(f, x, ...)` into `op(fun, argnum=0, ...)(*args, **kwargs)`."""

    @functools.wraps(unary_op)
    def nary_op(fun, argnum=0, *op_args, **op_kwargs):
        if not isinstance(argnum, (int, tuple, list)):
            raise TypeError(f"argnum must be an int, a tuple or a list, got {argnum!r}")
        op_name = get_name(unary_op)

        def nary_f(*args, **kwargs):
            def unary_f(x):
                return fun(*substitute(args, argnum, x), **kwargs)

            unary_f.__name__ = get_name(fun)
            x = args[argnum] if isinstance(argnum, int) else tuple(args[i] for i in argnum)
            return unary_op(unary_f, x, *op_args, **op_kwargs)

        nary_f.__name__ = f"{op_name}_of_{get_name(fun)}_wrt_argnum_{argnum}"
        nary_f.__doc__ = (
            f"    {op_name} of function {get_name(fun)} with respect to argument number "
            f"{argnum}. Takes the\n    same arguments as {get_name(fun)} but returns the "
            f"{op_name}.\n"
        )
        return nary_f

    return nary_op
