"""Random numbers drawn while tracing would be baked into the program as constants, and every
call would return the same "random" numbers: tracegrad refuses the trace instead."""

import numpy as np
import pytest

import tracegrad as tg

RNG = np.random.default_rng(0)


def test_the_global_generator_is_refused():
    state = np.random.get_state()
    try:
        with pytest.raises(tg.TracingError, match="global random generator.*pass them in"):
            tg.jit(lambda x: x + np.random.normal(size=3), backend="numpy")(np.zeros(3))
    finally:
        np.random.set_state(state)


def test_a_reachable_generator_is_refused():
    with pytest.raises(tg.TracingError, match="generator global 'RNG'"):
        tg.grad(lambda x: np.sum(x * RNG.normal(size=3)), backend="numpy")(np.zeros(3))

    local = np.random.default_rng(1)
    with pytest.raises(tg.TracingError, match="closure variable 'local'"):
        tg.jit(lambda x: x + local.uniform(size=3), backend="numpy")(np.zeros(3))


def test_a_generator_made_inside_from_a_static_seed_is_fine():
    def noisy(x, seed):
        return x + np.random.default_rng(seed).normal(size=3)

    f = tg.jit(noisy, static_argnums=(1,), backend="numpy")
    np.testing.assert_array_equal(f(np.zeros(3), 1), np.random.default_rng(1).normal(size=3))
    np.testing.assert_array_equal(f(np.zeros(3), 2), np.random.default_rng(2).normal(size=3))


def test_code_that_names_random_but_draws_nothing_traces():
    def maybe(x, noisy=False):
        return x + np.random.normal(size=3) if noisy else 2 * x

    np.testing.assert_array_equal(tg.jit(maybe, backend="numpy")(np.ones(3)), 2 * np.ones(3))
