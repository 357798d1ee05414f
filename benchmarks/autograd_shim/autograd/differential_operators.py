"""autograd's differential operators, each on tracegrad's `tg.vjp`, `tg.jvp` and `tg.jacobian`."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import tracegrad as tg

from .core import dtype_of, like
from .core import make_jvp as _make_jvp
from .core import make_vjp as _make_vjp
from .tracer import Primitive
from .wrap_util import unary_to_nary

make_vjp = unary_to_nary(_make_vjp)
make_jvp = unary_to_nary(_make_jvp)


def _is_complex(value) -> bool:
    return any(np.issubdtype(dtype_of(a), np.complexfloating) for a in tg.tree_leaves(value))


def _size(value) -> int:
    return sum(int(np.prod(np.shape(a))) for a in tg.tree_leaves(value))


@unary_to_nary
def grad(fun, x):
    """
    Returns a function which computes the gradient of `fun` with respect to
    positional argument number `argnum`. The returned function takes the same
    arguments as `fun`, but returns the gradient instead. The function `fun`
    should be scalar-valued. The gradient has the same type as the argument."""
    vjp, ans = _make_vjp(fun, x)
    if _size(ans) != 1 or _is_complex(ans):
        raise TypeError(
            "Grad only applies to real scalar-output functions. "
            "Try jacobian, elementwise_grad or holomorphic_grad."
        )
    return vjp(like(ans, 1))


@unary_to_nary
def elementwise_grad(fun, x):
    vjp, ans = _make_vjp(fun, x)
    if _is_complex(ans):
        raise TypeError("Elementwise_grad only applies to real-output functions.")
    return vjp(like(ans, 1))


@unary_to_nary
def deriv(fun, x):
    return _make_jvp(fun, x)(like(x, 1))[1]


@unary_to_nary
def jacobian(fun, x):
    return tg.jacobian(fun)(x)


@unary_to_nary
def holomorphic_grad(fun, x):
    if not _is_complex(x):
        warnings.warn("Input to holomorphic_grad is not complex", stacklevel=2)
    return grad(lambda z: np.real(fun(z)))(x)


def grad_named(fun, argname):
    return grad(fun, list(inspect.signature(fun).parameters).index(argname))


@unary_to_nary
def hessian(fun, x):
    return jacobian(jacobian(fun))(x)


@unary_to_nary
def make_hvp(fun, x):
    return _make_vjp(grad(fun), x)


def hessian_tensor_product(fun, argnum=0):
    fun_grad = grad(fun, argnum)

    def vector_dot_grad(*args, **kwargs):
        args, vector = args[:-1], args[-1]
        return np.tensordot(fun_grad(*args, **kwargs), vector, np.ndim(vector))

    return grad(vector_dot_grad, argnum)


hessian_vector_product = hessian_tensor_product


def tensor_jacobian_product(fun, argnum=0):
    def vector_dot_fun(*args, **kwargs):
        args, vector = args[:-1], args[-1]
        return np.tensordot(vector, fun(*args, **kwargs), axes=np.ndim(vector))

    return jacobian(vector_dot_fun, argnum)


vector_jacobian_product = tensor_jacobian_product


@unary_to_nary
def make_jvp_reversemode(fun, x):
    vjp, y = _make_vjp(fun, x)
    vjp_vjp, _ = _make_vjp(vjp, like(y, 0))
    return vjp_vjp


def make_ggnvp(f, g=lambda x: 1.0 / 2 * np.sum(x**2, axis=-1), f_argnum=0):
    @unary_to_nary
    def _make_ggnvp(f, x):
        f_vjp, f_x = _make_vjp(f, x)
        g_hvp, grad_g_x = _make_vjp(grad(g), f_x)
        f_jvp, _ = _make_vjp(f_vjp, like(grad_g_x, 0))

        def ggnvp(v):
            return f_vjp(g_hvp(f_jvp(v)))

        return ggnvp

    return _make_ggnvp(f, f_argnum)


@unary_to_nary
def value_and_grad(fun, x):
    vjp, ans = _make_vjp(fun, x)
    if _size(ans) != 1 or _is_complex(ans):
        raise TypeError(
            "value_and_grad only applies to real scalar-output functions. "
            "Try jacobian, elementwise_grad or holomorphic_grad."
        )
    return ans, vjp(like(ans, 1))


@unary_to_nary
def grad_and_aux(fun, x):
    ans, f_vjp, aux = tg.vjp(fun, x, has_aux=True)
    return f_vjp(like(ans, 1))[0], aux


def multigrad_dict(fun):
    signature = inspect.signature(fun)

    def gradfun(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        names = list(bound.arguments)

        def of_dict(values):
            return fun(**values)

        grads = grad(of_dict)(dict(bound.arguments))
        return {name: grads[name] for name in names}

    return gradfun


def checkpoint(fun):
    return tg.checkpoint(fun)


__all__ = ["Primitive"]
