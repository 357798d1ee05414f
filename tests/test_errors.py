"""Bad input gets a clear error that names the problem, the fix and (when known) the user's line."""

import numpy as np
import pytest

import tracegrad as tg


def test_grad_of_non_scalar_output():
    with pytest.raises(TypeError, match=r"returns a scalar.*\(3,\).*jacobian"):
        tg.grad(lambda x: x * 2)(np.ones(3))


def test_grad_with_respect_to_integer_array():
    with pytest.raises(TypeError, match=r"argument 0.*int64.*astype"):
        tg.grad(lambda x: np.sum(x * 2.0))(np.arange(3))


def test_argnums_out_of_range():
    with pytest.raises(ValueError, match=r"argnums 2 is out of range.*2 positional"):
        tg.grad(lambda x, y: x * y, argnums=2)(1.0, 2.0)


def test_bad_argnums_values():
    with pytest.raises(TypeError, match="argnums must be an int"):
        tg.grad(lambda x: x, argnums="0")
    with pytest.raises(ValueError, match="non-negative"):
        tg.grad(lambda x: x, argnums=-1)


def test_unsupported_numpy_function_names_it_and_suggests():
    with pytest.raises(tg.TracingError, match=r"(?s)np.cumsum is not supported.*test_errors.py") as info:
        tg.grad(lambda x: np.sum(np.cumsum(x)))(np.ones(3))
    assert "Did you mean" in str(info.value)
    with pytest.raises(tg.TracingError, match="arctan2"):
        tg.grad(lambda x: np.sum(np.arctan2(x, x)))(np.ones(3))


def test_shape_mismatch_names_both_shapes_and_the_line():
    def f(x, y):
        return np.sum(x + y)

    with pytest.raises(tg.ShapeError, match=r"\(3,\) and \(4,\).*test_errors.py:\d+"):
        tg.grad(f)(np.ones(3), np.ones(4))
    with pytest.raises(tg.ShapeError, match=r"matmul.*\(2, 3\).*\(2, 3\)"):
        tg.jit(lambda a: a @ a)(np.ones((2, 3)))


@pytest.mark.parametrize("bad", ["text", None, object(), {1, 2}], ids=["str", "None", "object", "set"])
def test_non_array_arguments(bad):
    with pytest.raises(TypeError, match="argument 0"):
        tg.grad(lambda x: x)(bad)


def test_data_dependent_branching_names_the_line_and_suggests_where():
    def f(x):
        if x > 0:  # the line the error must name
            return x
        return -x

    with pytest.raises(tg.TracingError) as info:
        tg.grad(f)(1.0)
    message = str(info.value)
    assert "test_errors.py" in message and "if x > 0:" in message and "np.where" in message


def test_converting_a_tracer_to_python_or_numpy():
    with pytest.raises(tg.TracingError, match="float"):
        tg.grad(lambda x: float(x) * x)(1.0)
    with pytest.raises(tg.TracingError, match="NumPy array"):
        tg.grad(lambda x: np.asarray(x).sum())(np.ones(2))


def test_fancy_indexing_is_a_clear_error():
    with pytest.raises(tg.TracingError, match="indexing"):
        tg.grad(lambda x: np.sum(x[np.array([0, 1])]))(np.ones(3))


def test_keyword_arguments():
    with pytest.raises(TypeError, match="keyword arguments"):
        tg.grad(lambda x: x * x)(x=1.0)


def test_escaped_tracer():
    leaked = []

    def f(x):
        leaked.append(x)
        return x * x

    tg.grad(f)(1.0)
    with pytest.raises(tg.TracingError, match="escaped"):
        leaked[0] * 2.0


def test_has_aux_needs_a_pair():
    with pytest.raises(TypeError, match="pair"):
        tg.grad(lambda x: x * x, has_aux=True)(1.0)


def test_unhashable_static_argument():
    with pytest.raises(TypeError, match="hashable"):
        tg.jit(lambda x, n: x, static_argnums=1)(1.0, [1, 2])


def test_check_grad_raises_on_a_wrong_derivative():
    @tg.custom_vjp
    def wrong(x):
        return x * x

    wrong.defvjp(lambda x: (x * x, (x,)), lambda res, g: (g * 2.001 * res[0],))
    with pytest.raises(tg.GradientCheckError, match=r"order-1.*disagrees"):
        tg.check_grad(lambda x: np.sum(wrong(x)), np.array([1.0, 2.0]))
    assert tg.check_grad(lambda x: np.sum(x * x), np.array([1.0, 2.0]), order=3)


def test_reduction_over_bad_axis():
    with pytest.raises(ValueError, match="axis 2 is out of bounds"):
        tg.grad(lambda x: np.sum(np.sum(x, axis=2)))(np.ones((2, 2)))


def test_errors_leave_the_cache_usable():
    f = tg.grad(lambda x: np.sum(x * x))
    with pytest.raises(TypeError):
        f("bad")
    np.testing.assert_array_equal(f(np.ones(2)), [2.0, 2.0])


def test_debug_nans_points_at_the_line_that_made_the_nan(monkeypatch, backend):
    monkeypatch.setenv("TRACEGRAD_DEBUG_NANS", "1")

    def f(x):
        safe = np.where(x > 0, np.sqrt(x), 0.0)  # NaN only in the untaken branch: not blamed
        return np.sum(safe + np.log(x - 1.0))  # the culprit

    with pytest.raises(FloatingPointError, match=r"`log` at test_errors.py:\d+"):
        tg.jit(f, backend=backend)(np.array([0.0, 4.0]))
    # without NaNs in the results nothing is raised
    tg.grad(lambda x: np.sum(np.where(x > 0, np.sqrt(x), 0.0)), backend=backend)(np.array([0.0, 4.0]))


def test_item_and_tolist_on_a_traced_value():
    with pytest.raises(tg.TracingError, match=r"\.item\(\)"):
        tg.jit(lambda x: x.item())(np.ones(1))
    with pytest.raises(tg.TracingError, match="tolist"):
        tg.jit(lambda x: x.tolist())(np.ones(1))
