"""tracegrad/passes.py, pass by pass: what each removes, shares, folds or rewrites, and that the
values it computes are those of the graph it was given (run on the interpreter)."""

import numpy as np
import pytest

from tracegrad import interpreter, ir, passes
from tracegrad import primitives as P

F64 = np.float64


def _graph(avals, body):
    """A graph of the given input types; `body` returns its outputs (one value or a list)."""
    builder = ir.Builder()
    with ir.building(builder):
        inputs = [builder.new_input(shape, dtype) for shape, dtype in avals]
        outs = body(*inputs)
    return builder.graph(list(outs) if isinstance(outs, (list, tuple)) else [outs])


def _prims(graph):
    return [node.prim.name for node in graph.nodes]


def _same_values(before, after, args):
    """`after` computes what `before` does (bit for bit, NaNs in the same places)."""
    assert after.inputs == before.inputs and len(after.outputs) == len(before.outputs)
    for a, b in zip(
        interpreter.evaluate(before, args), interpreter.evaluate(after, args), strict=True
    ):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


X3 = [((3,), F64)]
ARGS3 = [np.array([0.5, -1.25, 2.0])]


# ----------------------------------------------------------------------------------------------
# dce and cse


def test_dce_drops_what_no_output_needs_and_keeps_effects():
    seen = []

    def body(x):
        P.unary(P.exp_p, x)  # unused
        kept = P.unary(P.sin_p, x)
        P.emit(P.hook_p, P.unary(P.cos_p, x), name="c", hook=lambda name, v: seen.append(v))
        return kept

    graph = _graph(X3, body)
    after = passes.dce(graph)
    assert _prims(graph) == ["exp", "sin", "cos", "hook"]
    assert _prims(after) == ["sin", "cos", "hook"]  # the hook and what it reads stay
    _same_values(graph, after, ARGS3)


def test_cse_shares_equal_nodes_only():
    def body(x):
        a, b = P.unary(P.sin_p, x), P.unary(P.sin_p, x)  # equal
        c = P.reduce_sum(x, axes=(0,))
        d = P.reduce_sum(x, axes=(0,))  # equal
        e = P.integer_pow(x, 2)
        f = P.integer_pow(x, 3)  # another parameter: not equal
        return [P.add(a, b), P.mul(c, d), P.add(e, f)]

    graph = _graph(X3, body)
    after = passes.cse(graph)
    assert _prims(after).count("sin") == 1 and _prims(after).count("reduce_sum") == 1
    assert _prims(after).count("integer_pow") == 2
    add = next(n for n in after.nodes if n.prim is P.add_p)
    assert add.inputs[0] is add.inputs[1]  # sin(x) + sin(x) reads one value twice
    _same_values(graph, after, ARGS3)


def test_cse_replaces_outputs_too():
    graph = _graph(X3, lambda x: [P.unary(P.exp_p, x), P.unary(P.exp_p, x)])
    after = passes.cse(graph)
    assert len(after.nodes) == 1 and after.outputs[0] is after.outputs[1]
    _same_values(graph, after, ARGS3)


# ----------------------------------------------------------------------------------------------
# simplify: folding


def test_elementwise_nodes_of_fills_fold_to_a_fill():
    def body(x):
        two = P.const(2.0, (3,), F64)
        three = P.const(3.0, (3,), F64)
        return P.mul(x, P.add(P.unary(P.exp_p, two), three))

    graph = _graph(X3, body)
    after = passes.dce(passes.simplify(graph))
    assert _prims(after) == ["const", "mul"]
    fill = after.nodes[0].params["value"]
    assert fill.ndim == 0 and fill == np.exp(2.0) + 3.0
    _same_values(graph, after, ARGS3)


def test_small_constant_arrays_fold_and_big_ones_stay():
    def body(x, big):
        small = P.mul(P.const(np.arange(4.0)), P.const(np.array([1.0, 2.0, 3.0, 4.0])))
        large = P.unary(P.exp_p, P.const(np.linspace(0, 1, passes.FOLD_LIMIT + 1)))
        return [P.add(x, P.reduce_sum(small)), P.add(big, large)]

    graph = _graph([((4,), F64), ((passes.FOLD_LIMIT + 1,), F64)], body)
    after = passes.dce(passes.simplify(graph))
    assert "exp" in _prims(after)  # over the limit: computed by the program
    assert not {"reduce_sum"} & set(_prims(after))  # folded
    args = [np.arange(4.0), np.ones(passes.FOLD_LIMIT + 1)]
    _same_values(graph, after, args)


