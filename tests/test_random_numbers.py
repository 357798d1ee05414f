"""Random numbers drawn inside a traced function (tracing/random_draws.py, the `random` entry of
primitive_table/random.py): each draw is a node that draws from the same generator object on
every call, so the compiled function gives the numbers the plain NumPy function gives from the
same seed and call order, and leaves the generator where NumPy would leave it."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from numpy.random import default_rng

import tracegrad as tg

BACKENDS = ("numpy", "cpu")  # the conftest `backend` fixture adds cuda where it runs

RNG = np.random.default_rng(0)  # a global generator, reseeded by the tests that use it
LEGACY = np.random.RandomState(0)


def _state(generator):
    if isinstance(generator, np.random.RandomState):
        kind, keys, pos, gauss, cached = generator.get_state()
        return kind, keys.tobytes(), pos, gauss, cached
    return repr(generator.bit_generator.state)


def _same(got, want):
    """Equal numbers of the same dtype, leaf by leaf (a tuple of results or one array)."""
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def _draws_generator(x):
    """Every recorded method of a Generator, with sizes as ints and tuples."""
    return (
        x + RNG.normal(size=2),
        RNG.normal(1.0, 2.0, size=(2, 2)),
        RNG.uniform(-1.0, 3.0, size=3),
        RNG.integers(0, 10, size=(2,)),
        RNG.integers(5, size=3, dtype=np.int32),
        RNG.choice(7, size=3),
        RNG.choice(np.array([1.0, 2.0, 4.0]), size=(2, 2), p=[0.2, 0.3, 0.5]),
        RNG.permutation(6),
        RNG.standard_normal((2, 3)),
        RNG.random(3),
        RNG.random(2, dtype=np.float32),
        RNG.exponential(2.0, size=2),
        RNG.gamma(2.0, 1.5, size=2),
        RNG.beta(2.0, 3.0, size=2),
        RNG.binomial(10, 0.3, size=3),
        RNG.poisson([1.0, 4.0]),
        RNG.multivariate_normal(np.zeros(2), np.array([[2.0, 0.5], [0.5, 1.0]]), size=3),
        RNG.normal(),
    )


def _draws_legacy(x):
    """Every recorded method of a RandomState (the legacy names)."""
    return (
        x * LEGACY.randn(2),
        LEGACY.rand(2, 2),
        LEGACY.randint(0, 5, size=3),
        LEGACY.random_sample((2,)),
        LEGACY.normal(0.5, 2.0, size=2),
        LEGACY.choice(5, size=2, replace=False),
        LEGACY.permutation(4),
        LEGACY.exponential(size=2),
        LEGACY.gamma(3.0, size=2),
        LEGACY.beta(1.0, 2.0, size=2),
        LEGACY.binomial(4, 0.5, size=2),
        LEGACY.poisson(2.0, size=2),
    )


def _draws_global(x):
    """NumPy's global functions (the global RandomState)."""
    return (
        x + np.random.normal(size=2),
        np.random.randn(3),
        np.random.rand(2),
        np.random.randint(0, 9, size=(2, 2)),
        np.random.uniform(size=2),
        np.random.random(2),
        np.random.random_sample(2),
        np.random.choice(4, size=2),
    )


def _reseed(seed: int) -> None:
    global RNG
    RNG = np.random.default_rng(seed)
    LEGACY.seed(seed)
    np.random.seed(seed)


