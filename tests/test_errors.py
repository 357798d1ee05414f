"""Bad input gets a clear error that names the problem, the fix and (when known) the user's line."""

import numpy as np
import pytest

import tracegrad as tg


def test_grad_of_non_scalar_output():
    with pytest.raises(TypeError, match=r"returns one number.*\(3,\).*jacobian"):
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


@pytest.mark.parametrize(
    "name, call",
    [
        ("np.linalg.tensorinv", lambda x: np.sum(np.linalg.tensorinv(x, ind=1))),
        ("np.unique", lambda x: np.sum(np.unique(x))),
        ("np.histogram", lambda x: np.sum(np.histogram(x)[0])),
    ],
)
def test_unsupported_numpy_function_says_so_plainly(name, call):
    """NumPy dispatches only its real functions to tracers, so the name is no typo: no spelling
    guess (np.linalg.solve once suggested np.absolute), just what is not supported yet."""
    with pytest.raises(tg.TracingError) as info:
        tg.grad(call)(np.eye(2) + 1.0)
    message = str(info.value)
    assert f"{name} is not supported on traced values yet" in message
    assert "test_errors.py" in message and "docs/api.md" in message
    assert "Did you mean" not in message


def test_unsupported_function_with_a_traced_equivalent_names_it():
    with pytest.raises(
        tg.TracingError, match=r"(?s)np.argwhere is not supported.*Use np.where\(condition"
    ):
        tg.jit(lambda x: np.argwhere(x))(np.ones(3))
    with pytest.raises(tg.TracingError, match=r"(?s)np.matrix_transpose.*Use np.swapaxes"):
        tg.jit(lambda x: np.matrix_transpose(x))(np.ones((2, 3)))


@pytest.mark.parametrize("name", ["exp", "sin", "sqrt", "log", "tanh", "log1p", "fabs"])
def test_math_function_on_a_traced_value_names_its_numpy_twin(name):
    import math

    fun = getattr(math, name)
    with pytest.raises(tg.TracingError) as info:
        tg.grad(lambda x: fun(x) * 2.0)(0.5)  # called through a local name
    message = str(info.value)
    assert f"math.{name} works on Python numbers only" in message
    assert f"use its NumPy twin np.{name}" in message and "test_errors.py" in message
    with pytest.raises(tg.TracingError, match=rf"math.{name} .*np.{name}"):
        tg.grad(
            lambda x: (
                math.exp(0.5)
                * fun(  # a call over two lines, after another
                    x + 1.0
                )
            )
        )(0.5)


def test_math_functions_with_a_differently_named_twin():
    import math
    from math import asin

    with pytest.raises(tg.TracingError, match=r"math.asin .*use its NumPy twin np.arcsin"):
        tg.grad(lambda x: asin(x))(0.5)
    with pytest.raises(tg.TracingError, match=r"math.pow .*use its NumPy twin np.power"):
        tg.grad(lambda x: math.pow(x, 2.0))(0.5)
    with pytest.raises(tg.TracingError, match=r"math.atan2 .*use its NumPy twin np.arctan2"):
        tg.grad(lambda x: math.atan2(x, 1.0))(0.5)
    with pytest.raises(tg.TracingError, match=r"math.lgamma .*no twin"):
        tg.grad(lambda x: math.lgamma(x))(0.5)


def test_float_of_a_traced_value_is_not_taken_for_a_math_call():
    import math

    with pytest.raises(tg.TracingError) as info:
        tg.grad(lambda x: math.exp(1.0) * float(x))(0.5)
    assert (
        "float() of a traced value" in str(info.value)
        and "math." not in str(info.value).split("\n")[0]
    )


def test_shape_mismatch_names_both_shapes_and_the_line():
    def f(x, y):
        return np.sum(x + y)

    with pytest.raises(tg.ShapeError, match=r"\(3,\) and \(4,\).*test_errors.py:\d+"):
        tg.grad(f)(np.ones(3), np.ones(4))
    with pytest.raises(tg.ShapeError, match=r"matmul.*\(2, 3\).*\(2, 3\)"):
        tg.jit(lambda a: a @ a)(np.ones((2, 3)))


@pytest.mark.parametrize(
    "bad", ["text", None, object(), {1, 2}], ids=["str", "None", "object", "set"]
)
def test_non_array_arguments(bad):
    with pytest.raises(TypeError, match="argument 0"):
        tg.grad(lambda x: x)(bad)


def test_data_dependent_branching_names_the_line_and_suggests_where(monkeypatch):
    """With guards switched off (JAX's rule), a Python branch on a traced value is refused."""

    def f(x):
        if x > 0:  # the line the error must name
            return x
        return -x

    monkeypatch.setenv("TRACEGRAD_GUARDS", "0")
    with pytest.raises(tg.TracingError) as info:
        tg.grad(f)(1.0)
    message = str(info.value)
    assert "test_errors.py" in message and "if x > 0:" in message and "np.where" in message