def test_a_uniform_folded_array_becomes_a_fill():
    graph = _graph(
        X3, lambda x: P.mul(x, P.mul(P.const(np.full(3, 2.0)), P.const(np.full(3, 1.5))))
    )
    after = passes.dce(passes.simplify(graph))
    const = next(n for n in after.nodes if n.prim is P.const_p)
    assert const.params["value"].ndim == 0 and const.params["value"] == 3.0
    _same_values(graph, after, ARGS3)


def test_folding_keeps_the_sign_of_zero():
    # [0., -0.] is not uniform: folding it into one number would lose -0.0 (1/x tells them apart)
    zeros = np.array([0.0, -0.0, 0.0])
    graph = _graph(X3, lambda x: P.div(x, P.mul(P.const(zeros), P.const(np.ones(3)))))
    after = passes.dce(passes.simplify(graph))
    _same_values(graph, after, ARGS3)
    assert np.signbit(interpreter.evaluate(after, ARGS3)[0]).tolist() == [False, False, False]


def test_linear_primitives_of_zero_shape_primitives_of_fills_and_sums_of_fills():
    def body(x):
        zero = P.const(0.0, (3,), F64)
        linear = P.add(x, P.neg(zero))  # neg(0) is 0, then x + 0 is x
        moved = P.reshape(P.const(1.5, (3,), F64), (3, 1))  # a fill reshaped is a fill
        summed = P.reduce_sum(P.const(0.25, (4, 3), F64), axes=(0,))  # 4 * 0.25 each
        return [linear, moved, P.mul(x, summed)]

    graph = _graph(X3, body)
    after = passes.dce(passes.simplify(graph))
    assert after.outputs[0] is after.inputs[0]
    assert not {"neg", "add", "reshape", "reduce_sum"} & set(_prims(after))
    _same_values(graph, after, ARGS3)


# ----------------------------------------------------------------------------------------------
# simplify: algebraic identities


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda x: P.add(x, 0.0), "x + 0"),
        (lambda x: P.add(0.0, x), "0 + x"),
        (lambda x: P.sub(x, 0.0), "x - 0"),
        (lambda x: P.mul(x, 1.0), "x * 1"),
        (lambda x: P.mul(1.0, x), "1 * x"),
        (lambda x: P.div(x, 1.0), "x / 1"),
        (lambda x: P.ct_mul(x, P.const(1.0, (3,), F64)), "ct_mul(x, 1)"),
        (lambda x: P.neg(P.neg(x)), "-(-x)"),
        (lambda x: P.where(True, x, P.unary(P.exp_p, x)), "where(True, x, .)"),
        (lambda x: P.reshape(P.reshape(x, (3, 1)), (3,)), "reshape of reshape"),
    ],
)
def test_neutral_elements_disappear(make, name):
    graph = _graph(X3, make)
    after = passes.optimize(graph)
    assert after.outputs[0] is after.inputs[0] and not after.nodes, name
    _same_values(graph, after, ARGS3)


def test_a_transpose_undone_disappears_and_one_that_is_not_stays():
    undone = _graph([((2, 3, 4), F64)], lambda x: P.transpose(P.transpose(x, (1, 2, 0)), (2, 0, 1)))
    after = passes.optimize(undone)
    assert after.outputs[0] is after.inputs[0]
    twice = _graph([((2, 3, 4), F64)], lambda x: P.transpose(P.transpose(x, (1, 2, 0)), (1, 2, 0)))
    assert _prims(passes.optimize(twice)) == ["transpose", "transpose"]
    args = [np.arange(24.0).reshape(2, 3, 4)]
    _same_values(undone, after, args)
    _same_values(twice, passes.optimize(twice), args)


