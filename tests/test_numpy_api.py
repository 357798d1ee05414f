"""Each supported NumPy function and method, traced: the value equals NumPy's, the gradient
matches finite differences, on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg

A = np.array([[0.3, -1.2, 0.8], [1.5, 0.4, -0.6]])
B = np.array([[0.7, 0.2], [-0.5, 1.1], [0.9, -0.3]])
V = np.array([0.4, -0.9, 1.3])

# name -> (function of (a, b, v), which arguments to differentiate)
CASES = {
    "add_sub_mul_div": (lambda a, b, v: np.sum((a + v) * (a - v) / (2.0 + v * v)), (0, 2)),
    "power_scalar_and_array": (
        lambda a, b, v: np.sum(np.abs(a) ** 1.5 + 2.0**a + (v * v + 1) ** v),
        (0, 2),
    ),
    "negative_positive": (
        lambda a, b, v: np.sum(-a * +a + np.negative(a) + np.positive(v)),
        (0, 2),
    ),
    "exp_log_family": (
        lambda a, b, v: np.sum(np.exp(a) + np.log(a * a + 1) + np.log1p(a * a) + np.expm1(a)),
        (0,),
    ),
    "log2_log10_exp2": (
        lambda a, b, v: np.sum(np.log2(a * a + 1) + np.log10(a * a + 2) + np.exp2(a)),
        (0,),
    ),
    "sqrt_square_reciprocal": (
        lambda a, b, v: np.sum(np.sqrt(a * a + 1) + np.square(a) + np.reciprocal(a + 3)),
        (0,),
    ),
    "trig": (lambda a, b, v: np.sum(np.sin(a) * np.cos(a) + np.tan(a / 2)), (0,)),
    "inverse_trig": (
        lambda a, b, v: np.sum(np.arcsin(a / 2) + np.arccos(a / 2) * a + np.arctan(a)),
        (0,),
    ),
    "hyperbolic": (lambda a, b, v: np.sum(np.sinh(a) + np.cosh(a) + np.tanh(a)), (0,)),
    "abs_sign_fabs": (lambda a, b, v: np.sum(np.abs(a) * np.sign(a) + np.fabs(a) + abs(v)), (0, 2)),
    "maximum_minimum_clip": (
        lambda a, b, v: np.sum(np.maximum(a, v) + np.minimum(a, 0.1) + np.clip(a, -0.5, 0.5)),
        (0, 2),
    ),
    "where_and_comparisons": (
        lambda a, b, v: np.sum(
            np.where((a > 0) & (a <= 1.0) | (a == v), a * 2, -a)
            + np.where(a != v, 1.0, a) * (a >= -1)
        ),
        (0, 2),
    ),
    "astype": (
        lambda a, b, v: np.sum(
            a.astype(np.float32).astype(np.float64) * 0 + a * (a > 0).astype(np.float64)
        ),
        (0,),
    ),
    "sum_axes_keepdims": (
        lambda a, b, v: (
            np.sum(a.sum(axis=0) * v)
            + np.sum(np.sum(a, axis=(0, 1), keepdims=True))
            + a.sum(1, keepdims=True).sum()
        ),
        (0, 2),
    ),
    "mean_max_min_prod": (
        lambda a, b, v: (
            np.mean(a, axis=1).sum()
            + a.max()
            + np.min(a, axis=0).sum()
            + np.prod(a + 2.0)
            + a.mean()
        ),
        (0,),
    ),
    "var_std_norm": (lambda a, b, v: np.var(a) + np.std(a, axis=0).sum() + np.linalg.norm(a), (0,)),
    "matmul_operator_and_function": (
        lambda a, b, v: np.sum((a @ b) ** 2) + np.sum(np.matmul(v, b)),
        (0, 1, 2),
    ),
    "dot_outer_inner": (
        lambda a, b, v: (
            np.dot(v, v) + np.sum(np.dot(a, b)) + np.sum(np.outer(v, v) * a[0]) + np.inner(v, v)
        ),
        (0, 1, 2),
    ),
    "einsum": (
        lambda a, b, v: (
            np.sum(np.einsum("ij,jk->ik", a, b) ** 2)
            + np.einsum("i,i->", v, v)
            + np.sum(np.einsum("ij->ji", a) * b)
            + np.sum(np.einsum("ij,j->i", a, v) ** 2)
        ),
        (0, 1, 2),
    ),
    "batched_einsum": (
        lambda a, b, v: np.sum(
            np.einsum("bij,bjk->bik", np.stack([a, a * 2]), np.stack([b, b])) ** 2
        ),
        (0, 1),
    ),
    "reshape_transpose_swapaxes": (
        lambda a, b, v: (
            np.sum(a.reshape(3, 2) * b + a.T * b + np.swapaxes(a, 0, 1) * np.transpose(b).T)
            + np.sum(np.reshape(a, (-1,)) ** 2)
        ),
        (0, 1),
    ),
    "expand_squeeze_broadcast_ravel": (
        lambda a, b, v: (
            np.sum(np.squeeze(np.expand_dims(v, 0)) * np.broadcast_to(v, (2, 3)))
            + np.sum(a.ravel() ** 2 + a.flatten())
        ),
        (0, 2),
    ),
    "concatenate_stack": (
        lambda a, b, v: (
            np.sum(np.concatenate([a, a * 2], axis=1) ** 2)
            + np.sum(np.stack([v, v * v], axis=1) ** 3)
            + np.sum(np.hstack([v, v]) * np.vstack([v, v]).ravel())
        ),
        (0, 2),
    ),
    "indexing_and_slicing": (
        lambda a, b, v: (
            np.sum(a[1:] * a[:, 0:1])
            + np.sum(v[::-1] * v)
            + a[1, 2] * a[0, -1]
            + np.sum(a[..., None][:, 1, 0])
        ),
        (0, 2),
    ),
    "zeros_ones_full_like": (
        lambda a, b, v: np.sum(a * np.ones_like(a) + np.zeros_like(a) + np.full_like(a, 2.0) * a),
        (0,),
    ),
    "iteration_and_len": (lambda a, b, v: sum(np.sum(row**2) for row in a) * len(v), (0,)),
    "python_control_flow_on_shapes": (
        lambda a, b, v: np.sum(a**2) if a.shape[0] == 2 else np.sum(a),
        (0,),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_numpy_function_value_and_gradient(name, backend):
    fun, argnums = CASES[name]
    with np.errstate(all="ignore"):
        expected = fun(A, B, V)
    got = tg.jit(fun, backend=backend)(A, B, V)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert tg.check_grad(fun, A, B, V, argnums=argnums, backend=backend, rtol=1e-5, atol=1e-6)


def test_float32_stays_float32_through_every_case(backend):
    a32, b32, v32 = A.astype(np.float32), B.astype(np.float32), V.astype(np.float32)
    for name, (fun, _) in CASES.items():
        if name in ("astype",):
            continue
        value = tg.jit(fun, backend=backend)(a32, b32, v32)
        assert value.dtype == np.float32, name
        with np.errstate(all="ignore"):
            np.testing.assert_allclose(value, fun(A, B, V), rtol=2e-4, atol=1e-4, err_msg=name)
        g = tg.grad(fun, backend=backend)(a32, b32, v32)
        assert g.dtype == np.float32, name


def test_methods_on_traced_values():
    def f(x):
        return (
            x.sum()
            + x.mean(axis=0).sum()
            + x.max(axis=1).sum()
            + x.min()
            + x.prod()
            + x.var()
            + x.std()
        )

    assert tg.check_grad(f, A)


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int32, np.uint16, np.int64])
def test_integer_sums_have_numpys_dtype(dtype, backend):
    x = (np.arange(6) % 3).astype(dtype)
    for f in (np.sum, np.prod, lambda v: np.sum(v, axis=0)):
        got = tg.jit(f, backend=backend)(x)
        assert got.dtype == f(x).dtype and got == f(x)