def test_converting_a_tracer_to_python_or_numpy():
    with pytest.raises(tg.TracingError, match="float"):
        tg.grad(lambda x: float(x) * x)(1.0)
    with pytest.raises(tg.TracingError, match="NumPy array"):
        tg.grad(lambda x: np.ascontiguousarray(x).sum())(np.ones(2))
    with pytest.raises(TypeError, match="dtype object"):
        tg.grad(lambda x: np.array(x, dtype=object).sum())(np.ones(2))


def test_indexing_with_a_traced_mask_is_a_clear_error():
    with pytest.raises(tg.TracingError, match="boolean mask"):
        tg.grad(lambda x: np.sum(x[x > 0.5]))(np.ones(3))


def test_differentiating_a_keyword_argument():
    """Keyword arguments are traced but never differentiated: argnums counts positions only."""
    with pytest.raises(ValueError, match="keyword arguments are never differentiated"):
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
    tg.grad(lambda x: np.sum(np.where(x > 0, np.sqrt(x), 0.0)), backend=backend)(
        np.array([0.0, 4.0])
    )


def test_item_and_tolist_on_a_traced_value():
    with pytest.raises(tg.TracingError, match=r"\.item\(\)"):
        tg.jit(lambda x: x.item())(np.ones(1))
    with pytest.raises(tg.TracingError, match="tolist"):
        tg.jit(lambda x: x.tolist())(np.ones(1))


def test_an_array_of_traced_values_is_traced_like_np_stack():
    np.testing.assert_array_equal(tg.jit(lambda a, b: np.array([a, b]) * 2)(1.0, 2.0), [2.0, 4.0])
    np.testing.assert_array_equal(tg.jit(lambda a, b: np.stack([a, b]) * 2)(1.0, 2.0), [2.0, 4.0])


@pytest.mark.parametrize(
    "fun",
    [
        lambda z: np.floor(z),
        lambda z: np.maximum(z, 0),
        lambda z: np.argmax(z),
        lambda z: np.sort(z),
        lambda z: z < 1,
        lambda z: np.arctan2(z, z),
    ],
)
def test_complex_values_where_numpy_or_tracegrad_has_no_meaning_are_refused(backend, fun):
    """Complex values are computed where NumPy defines them (tests/test_complex.py); anywhere
    else the primitive is named, not given a silent answer."""
    with pytest.raises(TypeError, match="of complex values is not supported"):
        tg.jit(fun, backend=backend)(np.array([1.0 + 2j, 2.0 - 1j]))


def test_round_and_format_of_traced_values_name_the_traced_forms():
    x = np.ones(3)
    with pytest.raises(tg.TracingError, match=r"np\.round"):
        tg.jit(lambda x: round(x[0]))(x)
    with pytest.raises(tg.TracingError, match="debug_print"):
        tg.jit(lambda x: f"{x[0]:.2f}")(x)
    tg.jit(lambda x: (f"{x[0]}", x)[1])(x)  # no format spec: the traced value's repr


def test_check_grad_never_reuses_another_functions_program(backend):
    """Each check_grad differentiates its own function: a program of an earlier check (in
    memory, or on disk after clear_programs) must not answer for it."""

    @tg.custom_vjp
    def square(a):
        return a**2

    square.defvjp(lambda a: (a**2, a), lambda a, ct: (ct * 3.0 * a,))  # wrong: 3a, not 2a
    x = np.array([0.4, 1.1])
    for forget in (False, True):
        assert tg.check_grad(lambda a: np.sum(a**2), x, backend=backend)
        if forget:
            tg.clear_programs()
        with pytest.raises(tg.GradientCheckError):
            tg.check_grad(lambda a: np.sum(square(a)), x, backend=backend)
    other = np.array([1.0, 2.0])
    f = lambda a, b: np.sum(np.sin(a) * b)
    assert tg.check_grad(f, x, other, argnums=0, backend=backend)
    assert tg.check_grad(f, x, -3.0 * other, argnums=0, backend=backend)  # b is guarded
    with pytest.raises(ValueError, match="argnums 3"):
        tg.check_grad(f, x, other, argnums=3, backend=backend)


@pytest.mark.parametrize("static", [-1, (2, 2), (0, -2)])
def test_negative_or_repeated_static_argnums_are_refused(static):
    def f(x, n, scale=1.0):
        return x * n * scale

    for transform in (tg.jit, tg.grad):
        with pytest.raises(ValueError, match="static_argnums"):
            transform(f, static_argnums=static)


def test_wait_compiled_names_a_bad_timeout():
    with pytest.raises(TypeError, match="timeout must be a number"):
        tg.wait_compiled(timeout="x")
    assert tg.wait_compiled(timeout=0.5) in (True, False)