def test_absorbing_and_constant_results():
    def body(x):
        masked = P.ct_mul(P.const(0.0, (3,), F64), P.unary(P.log_p, x))  # 0 even where log is nan
        power = P.integer_pow(x, 0)  # 1, even for nan and inf
        return [masked, power]

    graph = _graph(X3, body)
    after = passes.optimize(graph)
    assert set(_prims(after)) == {"const"}
    args = [np.array([-1.0, np.inf, np.nan])]
    _same_values(graph, after, args)
    masked, power = interpreter.evaluate(after, args)
    assert not masked.any() and (power == 1.0).all()


def test_multiplying_by_zero_is_not_folded():
    # x * 0 is nan for x = inf or nan: not a neutral rewrite
    graph = _graph(X3, lambda x: P.mul(x, 0.0))
    after = passes.optimize(graph)
    assert "mul" in _prims(after)
    _same_values(graph, after, [np.array([np.inf, np.nan, 1.0])])


# ----------------------------------------------------------------------------------------------
# simplify: lowering


def test_identity_nodes_are_lowered_only_when_asked():
    graph = _graph(X3, lambda x: P.mul(P.emit(P.stop_gradient_p, x), 2.0))
    assert "stop_gradient" in _prims(passes.optimize(graph, lower=False))
    lowered = passes.optimize(graph)
    assert "stop_gradient" not in _prims(lowered)
    _same_values(graph, lowered, ARGS3)


def test_a_matrix_product_over_an_inner_dimension_of_one_becomes_an_elementwise_product(rng):
    graph = _graph([((4, 1), F64), ((1, 3), F64)], lambda a, b: P.matmul(a, b))
    lowered = passes.optimize(graph)
    assert "matmul" not in _prims(lowered) and "mul" in _prims(lowered)
    assert "matmul" in _prims(passes.optimize(graph, lower=False))
    args = [rng.normal(size=(4, 1)), rng.normal(size=(1, 3))]
    _same_values(graph, lowered, args)


@pytest.mark.parametrize("transposed", [False, True])
def test_a_thin_matrix_vector_product_becomes_a_sum_of_products(rng, transposed):
    # h @ w (a row sum) and h.T @ c (a column sum, read through the transpose)
    if transposed:
        graph = _graph(
            [((7, 5), F64), ((7, 1), F64)], lambda h, c: P.matmul(P.transpose(h, (1, 0)), c)
        )
        args = [rng.normal(size=(7, 5)), rng.normal(size=(7, 1))]
    else:
        graph = _graph([((7, 5), F64), ((5, 1), F64)], lambda h, w: P.matmul(h, w))
        args = [rng.normal(size=(7, 5)), rng.normal(size=(5, 1))]
    lowered = passes.optimize(graph)
    assert "matmul" not in _prims(lowered) and "reduce_sum" in _prims(lowered)
    assert "transpose" not in _prims(lowered)
    assert "matmul" in _prims(passes.optimize(graph, lower=False))
    [want], [got] = interpreter.evaluate(graph, args), interpreter.evaluate(lowered, args)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)  # summed in another order


def test_wide_products_and_matrix_products_stay_matmuls():
    wide = _graph([((300, 400), F64), ((400, 1), F64)], lambda h, w: P.matmul(h, w))
    square = _graph([((6, 5), F64), ((5, 2), F64)], lambda h, w: P.matmul(h, w))
    assert "matmul" in _prims(passes.optimize(wide))
    assert "matmul" in _prims(passes.optimize(square))


# ----------------------------------------------------------------------------------------------
# optimize: the pipeline


def test_optimize_repeats_until_nothing_changes():
    # each round exposes the next rewrite: ((x * 1) + 0) - 0, with a dead node and a duplicate
    def body(x):
        P.unary(P.exp_p, x)
        y = P.sub(P.add(P.mul(x, 1.0), 0.0), 0.0)
        return [P.add(P.unary(P.sin_p, y), P.unary(P.sin_p, x))]

    graph = _graph(X3, body)
    after = passes.optimize(graph)
    assert _prims(after) == ["sin", "add"]
    _same_values(graph, after, ARGS3)
    assert passes.optimize(after) == after  # a fixed point