@pytest.mark.parametrize("fun", [_draws_generator, _draws_legacy, _draws_global])
def test_three_calls_give_numpys_numbers(fun, backend):
    state = np.random.get_state()
    try:
        x = np.arange(2.0)
        _reseed(11)
        want = [fun(x) for _ in range(3)]
        after = (_state(RNG), _state(LEGACY), _state(np.random.mtrand._rand))
        _reseed(11)
        f = tg.jit(fun, backend=backend)
        got = [f(x) for _ in range(3)]
        for g, w in zip(got, want, strict=True):
            _same(g, w)
        # the generators advanced exactly as the plain function advanced them
        assert (_state(RNG), _state(LEGACY), _state(np.random.mtrand._rand)) == after
        assert f.trace_count == 1  # the generators' state is not part of the program's key
    finally:
        np.random.set_state(state)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_closure_an_attribute_and_a_static_argument(backend):
    def closure(seed):
        local = np.random.default_rng(seed)
        return lambda x: x * local.standard_normal(3)

    class Model:
        def __init__(self, seed):
            self.rng = np.random.default_rng(seed)

        def noisy(self, x):
            return x + self.rng.uniform(size=3)

    def by_argument(x, rng):
        return x - rng.exponential(size=3)

    x = np.ones(3)
    f, plain = tg.jit(closure(3), backend=backend), closure(3)
    model, plain_model = Model(4), Model(4)
    m = tg.jit(model.noisy, backend=backend)
    s = tg.jit(by_argument, static_argnums=(1,), backend=backend)
    r, plain_r = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(3):
        _same(f(x), plain(x))
        _same(m(x), plain_model.noisy(x))
        _same(s(x, r), by_argument(x, plain_r))
    assert _state(model.rng) == _state(plain_model.rng) and _state(r) == _state(plain_r)
    assert isinstance(model.rng, np.random.Generator)  # put back after tracing


def test_a_draw_nothing_reads_still_advances_the_generator():
    def f(x):
        RNG.normal(size=4)  # unused: NumPy draws it anyway
        return x + RNG.random()

    _reseed(2)
    want = [f(np.zeros(())) for _ in range(2)]
    after = _state(RNG)
    _reseed(2)
    g = tg.jit(f, backend="cpu")
    for w in want:
        _same(g(np.zeros(())), w)
    assert _state(RNG) == after


def test_two_equal_draws_are_two_draws():
    def f(x):
        return x + RNG.normal(size=3) - RNG.normal(size=3)

    _reseed(6)
    want = f(np.zeros(3))
    _reseed(6)
    got = tg.jit(f, backend="cpu")(np.zeros(3))
    _same(got, want)
    assert np.all(got != 0.0)


