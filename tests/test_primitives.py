"""Every primitive in the table, tested through the table itself.

Each differentiable primitive gets first- and second-order derivative checks against central
finite differences in float64, at random points of its domain, with broadcasting where it applies.
A primitive added to the table without an example here makes `test_every_primitive_is_exercised`
fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers import (
    build,
    directional,
    finite_differences,
    gradient_graph,
    interpret_scalar,
    run,
    weighted_sum,
)
from tracegrad import interpreter, ir, passes
from tracegrad import primitives as P
from tracegrad.primitives import Kind

F64 = np.dtype(np.float64)


def _arity(prim: P.Primitive) -> int:
    return max(int(c) for c in "0123" if f"{{{c}}}" in prim.scalar) + 1


def _complex(x, y):
    """x + iy from two real values (a convert and a product: the complex entries' operands)."""
    c = np.complex128
    return P.add(P.convert(x, c), P.mul(P.convert(y, c), 1j))


# Non-elementwise primitives (and elementwise ones with parameters) are exercised by examples:
# name -> (input shapes, body building the op from input vars). The complex parts take complex
# values made of two real inputs, so real derivatives check their rules' convention.
EXAMPLES = {
    "real": [((3,), (3,)), lambda x, y: P.real(P.mul(_complex(x, y), _complex(y, x)))],
    "imag": [((3,), (3,)), lambda x, y: P.imag(P.mul(_complex(x, y), _complex(x, y)))],
    "complex": [
        ((3,), (3,)),
        lambda x, y: P.real(P.mul(P.make_complex(x, y), P.make_complex(P.mul(y, y), x))),
    ],
    "conj": [
        ((3,), (3,)),
        lambda x, y: P.imag(P.mul(P.conj(_complex(x, y)), P.mul(_complex(x, y), _complex(x, y)))),
    ],
    "integer_pow": [((3,),), lambda x: P.integer_pow(x, 3)],
    "convert": [((3,),), lambda x: P.convert(P.convert(x, np.float32), np.float64)],
    "named": [((3,),), lambda x: P.mul(P.emit(P.named_p, x, name="n"), x)],
    "where": [
        ((3,), (3,)),
        lambda a, b: P.where(P.compare(P.gt_p, a, b), P.mul(a, a), P.unary(P.sin_p, b)),
    ],
    "ct_mul": [((3,), (3,)), lambda a, b: P.ct_mul(a, b)],
    "reduce_sum": [((2, 3),), lambda x: P.reduce_sum(P.mul(x, x), (1,))],
    "reduce_max": [((2, 3),), lambda x: P.reduce(P.reduce_max_p, x, (0,))],
    "reduce_min": [((2, 3),), lambda x: P.reduce(P.reduce_min_p, x, (1,))],
    "reduce_prod": [((2, 3),), lambda x: P.reduce(P.reduce_prod_p, x, (0, 1))],
    "matmul": [((2, 3), (3, 4)), lambda a, b: P.matmul(a, b)],
    "broadcast_to": [
        ((3,),),
        lambda x: P.mul(P.broadcast_to(x, (2, 3)), P.broadcast_to(x, (2, 3))),
    ],
    "reshape": [((2, 3),), lambda x: P.mul(P.reshape(x, (3, 2)), P.reshape(x, (3, 2)))],
    "transpose": [((2, 3),), lambda x: P.matmul(x, P.transpose(x))],
    "slice": [((5,),), lambda x: P.mul(P.slice_(x, ((0, 4, 1),)), P.slice_(x, ((4, 0, -1),)))],
    "unslice": [
        ((2,),),
        lambda x: P.mul(
            P.emit(P.unslice_p, x, shape=(4,), index=((1, 4, 2),)), P.const(np.arange(4.0))
        ),
    ],
    "concatenate": [
        ((2,), (3,)),
        lambda a, b: P.mul(P.concatenate([a, b], 0), P.concatenate([b, a], 0)),
    ],
    "const": [((3,),), lambda x: P.mul(x, P.const(np.array([1.0, 2.0, 3.0])))],
    "cumsum": [
        ((2, 3),),
        lambda x: P.mul(P.cumulative(P.cumsum_p, x, 1), P.cumulative(P.cumsum_p, P.mul(x, x), 0)),
    ],
    "gather": [
        ((4, 2),),
        lambda x: P.mul(
            P.gather(x, P.const(np.array([0, 2, 2, 3])), 0),
            P.gather(x, P.const(np.array([1, 0])), 1),
        ),
    ],
    "scatter_add": [
        ((3, 2),),
        lambda v: P.mul(
            P.scatter_add(v, P.const(np.array([1, 1, 0])), 0, (4, 2)),
            P.scatter_add(v, P.const(np.array([3, 0, 0])), 0, (4, 2)),
        ),
    ],
    # the Fourier transforms: quadratic in their inputs, so second derivatives read the rules
    "fft": [
        ((2, 3), (2, 3)),
        lambda x, y: P.real(
            P.mul(
                P.emit(P.fft_p, _complex(x, y), axes=(1,), inverse=False, norm="ortho"),
                P.emit(P.fft_p, _complex(y, x), axes=(1, 0), inverse=True, norm="backward"),
            )
        ),
    ],
    "rfft": [
        ((2, 4),),
        lambda x: P.imag(
            P.mul(
                P.emit(P.rfft_p, x, axis=1, norm="backward"),
                P.emit(P.rfft_p, P.mul(x, x), axis=1, norm="forward"),
            )
        ),
    ],
    "irfft": [
        ((2, 3), (2, 3)),
        lambda x, y: P.mul(
            P.emit(P.irfft_p, _complex(x, y), axis=1, n=4, norm="backward"),
            P.emit(P.irfft_p, _complex(y, x), axis=1, n=4, norm="ortho"),
        ),
    ],
}
# Steps for finite differences where float32 rounding inside the example needs a larger one.
EPS = {"convert": 1e-2}
NOT_DIFFERENTIABLE = {n for n, p in P.PRIMITIVES.items() if not p.differentiable}
# custom_grad only arises from tg.custom_vjp; tests/test_api.py exercises it end to end.
TESTED_ELSEWHERE = {
    "custom_grad",
    "stop_gradient",
    "tap",
    "hook",  # test_api, test_taps
    "custom_jvp",
    "remat",  # test_transforms
    "scan",
    "loop",
    "while",
    "cond",  # test_loops
    "cholesky",
    "det",
    "eigh_values",
    "eigh_vectors",
    "inv",
    "inv_or_nan",  # test_linalg: the gradient of cond
    "cofactors",  # test_linalg: the hessian of det
    "logabsdet",
    "solve",  # test_linalg
    "svd_u",
    "svd_s",
    "svd_vt",
    "qr_q",
    "qr_r",  # test_numpy_breadth
    "bessel",  # test_scipy_stats
    "eig_values",
    "eig_vectors",  # test_linalg_eig
    "odeint",
    "odeint_vjp",  # test_odeint: its adjoint refuses, with a message
}


def _plain_elementwise() -> list[str]:
    return [
        n
        for n, p in P.PRIMITIVES.items()
        if p.kind is Kind.ELEMENTWISE and n not in EXAMPLES and p.differentiable
    ]


def _case(name: str):
    """(input shapes, body, sampling domain) for a differentiable primitive."""
    prim = P.PRIMITIVES[name]
    if name in EXAMPLES:
        shapes, body = EXAMPLES[name]
        return shapes, body, prim.domain
    n = _arity(prim)
    # broadcasting: the second operand of a binary op is a row broadcast over the first
    shapes = [(2, 3)] + [(3,)] * (n - 1)

    def body(*xs):
        xs = [xs[0]] + [P.broadcast_to(x, (2, 3)) for x in xs[1:]]
        return P.emit(prim, *xs)

    return tuple(shapes), body, prim.domain


def _sample(rng, shapes, domain):
    lo, hi = domain
    return [rng.uniform(lo, hi, size=s) for s in shapes]


def test_every_primitive_is_exercised():
    covered = set(EXAMPLES) | set(_plain_elementwise()) | NOT_DIFFERENTIABLE | TESTED_ELSEWHERE
    missing = set(P.PRIMITIVES) - covered
    assert not missing, f"primitives without a derivative test: {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(P.PRIMITIVES))
def test_every_primitive_has_every_facet(name):
    prim = P.PRIMITIVES[name]
    assert callable(prim.impl) and callable(prim.infer)
    if prim.differentiable:
        assert prim.adjoint is not None, f"{name} is differentiable but has no adjoint rule"
    if prim.kind is not Kind.CONST:
        assert prim.batch is not None, f"{name} has no batching rule"
    if prim.kind is Kind.ELEMENTWISE:
        assert prim.scalar is not None, f"{name} has no scalar template for the code generators"


DIFFERENTIABLE = sorted(set(EXAMPLES) | set(_plain_elementwise()))


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_first_and_second_derivatives_match_finite_differences(name, rng, backend):
    shapes, body, domain = _case(name)
    args = _sample(rng, shapes, domain)
    out_shape = build([(s, F64) for s in shapes], body).outputs[0].shape
    weights = rng.uniform(0.5, 1.5, size=out_shape)
    f = build([(s, F64) for s in shapes], lambda *xs: weighted_sum(body(*xs), weights))
    wrt = list(range(len(shapes)))

    # first order
    g = gradient_graph(f, wrt)
    got = [_single(g, i, args, backend) for i in range(len(wrt))]
    eps = EPS.get(name, 1e-6)
    expected = finite_differences(interpret_scalar(f), args, wrt, eps)
    for a, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-7)

    # second order: the gradient of a directional derivative v . grad f
    directions = [rng.uniform(-1, 1, size=s) for s in shapes]
    h = directional(g, directions)
    hg = gradient_graph(h, wrt)
    got2 = [_single(hg, i, args, backend) for i in range(len(wrt))]
    expected2 = finite_differences(interpret_scalar(h), args, wrt, eps)
    for a, e in zip(got2, expected2, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


# the dtype each kind of operand (Primitive.operands) is sampled in
OPERAND_DTYPE = {"number": F64, "bool": np.dtype(np.bool_), "integer": np.dtype(np.int64)}


def _operand(rng, shape, dtype):
    if dtype == np.bool_:
        return rng.uniform(-1, 1, size=shape) > 0
    if dtype.kind == "i":
        return rng.integers(-100, 100, size=shape, dtype=dtype)
    return rng.uniform(-1, 1, size=shape)


def _single(graph: ir.Graph, i: int, args, backend) -> np.ndarray:
    return run(graph, args, backend)[i]


@pytest.mark.parametrize(
    "name", sorted(NOT_DIFFERENTIABLE - {"const", "signdet", "argsort", "while_count", "random"})
)  # test_linalg, test_array_functions, test_random_numbers
def test_non_differentiable_primitives_give_no_gradient(name, rng, backend):
    prim = P.PRIMITIVES[name]
    n = _arity(prim) if prim.kind is Kind.ELEMENTWISE else 1
    dtype = OPERAND_DTYPE[prim.operands]
    shapes = [(3,)] * n
    f = build(
        [(s, dtype) for s in shapes],
        lambda *xs: P.reduce_sum(P.convert(P.emit(prim, *xs), F64)),
    )
    args = [_operand(rng, s, dtype) for s in shapes]
    (value,) = run(f, args, backend)
    expected = np.sum(prim.impl(*args).astype(F64))
    assert value == expected
    if dtype == F64:
        for grad in run(gradient_graph(f, list(range(n))), args, backend):
            assert np.all(grad == 0)


@pytest.mark.parametrize("name", [n for n, p in P.PRIMITIVES.items() if p.kind is Kind.ELEMENTWISE])
def test_reference_implementation_matches_shape_rule(name, rng):
    """impl and infer agree on shape and dtype (float32 stays float32)."""
    prim = P.PRIMITIVES[name]
    if name in ("integer_pow", "convert", "named"):
        params = {
            "integer_pow": {"n": 3},
            "convert": {"dtype": np.dtype(np.float32)},
            "named": {"name": "n"},
        }[name]
        n = 1
    else:
        params, n = {}, _arity(prim)
    dtypes = [np.dtype(np.float32)] * n
    if name == "where":
        dtypes[0] = np.dtype(np.bool_)
    if prim.operands == "bool":
        dtypes = [np.dtype(np.bool_)] * n
    if prim.operands == "integer":  # a small integer type must stay small
        dtypes = [np.dtype(np.int16)] * n
    args = [
        (rng.uniform(0.3, 0.9, size=(4,)) * (100 if d.kind == "i" else 1)).astype(d) for d in dtypes
    ]
    shape, dtype = prim.infer(tuple(a.shape for a in args), tuple(dtypes), params)
    with np.errstate(all="ignore"):
        value = np.asarray(prim.impl(*args, **params))
    assert value.shape == shape and value.dtype == dtype, (value.shape, value.dtype, shape, dtype)


def test_batching_rules_agree_with_a_loop(rng, backend):
    """jacobian's batching transform, checked against one vjp per row, for every example."""
    from tracegrad import autodiff

    for name in sorted(EXAMPLES):
        shapes, body, domain = _case(name)
        args = _sample(rng, shapes, domain)
        f = build([(s, F64) for s in shapes], body)
        jac = autodiff.jacobian(f, list(range(len(shapes))))
        out = run(jac, args, backend)
        m = f.outputs[0].size
        vjp = autodiff.adjoint(f, list(range(len(shapes))), [0], seed_ones=False)
        for row in range(m):
            seed = np.zeros(m)
            seed[row] = 1
            cts = run(vjp, args + [seed.reshape(f.outputs[0].shape)], backend)[1:]
            for k, ct in enumerate(cts):
                got = out[1 + k].reshape((m,) + shapes[k])[row]
                np.testing.assert_allclose(got, ct, rtol=1e-12, atol=1e-12, err_msg=name)


def test_interpreter_runs_every_primitive_example(rng):
    for name in sorted(EXAMPLES):
        shapes, body, domain = _case(name)
        f = build([(s, F64) for s in shapes], body)
        out = interpreter.evaluate(f, _sample(rng, shapes, domain))[0]
        assert out.shape == f.outputs[0].shape
        assert np.all(np.isfinite(out))


def test_stop_gradient_passes_the_value_and_blocks_the_derivative(rng, backend):
    x = rng.uniform(-1, 1, size=3)
    f = build([((3,), F64)], lambda v: P.reduce_sum(P.mul(v, P.emit(P.stop_gradient_p, v))))
    (value,) = run(f, [x], backend)
    (grad,) = run(gradient_graph(f, [0]), [x], backend)
    np.testing.assert_allclose(value, np.sum(x * x))
    np.testing.assert_allclose(grad, x)  # d/dx of x * c with c = x held fixed


FOLDABLE = sorted(
    set(DIFFERENTIABLE)
    | {n for n, p in P.PRIMITIVES.items() if p.kind is Kind.ELEMENTWISE and not p.effectful}
)


@pytest.mark.parametrize("name", FOLDABLE)
def test_every_primitive_folds_on_constants(name, rng):
    """On constant operands the simplifier folds each primitive's node with its reference
    implementation, as the interpreter runs it: the whole program is one constant."""
    prim = P.PRIMITIVES[name]
    if name in DIFFERENTIABLE:
        shapes, body, domain = _case(name)
        avals = [(s, F64) for s in shapes]
        args = _sample(rng, shapes, domain)
    else:  # operands of the primitive's own kind (bools, integers)
        dtype = OPERAND_DTYPE[prim.operands]
        avals = [((3,), dtype)] * _arity(prim)
        args = [_operand(rng, s, d) for s, d in avals]

        def body(*xs):
            return P.emit(prim, *xs)

    want = interpreter.evaluate(build(avals, body), args)[0]
    folded = passes.optimize(build([], lambda: body(*[P.const(a) for a in args])))
    assert [node.prim.name for node in folded.nodes] == ["const"], f"{name} did not fold"
    value = np.broadcast_to(folded.nodes[0].params["value"], folded.outputs[0].shape)
    np.testing.assert_array_equal(value, want, err_msg=name)