def test_passes_do_not_change_the_graph_they_are_given():
    graph = _graph(X3, lambda x: P.add(P.mul(x, 1.0), P.unary(P.exp_p, P.const(0.0, (3,), F64))))
    text = str(graph)
    passes.optimize(graph)
    passes.smooth_idioms(graph)
    assert str(graph) == text


# ----------------------------------------------------------------------------------------------
# smooth_idioms


def _softplus(z):  # max(z, 0) + log1p(exp(-|z|))
    return P.add(
        P.maximum(z, 0.0), P.unary(P.log1p_p, P.unary(P.exp_p, P.neg(P.unary(P.abs_p, z))))
    )


def _softplus_log(z):  # log(1 + exp(-|-z|)) + max(0, z): the other spelling, the other order
    tail = P.unary(P.log_p, P.add(1.0, P.unary(P.exp_p, P.neg(P.unary(P.abs_p, P.neg(z))))))
    return P.add(tail, P.maximum(0.0, z))


def _log_sigmoid(z):  # min(z, 0) - log1p(exp(-|z|))
    return P.sub(
        P.minimum(z, 0.0), P.unary(P.log1p_p, P.unary(P.exp_p, P.neg(P.unary(P.abs_p, z))))
    )


Z = [np.array([-30.0, -1.0, 0.0, 0.5, 40.0])]


@pytest.mark.parametrize(
    "idiom, exact",
    [
        (_softplus, lambda z: np.logaddexp(0.0, z)),
        (_softplus_log, lambda z: np.logaddexp(0.0, z)),
        (_log_sigmoid, lambda z: -np.logaddexp(0.0, -z)),
    ],
)
def test_smooth_idioms_become_softplus(idiom, exact):
    graph = _graph([((5,), F64)], idiom)
    after = passes.dce(passes.smooth_idioms(graph))
    assert "softplus" in _prims(after)
    assert not {"maximum", "minimum", "abs"} & set(_prims(after))
    # the rewrite is the same function, rounded at least as well (log(1 + tiny) loses digits
    # that softplus keeps)
    got, before = interpreter.evaluate(after, Z)[0], interpreter.evaluate(graph, Z)[0]
    np.testing.assert_allclose(got, exact(Z[0]), rtol=1e-15, atol=0)
    assert (np.abs(got - exact(Z[0])) <= np.abs(before - exact(Z[0]))).all()


def test_a_near_miss_is_not_rewritten():
    # max(z, 0) + log1p(exp(-|w|)) with another value w: not softplus
    graph = _graph(
        [((5,), F64), ((5,), F64)],
        lambda z, w: P.add(
            P.maximum(z, 0.0), P.unary(P.log1p_p, P.unary(P.exp_p, P.neg(P.unary(P.abs_p, w))))
        ),
    )
    assert passes.smooth_idioms(graph) is graph


# ----------------------------------------------------------------------------------------------
# extract_hooks


def test_hooks_become_extra_outputs_and_multi_input_hooks_are_called_once():
    calls = []

    def body(x):
        y = P.unary(P.sin_p, x)
        P.emit(P.hook_p, y, name="one", hook=lambda name, v: calls.append((name, v)))
        P.emit(P.hook_p, x, y, name="two", hook=lambda name, a, b: calls.append((name, a, b)))
        return P.mul(y, 2.0)

    graph = _graph(X3, body)
    after, entries = passes.extract_hooks(graph)
    assert "hook" not in _prims(after)
    assert len(after.outputs) == 1 + 1 + 2 and [name for name, _ in entries] == [
        "one",
        "two",
        "two",
    ]
    values = interpreter.evaluate(after, ARGS3)
    np.testing.assert_array_equal(values[0], interpreter.evaluate(graph, ARGS3)[0])
    for (name, hook), value in zip(entries, values[1:], strict=True):
        hook(name, value)
    assert [c[0] for c in calls] == ["one", "two"]  # "two" called once, with both values
    np.testing.assert_array_equal(calls[1][1], ARGS3[0])
    np.testing.assert_array_equal(calls[1][2], np.sin(ARGS3[0]))
    assert passes.extract_hooks(after) == (after, [])