def _fd_grad(fun, x, h=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = h
        g.flat[i] = (fun(x + e) - fun(x - e)) / (2 * h)
    return g


def test_the_reparameterisation_gradient_equals_finite_differences(backend):
    def loss(theta):
        mu, log_sigma = theta[:3], theta[3:]
        z = mu + np.exp(log_sigma) * RNG.normal(size=3)
        return np.sum(np.sin(z) + z**2)

    theta = np.array([0.3, -0.5, 1.0, -0.2, 0.1, 0.4])
    _reseed(8)
    value, grad = tg.value_and_grad(loss, backend=backend)(theta)

    def fixed(t):  # the same draws for every evaluation
        _reseed(8)
        return loss(t)

    np.testing.assert_allclose(value, fixed(theta), rtol=1e-13)
    np.testing.assert_allclose(grad, _fd_grad(fixed, theta), rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("backend", BACKENDS)
def test_normal_with_traced_parameters_is_loc_plus_scale_times_a_standard_draw(backend):
    def sample(mu, sigma):
        return RNG.normal(mu, sigma)  # NumPy: mu + sigma * standard_normal, element by element

    mu, sigma = np.array([0.0, 1.0, -2.0]), np.array([1.0, 0.5, 3.0])
    _reseed(9)
    want = [sample(mu, sigma) for _ in range(2)]
    after = _state(RNG)
    _reseed(9)
    f = tg.jit(sample, backend=backend)
    for w in want:
        np.testing.assert_allclose(f(mu, sigma), w, rtol=1e-15, atol=1e-15)
    assert _state(RNG) == after

    def total(sigma):
        return np.sum(RNG.normal(1.0, sigma, size=(2, 3)) ** 2)

    _reseed(10)
    grad = tg.grad(total, backend=backend)(sigma)

    def fixed(s):
        _reseed(10)
        return np.sum(RNG.normal(1.0, s, size=(2, 3)) ** 2)

    np.testing.assert_allclose(grad, _fd_grad(fixed, sigma), rtol=1e-7)


def test_a_vae_like_loss_trains_as_plain_numpy_does():
    """Five steps of gradient descent on a loss that draws inside it: tg.value_and_grad on cpu
    and on the NumPy interpreter, and plain NumPy with the analytic gradient, from one seed."""
    rng_data = np.random.default_rng(0)
    data = rng_data.normal(size=(6, 2))
    w0 = 0.1 * rng_data.normal(size=(2, 2))

    def loss(params):
        w, mu, log_sigma = params
        eps = RNG.normal(size=(6, 2))
        z = mu + np.exp(log_sigma) * eps
        recon = z @ w
        kl = 0.5 * np.sum(np.exp(2 * log_sigma) + mu**2 - 1 - 2 * log_sigma)
        return np.mean((recon - data) ** 2) + 0.01 * kl

    def analytic(params):
        w, mu, log_sigma = params
        eps = RNG.normal(size=(6, 2))
        sigma = np.exp(log_sigma)
        z = mu + sigma * eps
        r = z @ w - data
        value = np.mean(r**2) + 0.005 * np.sum(sigma**2 + mu**2 - 1 - 2 * log_sigma)
        dr = 2 * r / r.size
        dz = dr @ w.T
        dw = z.T @ dr
        dmu = dz.sum(axis=0) + 0.01 * mu
        dls = (dz * eps * sigma).sum(axis=0) + 0.01 * (sigma**2 - 1)
        return value, (dw, dmu, dls)

    def train(value_and_grad):
        _reseed(21)
        params = (w0, np.zeros(2), np.zeros(2))
        losses = []
        for _ in range(5):
            value, grads = value_and_grad(params)
            losses.append(float(value))
            params = tuple(p - 0.2 * g for p, g in zip(params, grads, strict=True))
        return np.array(losses), _state(RNG)

    plain, plain_state = train(analytic)
    cpu, cpu_state = train(tg.value_and_grad(loss, backend="cpu"))
    interp, interp_state = train(tg.value_and_grad(loss, backend="numpy"))
    np.testing.assert_allclose(cpu, plain, rtol=1e-12)
    np.testing.assert_allclose(interp, plain, rtol=1e-12)
    assert cpu_state == plain_state == interp_state
    assert len(set(plain.tolist())) == 5  # the parameters moved: the gradients were used


def test_hessian_and_jvp_draw_once_per_call():
    def f(x):
        return np.sum(np.sin(x) * RNG.normal(size=3))

    x = np.array([0.1, 0.7, -0.4])
    _reseed(12)
    hess = tg.hessian(f, backend="cpu")(x)
    _, tangent = tg.jvp(f, (x,), (np.ones(3),))
    plain = np.random.default_rng(12)
    e1, e2 = plain.normal(size=3), plain.normal(size=3)
    np.testing.assert_allclose(hess, np.diag(-np.sin(x) * e1), rtol=1e-14)
    np.testing.assert_allclose(tangent, np.sum(np.cos(x) * e2), rtol=1e-14)
    assert _state(RNG) == _state(plain)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_scan_body_draws_on_every_step(backend):
    def f(x):
        def step(c, xi):
            c = c * xi + RNG.normal()
            return c, c

        _, ys = tg.scan(step, x[0], x)
        return np.sum(ys)

    def plain(x):
        c, total = x[0], 0.0
        for xi in x:
            c = c * xi + RNG.normal()
            total += c
        return total

    x = np.array([0.5, 0.9, 1.1, 0.7])
    _reseed(13)
    want = [plain(x) for _ in range(2)]
    after = _state(RNG)
    _reseed(13)
    g = tg.jit(f, backend=backend)
    np.testing.assert_allclose([g(x) for _ in range(2)], want, rtol=1e-14)
    assert _state(RNG) == after


def test_a_program_that_draws_is_not_persisted(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEGRAD_PROGRAM_CACHE", "1")
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path / "cache"))
    tg.clear_programs()
    try:
        local = np.random.default_rng(1)
        f = tg.jit(lambda x: x + local.normal(size=3), backend="numpy")
        np.testing.assert_array_equal(f(np.zeros(3)), np.random.default_rng(1).normal(size=3))
        folder = tmp_path / "cache" / "programs"
        assert not (folder.exists() and any(p.suffix == ".tgp" for p in folder.iterdir()))
    finally:
        tg.clear_programs()


def test_the_ir_shows_the_draw_and_make_ir_does_not_draw():
    local = np.random.default_rng(3)
    text = str(tg.make_ir(lambda x: x + local.normal(size=3))(np.zeros(3)))
    assert "random[draw=Generator@" in text and ".normal(size=3)" in text
    assert _state(local) == _state(np.random.default_rng(3))


def test_another_thread_draws_from_the_generator_itself_while_one_traces():
    started, release = threading.Event(), threading.Event()
    seen = []

    def slow(x):
        started.set()
        release.wait(5)
        return x + RNG.normal(size=2)

    def other():
        started.wait(5)
        seen.append(type(RNG.normal(size=2)))  # RNG is a stand-in now: it passes the call on
        release.set()

    _reseed(14)
    worker = threading.Thread(target=other)
    worker.start()
    tg.jit(slow, backend="numpy")(np.zeros(2))
    worker.join()
    assert seen == [np.ndarray]
    assert isinstance(RNG, np.random.Generator)


def test_a_generator_made_inside_from_a_static_seed_is_fine():
    def noisy(x, seed):
        return x + np.random.default_rng(seed).normal(size=3)

    f = tg.jit(noisy, static_argnums=(1,), backend="numpy")
    np.testing.assert_array_equal(f(np.zeros(3), 1), np.random.default_rng(1).normal(size=3))
    np.testing.assert_array_equal(f(np.zeros(3), 1), np.random.default_rng(1).normal(size=3))
    np.testing.assert_array_equal(f(np.zeros(3), 2), np.random.default_rng(2).normal(size=3))


def test_a_generator_made_inside_without_a_seed_draws_new_numbers_on_every_call():
    f = tg.jit(lambda x: x + np.random.default_rng().normal(size=4), backend="cpu")
    a, b = f(np.zeros(4)), f(np.zeros(4))
    assert np.all(np.isfinite(a)) and not np.array_equal(a, b)


def _from_imported_default_rng(x):
    return x + default_rng().normal(size=4)  # `from numpy.random import default_rng`


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_default_rng_imported_by_name_without_a_seed_draws_new_numbers_on_every_call(backend):
    f = tg.jit(_from_imported_default_rng, backend=backend)
    a, b = f(np.zeros(4)), f(np.zeros(4))
    assert np.all(np.isfinite(a)) and not np.array_equal(a, b)
    assert globals()["default_rng"] is np.random.default_rng  # put back after the trace
    seeded = tg.jit(lambda x: x + default_rng(7).normal(size=4), backend=backend)
    np.testing.assert_array_equal(seeded(np.zeros(4)), default_rng(7).normal(size=4))


def test_code_that_names_random_but_draws_nothing_traces():
    def maybe(x, noisy=False):
        return x + np.random.normal(size=3) if noisy else 2 * x

    np.testing.assert_array_equal(tg.jit(maybe, backend="numpy")(np.ones(3)), 2 * np.ones(3))


# ---- what is refused, and why


def test_vmap_of_a_function_that_draws_is_refused():
    with pytest.raises(tg.TracingError, match=r"inside tg.vmap.*size=\(batch"):
        tg.vmap(lambda x: x + RNG.normal(size=3), backend="numpy")(np.zeros((2, 3)))


def test_a_traced_parameter_of_another_distribution_is_refused():
    with pytest.raises(tg.TracingError, match=r"Generator.uniform with a traced parameter"):
        tg.jit(lambda x: RNG.uniform(x, 2.0), backend="numpy")(np.zeros(3))


def test_in_place_shuffles_and_reseeding_are_refused():
    x = np.arange(4.0)
    with pytest.raises(tg.TracingError, match=r"shuffle.*in place.*permutation"):
        tg.jit(lambda v: RNG.shuffle(v) or v, backend="numpy")(x)
    with pytest.raises(tg.TracingError, match=r"np.random.seed.*outside"):
        tg.jit(lambda v: np.random.seed(0) or v, backend="numpy")(x)
    np.testing.assert_array_equal(x, np.arange(4.0))  # the user's array is untouched


def test_control_flow_on_traced_values_with_draws_is_refused():
    def after(x):
        e = RNG.normal(size=3)
        return x + e if np.sum(x) > 0 else x - e

    def before(x):
        y = 2 * x if np.sum(x) > 0 else x
        return y + RNG.normal(size=3)

    for fun in (after, before):
        with pytest.raises(tg.TracingError, match=r"np.where"):
            tg.jit(fun, backend="numpy")(np.ones(3))


def test_a_draw_inside_a_checkpoint_is_refused():
    def f(x):
        return np.sum(tg.checkpoint(lambda y: np.sin(y) * RNG.normal(size=3))(x))

    with pytest.raises(tg.TracingError, match=r"inside tg.checkpoint"):
        tg.grad(f, backend="numpy")(np.ones(3))


def test_a_draw_that_cannot_be_recorded_is_refused():
    held = (np.random.default_rng(1),)  # a tuple cannot hold a stand-in
    with pytest.raises(tg.TracingError, match=r"closure variable 'held\[0\]'.*does not record"):
        tg.jit(lambda x: x + held[0].normal(size=3), backend="numpy")(np.zeros(3))
    with pytest.raises(tg.TracingError, match=r"does not record"):
        tg.jit(lambda x: x + RNG.bit_generator.random_raw(3), backend="numpy")(np.zeros(3))


def test_a_draw_inside_a_loop_body_with_python_control_flow_is_refused():
    def f(x):
        y = x if np.sum(x) > 0 else -x  # answered before the loop's body draws
        return tg.fori_loop(0, 3, lambda i, v: v + RNG.normal(size=3), y)

    with pytest.raises(tg.TracingError, match=r"draw twice.*np.where"):
        tg.jit(f, backend="numpy")(np.ones(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_permutation_and_choice_of_a_traced_population(backend):
    """NumPy draws a population's indices as those of an arange of its length, then takes them:
    the traced x[permutation(len(x))] gives NumPy's numbers, and its gradient flows to x."""

    def f(x, w):
        return (
            RNG.permutation(x),
            RNG.choice(x, size=4),
            RNG.choice(x, size=(2,), replace=False, p=[0.1, 0.2, 0.3, 0.2, 0.2]),
            RNG.choice(x),
            LEGACY.permutation(x),
            LEGACY.choice(x, 2, replace=False, p=[0.1, 0.2, 0.3, 0.2, 0.2]),
            RNG.permutation(w),
            LEGACY.permutation(w),
        )

    x, w = 1.5 * np.arange(5.0), np.arange(12.0).reshape(4, 3)
    _reseed(15)
    want = [f(x, w) for _ in range(2)]
    _reseed(15)
    g = tg.jit(f, backend=backend)
    for w_ in want:
        _same(g(x, w), w_)

    def loss(x):
        return np.sum(RNG.permutation(x) * np.arange(5.0))

    _reseed(16)
    grad = tg.grad(loss, backend=backend)(x)
    expected = np.zeros(5)
    expected[np.random.default_rng(16).permutation(5)] = np.arange(5.0)
    np.testing.assert_array_equal(grad, expected)
