"""Values a traced function reads from outside its arguments are never stale, results never share
memory, and per-function bookkeeping dies with the function (capture.py, program_store.py)."""

import gc
import logging
import threading
import types
import weakref

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.runtime import program_store

# ---- results are arrays of their own


def _owns(result, *others):
    assert isinstance(result, np.ndarray) and result.base is None and result.flags.writeable
    for other in others:
        assert result is not other and not np.shares_memory(result, other)


def test_value_and_grad_of_exp_are_two_arrays(backend):
    v, g = tg.value_and_grad(np.exp, backend=backend)(1.0)
    _owns(v, g)
    g *= 0
    assert v == pytest.approx(np.e)


def test_equal_gradients_are_separate_arrays(backend):
    x, y = np.ones(3), np.full(3, 2.0)
    gx, gy = tg.grad(lambda x, y: np.sum(x + y), argnums=(0, 1), backend=backend)(x, y)
    _owns(gx, gy, x, y)
    grads = tg.grad(lambda p: np.sum(p["a"] + p["b"]), backend=backend)({"a": x, "b": y})
    _owns(grads["a"], grads["b"], x, y)
    grads["a"][:] = 5
    np.testing.assert_array_equal(grads["b"], 1.0)


def test_jit_results_that_the_simplifier_merged_are_separate(backend):
    x = np.arange(3.0)
    a, b = tg.jit(lambda x: (x * 2, x * 2), backend=backend)(x)
    _owns(a, b, x)
    same = tg.jit(lambda x: x, backend=backend)(x)
    _owns(same, x)


def test_results_are_not_kept_by_the_program(backend):
    """A constant result, and the result of an earlier call, change nothing when mutated."""
    f = tg.jit(lambda x: (np.ones(3) * 2.0, x + 1.0), backend=backend)
    x = np.zeros(3)
    first = f(x)
    for r in first:
        r[:] = -7.0
    second = f(x)
    np.testing.assert_array_equal(second[0], 2.0)
    np.testing.assert_array_equal(second[1], 1.0)
    _owns(second[0], first[0])
    _owns(second[1], first[1])
    np.testing.assert_array_equal(x, 0.0)


# ---- captured values


def test_global_array_rebound_and_changed_in_place(backend):
    ns = {"np": np, "X": np.ones(3)}
    exec("def loss(w):\n    return np.sum(w * X)", ns)
    g = tg.grad(ns["loss"], backend=backend)
    np.testing.assert_array_equal(g(np.zeros(3)), 1.0)
    ns["X"] = np.full(3, 7.0)
    np.testing.assert_array_equal(g(np.zeros(3)), 7.0)
    ns["X"][:] = 3.0
    np.testing.assert_array_equal(g(np.zeros(3)), 3.0)
    # a fresh transform of the same function (the fast path is per transform) sees it too
    ns["X"][1] = -1.0
    np.testing.assert_array_equal(tg.grad(ns["loss"], backend=backend)(np.zeros(3)), [3, -1, 3])
    assert g.trace_count == 1  # arrays are inputs: no new trace for new values


def test_global_array_of_a_new_shape_traces_again(backend):
    ns = {"np": np, "X": np.ones(3)}
    exec("def loss(w):\n    return np.sum(w) * np.sum(X)", ns)
    g = tg.grad(ns["loss"], backend=backend)
    assert g(np.zeros(2))[0] == 3.0
    ns["X"] = np.ones(5)
    assert g(np.zeros(2))[0] == 5.0
    assert g.trace_count == 2


def test_closure_cells_defaults_and_numbers(backend):
    scale = 2.0

    def loss(w):
        return np.sum(w * scale)

    g = tg.grad(loss, backend=backend)
    assert g(np.ones(2))[0] == 2.0
    scale = 3.0
    assert g(np.ones(2))[0] == 3.0

    def with_default(w, c=np.full(2, 4.0)):  # noqa: B008 (a default the function reads)
        return np.sum(w * c)

    g2 = tg.grad(with_default, backend=backend)
    assert g2(np.ones(2))[0] == 4.0
    with_default.__defaults__[0][:] = 6.0
    assert g2(np.ones(2))[0] == 6.0
    with_default.__defaults__ = (np.full(2, 8.0),)
    assert g2(np.ones(2))[0] == 8.0


def test_attributes_of_a_static_self(backend):
    class Model:
        def __init__(self):
            self.c = 5.0
            self.W = np.eye(2)
            self.unused = 0

        def loss(self, w):
            return np.sum(self.W @ w) * self.c

    m = Model()
    g = tg.grad(lambda w, model: model.loss(w), static_argnums=1, backend=backend)
    np.testing.assert_allclose(g(np.ones(2), m), [5.0, 5.0])
    m.c = 2.0
    np.testing.assert_allclose(g(np.ones(2), m), [2.0, 2.0])
    m.W[0, 0] = 3.0  # read as an input: no new trace
    np.testing.assert_allclose(g(np.ones(2), m), [6.0, 2.0])
    m.unused += 1  # not read by the function: no new trace
    g(np.ones(2), m)
    assert g.trace_count == 2


def test_objects_with_slots_and_class_attributes(backend):
    class Slotted:
        __slots__ = ("W", "c")
        scale = 2.0

        def __init__(self):
            self.c, self.W = 3.0, np.ones(2)

    m = Slotted()
    g = tg.grad(lambda w, m: np.sum(w * m.W) * m.c * m.scale, static_argnums=1, backend=backend)
    np.testing.assert_array_equal(g(np.ones(2), m), 6.0)
    np.testing.assert_array_equal(g(np.ones(2), m), 6.0)
    assert g.trace_count == 1
    m.c = 1.0
    Slotted.scale = 5.0
    m.W[:] = 2.0
    np.testing.assert_array_equal(g(np.ones(2), m), 10.0)


def test_what_a_property_reads_is_guarded(backend):
    class Model:
        def __init__(self):
            self._log_scale = 0.0

        @property
        def scale(self):
            return float(np.exp(self._log_scale))

    m = Model()
    g = tg.grad(lambda w, m: np.sum(w) * m.scale, static_argnums=1, backend=backend)
    assert g(np.ones(1), m)[0] == 1.0
    m._log_scale = np.log(3.0)
    assert g(np.ones(1), m)[0] == pytest.approx(3.0)


def test_arrays_computed_from_captured_arrays_while_tracing(backend):
    """X.mean() runs in NumPy while tracing; its value is baked in, so X's contents are
    guarded."""
    ns = {"np": np, "X": np.arange(4.0)}
    exec("def loss(w):\n    return np.sum(w * X.mean())", ns)
    g = tg.grad(ns["loss"], backend=backend)
    assert g(np.zeros(2))[0] == 1.5
    ns["X"][:] = 10.0
    assert g(np.zeros(2))[0] == 10.0


def test_views_of_captured_arrays(backend):
    ns = {"np": np, "X": np.arange(6.0).reshape(3, 2)}
    exec("def loss(w):\n    return np.sum(w * X[:, 1])", ns)
    g = tg.grad(ns["loss"], backend=backend)
    np.testing.assert_array_equal(g(np.zeros(3)), [1, 3, 5])
    ns["X"][:, 1] = -1.0  # seen through the held view
    np.testing.assert_array_equal(g(np.zeros(3)), [-1, -1, -1])
    ns["X"] = np.zeros((3, 2))  # a new array: traced again
    np.testing.assert_array_equal(g(np.zeros(3)), [0, 0, 0])


def test_parameters_in_a_global_dict_and_a_module(backend):
    config = types.ModuleType("config")
    config.X = np.ones(2)
    config.rate = 2.0
    ns = {"np": np, "params": {"W": np.ones(2), "b": 1.0}, "config": config}
    exec(
        "def loss(w):\n    return np.sum(w * params['W'] * config.X) * config.rate + params['b']",
        ns,
    )
    vg = tg.value_and_grad(ns["loss"], backend=backend)
    v, g = vg(np.ones(2))
    assert v == 5.0
    ns["params"]["W"] = np.full(2, 3.0)
    config.rate = 1.0
    ns["params"]["b"] = 0.0
    v, g = vg(np.ones(2))
    assert v == 6.0
    np.testing.assert_array_equal(g, 3.0)
    config.X[:] = 2.0
    assert vg(np.ones(2))[0] == 12.0


def test_helper_functions_are_followed(backend):
    ns = {"np": np, "X": np.ones(2)}
    exec(
        "def helper(w):\n    return w * X\ndef loss(w):\n    return np.sum(helper(w))",
        ns,
    )
    g = tg.jit(tg.grad(ns["loss"]), backend=backend)
    np.testing.assert_array_equal(g(np.zeros(2)), 1.0)
    ns["X"] = np.full(2, 4.0)
    np.testing.assert_array_equal(g(np.zeros(2)), 4.0)
    exec("def helper(w):\n    return w * X * 2", ns)  # the helper itself redefined
    np.testing.assert_array_equal(g(np.zeros(2)), 8.0)


def test_transforms_called_inside_a_trace_and_arrays_passed_by_keyword(backend):
    ns = {"np": np, "tg": tg, "X": np.ones(2), "LOW": np.zeros(2)}
    exec(
        "def loss(w):\n    return np.sum(np.clip(w * X, a_min=LOW, a_max=None))\n"
        "def outer(w):\n    return tg.grad(loss)(w) * 2.0",
        ns,
    )
    f = tg.jit(ns["outer"], backend=backend)
    np.testing.assert_array_equal(f(np.ones(2)), 2.0)
    ns["X"][:] = 3.0
    np.testing.assert_array_equal(f(np.ones(2)), 6.0)
    ns["LOW"][:] = 10.0  # clipped from below everywhere: no gradient
    np.testing.assert_array_equal(f(np.ones(2)), 0.0)
    assert f.trace_count == 1


def test_traced_values_passed_by_keyword(backend):
    x, hi = np.array([0.5, -1.0, 2.0]), np.array([1.0, 0.0, 1.0])
    np.testing.assert_array_equal(
        tg.jit(lambda x, h: np.clip(x, a_max=h), backend=backend)(x, hi), [0.5, -1, 1]
    )
    np.testing.assert_array_equal(
        tg.jit(lambda x, h: np.clip(x, max=h), backend=backend)(x, hi), [0.5, -1, 1]
    )
    assert tg.jit(lambda x, h: np.dot(a=x, b=h), backend=backend)(x, hi) == 2.5
    g = tg.grad(lambda x, h: np.sum(np.clip(x, a_min=None, a_max=h)), argnums=1, backend=backend)(
        x, hi
    )
    np.testing.assert_array_equal(g, [0.0, 0.0, 1.0])


def test_lambdas_made_in_a_loop_share_one_program(backend):
    def make(a):
        return lambda w: np.sum(w * a)

    results = [tg.grad(make(np.full(2, float(k))), backend=backend)(np.ones(2)) for k in range(4)]
    for k, r in enumerate(results):
        np.testing.assert_array_equal(r, k)
    assert tg.grad(make(np.ones(2)), backend=backend).trace_count == 1


def test_the_retrace_log_names_what_changed(monkeypatch, caplog):
    monkeypatch.setenv("TRACEGRAD_LOG", "retrace")
    rate = 0.5

    def loss(w):
        return np.sum(w) * rate

    g = tg.grad(loss, backend="numpy")
    g(np.ones(2))
    rate = 0.25
    with caplog.at_level(logging.INFO, logger="tracegrad"):
        assert g(np.ones(2))[0] == 0.25
    assert "closure variable 'rate' of loss changed (0.5 -> 0.25)" in caplog.text


def test_a_value_that_keeps_changing_is_reported(caplog):
    box = {"n": 0}

    def loss(w):
        return np.sum(w) * box["n"]

    g = tg.grad(loss, backend="numpy")
    with caplog.at_level(logging.WARNING, logger="tracegrad"):
        for n in range(program_store.GUARD_RETRACE_WARNING + 1):
            box["n"] = n
            assert g(np.ones(1))[0] == n
    assert "keeps changing" in caplog.text and "tracegrad: tracegrad" not in caplog.text
    assert "closure variable \"box['n']\" of loss" in caplog.text


def test_a_counter_the_function_itself_increments_does_not_retrace():
    calls = 0

    def loss(w):
        nonlocal calls
        calls += 1  # runs while tracing only
        return np.sum(w**2)

    g = tg.grad(loss, backend="numpy")
    for _ in range(3):
        g(np.ones(2))
    assert calls == 1 and g.trace_count == 1


def test_an_accumulator_list_used_by_a_hook_does_not_retrace():
    seen = []

    def loss(w):
        return np.sum(tg.tap(w * 2.0, "h", hook=lambda name, ct: seen.append(ct)) ** 2)

    g = tg.grad(loss, backend="numpy")
    for _ in range(3):
        g(np.ones(2))
    assert len(seen) == 3 and g.trace_count == 1


def test_captured_values_across_threads(backend):
    X = np.arange(4.0)

    def loss(w, k):
        return np.sum(w * X) * k

    g = tg.grad(loss, backend=backend)
    g(np.zeros(4), 1.0)
    errors = []

    def work(k):
        for _ in range(5):
            r = g(np.zeros(4), float(k))
            if not np.array_equal(r, X * k):
                errors.append((k, r))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# ---- memory: nothing kept alive by bookkeeping


def test_inline_transforms_do_not_keep_their_closures_alive():
    refs = []
    w = np.ones(4)
    tg.grad(lambda w: np.sum(w), backend="numpy")(w)
    gc.disable()  # freed by reference counting alone: no cycle holds a transform or its closure
    try:
        for k in range(30):
            big = np.full(4, float(k))
            refs.append(weakref.ref(big))
            g = tg.grad(lambda w: np.sum(w * big), backend="numpy")  # noqa: B023, F821 (on purpose)
            assert g(w)[0] == k and g(w)[0] == k  # the second call takes the fast path
        del big, g
        assert sum(r() is not None for r in refs) == 0
    finally:
        gc.enable()
    assert tg.grad(lambda w: np.sum(w * w), backend="numpy").trace_count <= 1


def test_held_views_of_captured_arrays_are_bounded_and_freed():
    """A view (big[:4]) is held by its program, so a new array traces again; the store drops
    the old program, and clear_programs frees the last."""
    refs = []
    for k in range(12):
        big = np.full(100_000, float(k))
        refs.append(weakref.ref(big))
        g = tg.grad(lambda w: np.sum(w * big[:4]), backend="numpy")  # noqa: B023, F821 (on purpose)
        assert g(np.ones(4))[0] == k
        del g
    del big
    gc.collect()
    assert sum(r() is not None for r in refs) <= 1
    tg.clear_programs()
    gc.collect()
    assert sum(r() is not None for r in refs) == 0


def test_the_program_store_is_bounded_in_bytes(monkeypatch):
    store = program_store.ProgramStore(max_count=100, max_bytes=3 * 8 * 10_000)
    monkeypatch.setattr(program_store, "_programs", store)
    f = tg.jit(lambda x: x.sum() + np.arange(10_000.0), backend="numpy")  # an 80 kB constant
    for k in range(1, 9):
        np.testing.assert_array_equal(f(np.ones(k)), np.arange(10_000.0) + k)
    assert len(store) == 3 and store.nbytes == 3 * 8 * 10_000


# ---- arguments


def test_static_arguments_keep_their_type(backend):
    f = tg.jit(lambda x, n: x * n, static_argnums=1, backend=backend)
    ints = np.arange(3)
    assert f(ints, 2).dtype == np.int64
    assert f(ints, 2.0).dtype == np.float64
    assert f(ints, (2,)[0]).dtype == np.int64


def test_numpy_integer_argnums_mean_one_argument(backend):
    x = np.array([1.0, 2.0])
    jac = tg.jacobian(lambda x: x**2, argnums=np.int64(0), backend=backend)(x)
    hess = tg.hessian(lambda x: np.sum(x**3), argnums=np.int32(0), backend=backend)(x)
    np.testing.assert_allclose(jac, np.diag(2 * x))
    np.testing.assert_allclose(hess, np.diag(6 * x))


def test_jacobian_with_aux(backend):
    x = np.array([1.0, 2.0, 3.0])
    jac, aux = tg.jacobian(lambda a: (a**2, np.sum(a)), has_aux=True, backend=backend)(x)
    np.testing.assert_allclose(jac, np.diag(2 * x))
    assert aux == 6.0


class _Doubling(np.ndarray):
    """A subclass with arithmetic of its own."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return 2 * super().__array_ufunc__(ufunc, method, *inputs, **kwargs)


@pytest.mark.parametrize(
    "value",
    [np.ma.masked_array([1.0, 100.0, 3.0], mask=[0, 1, 0]), np.ones(3).view(_Doubling)],
    ids=["masked", "own-arithmetic"],
)
def test_array_subclasses_that_change_semantics_are_refused(backend, value):
    with pytest.raises(TypeError, match=r"masked array|ndarray subclass"):
        tg.jit(lambda m: np.sum(m * 2), backend=backend)(value)
    with pytest.raises(TypeError, match=r"masked array|ndarray subclass"):
        tg.jit(lambda x: np.sum(x * value), backend=backend)(1.0)


def test_device_results_are_arrays_of_their_own():
    from conftest import BACKENDS

    if "cuda" not in BACKENDS:
        pytest.skip("the cuda backend is not installed")
    from numba import cuda

    x = cuda.to_device(np.arange(3.0))
    a, b = tg.jit(lambda x: (x * 2, x * 2), backend="cuda")(x)
    same = tg.jit(lambda x: x, backend="cuda")(x)
    gx, gy = tg.grad(lambda x, y: np.sum(x + y), argnums=(0, 1), backend="cuda")(x, x)
    assert a is not b and same is not x and gx is not gy and gx is not x
    a.copy_to_device(np.zeros(3))
    np.testing.assert_array_equal(b.copy_to_host(), [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(x.copy_to_host(), [0.0, 1.0, 2.0])


def test_a_user_module_with_a_standard_library_name_is_walked(monkeypatch, tmp_path):
    """A user's package may be called like a standard module (`test`, `turtledemo`): its
    globals are still read at call time."""
    package = types.ModuleType("turtledemo")
    package.__file__ = str(tmp_path / "turtledemo" / "__init__.py")
    monkeypatch.setitem(__import__("sys").modules, "turtledemo", package)
    ns = {"__name__": "turtledemo.lesson", "np": np, "RATE": 2.0}
    exec("def loss(w):\n    return np.sum(w) * RATE", ns)
    g = tg.grad(ns["loss"], backend="numpy")
    assert g(np.ones(1))[0] == 2.0
    ns["RATE"] = 3.0
    assert g(np.ones(1))[0] == 3.0


def test_a_callable_object_reads_its_attributes_at_call_time(backend):
    class Base:
        def __call__(self, w):
            return np.sum(w * self.k)

    class Loss(Base):  # __call__ inherited
        def __init__(self):
            self.k = 2.0

    loss = Loss()
    g = tg.grad(loss, backend=backend)
    np.testing.assert_array_equal(g(np.ones(2)), 2.0)
    loss.k = 5.0
    np.testing.assert_array_equal(g(np.ones(2)), 5.0)


def test_standard_library_namespaces_and_container_subclasses(backend):
    """argparse.Namespace, SimpleNamespace, OrderedDict, defaultdict and a user's dict or list
    subclass are walked like plain objects and containers: a change inside is seen."""
    import argparse
    import collections

    class AttrDict(dict):  # the attribute-access config pattern; __getattr__ raises KeyError
        __getattr__ = dict.__getitem__

    class Rows(list):
        pass

    args = argparse.Namespace(lr=1.0)
    ns = types.SimpleNamespace(scale=1.0)
    ordered = collections.OrderedDict(w=np.ones(2))
    counts = collections.defaultdict(float, c=1.0)
    cfg = AttrDict(k=1.0)
    rows = Rows([np.ones(2)])

    def loss(w):
        return np.sum(w * ordered["w"] * rows[0]) * args.lr * ns.scale * counts["c"] * cfg.k

    g = tg.grad(loss, backend=backend)
    np.testing.assert_array_equal(g(np.ones(2)), [1.0, 1.0])
    args.lr, ns.scale, counts["c"], cfg["k"] = 2.0, 3.0, 5.0, 7.0
    np.testing.assert_array_equal(g(np.ones(2)), [210.0, 210.0])
    ordered["w"][:] = 2.0  # arrays: read afresh, no new trace
    rows[0][1] = 3.0
    np.testing.assert_array_equal(g(np.ones(2)), [420.0, 1260.0])
    assert g.trace_count == 2


def test_long_containers_and_deep_nesting_are_followed(backend):
    arrays = [np.ones(2) for _ in range(300)]

    class Node:
        def __init__(self, child):
            self.a, self.v = child, 1.0

    deep = Node(None)
    for _ in range(10):
        deep = Node(deep)
    bottom = deep
    while bottom.a is not None:
        bottom = bottom.a

    def loss(w):
        return np.sum(w * arrays[299]) * deep.a.a.a.a.a.a.a.a.a.a.v

    g = tg.grad(loss, backend=backend)
    np.testing.assert_array_equal(g(np.ones(2)), [1.0, 1.0])
    arrays[299][:] = 3.0
    bottom.v = 2.0
    np.testing.assert_array_equal(g(np.ones(2)), [6.0, 6.0])


def test_a_walk_past_its_bound_warns_and_still_reads_arrays_afresh(backend, monkeypatch, caplog):
    from tracegrad.tracing import scope

    monkeypatch.setattr(scope, "MAX_ENTRIES", 20)
    table = {f"k{i}": np.full(2, float(i)) for i in range(40)}

    def loss(w):
        return np.sum(w * table["k39"])

    with caplog.at_level(logging.WARNING, logger="tracegrad"):
        g = tg.grad(loss, backend=backend)
        np.testing.assert_array_equal(g(np.ones(2)), [39.0, 39.0])
    assert "checked by identity only" in caplog.text
    table["k39"][:] = -1.0  # beyond the bound, but used by the computation: a hidden input
    np.testing.assert_array_equal(g(np.ones(2)), [-1.0, -1.0])


def test_what_a_property_reads_from_globals_is_guarded(backend):
    ns = {"np": np, "GAIN": 1.0, "__name__": "user_model"}
    exec(
        "class Model:\n    @property\n    def gain(self):\n        return GAIN\n",
        ns,
    )
    m = ns["Model"]()
    g = tg.grad(lambda w: np.sum(w) * m.gain, backend=backend)
    assert g(np.ones(1))[0] == 1.0
    ns["GAIN"] = 3.0
    assert g(np.ones(1))[0] == 3.0


def test_static_masks_and_indices_that_are_also_operands_are_guarded(backend):
    """x[M] reads M's contents while tracing (a static mask); np.where(M, x, 0) also uses M as an
    operand. Both uses must follow a change of M."""
    mask = np.array([True, False, True])
    idx = np.array([0, 2])
    h = tg.jit(lambda x: (np.where(mask, x, 0.0), x[mask], x[:2] * idx, x[idx]), backend=backend)
    x = np.arange(3.0)
    h(x)
    mask[:] = [False, True, True]
    idx[:] = [1, 1]
    want = (np.where(mask, x, 0.0), x[mask], x[:2] * idx, x[idx])
    for got, expected in zip(h(x), want, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_a_long_dict_of_numbers_is_compared_as_a_whole(backend):
    table = {f"k{i}": float(i) for i in range(500)}
    g = tg.grad(lambda w: np.sum(w) * table["k499"], backend=backend)
    assert g(np.ones(1))[0] == 499.0
    table["k499"] = 2.0
    assert g(np.ones(1))[0] == 2.0
    table["k3"] = 7.0  # any entry: the whole dict is the guard
    g(np.ones(1))
    assert g.trace_count == 3


def test_class_attributes_read_through_the_class_are_guarded(backend):
    ns = {"np": np, "__name__": "user_config"}
    exec(
        "class Config:\n"
        "    rate = 2.0\n"
        "    weights = np.array([1.0, 2.0])\n"
        "    @staticmethod\n"
        "    def double(x):\n"
        "        return 2.0 * x\n"
        "def loss(x):\n"
        "    return np.sum(x * Config.weights) * Config.rate + np.sum(Config.double(x))\n",
        ns,
    )
    config, loss = ns["Config"], ns["loss"]
    g = tg.grad(loss, backend=backend)
    x = np.ones(2)
    np.testing.assert_array_equal(g(x), [4.0, 6.0])
    config.rate = 3.0
    np.testing.assert_array_equal(g(x), [5.0, 8.0])
    config.weights[:] = 1.0  # read afresh: no new trace
    np.testing.assert_array_equal(g(x), [5.0, 5.0])
    config.weights = np.array([0.0, 1.0])
    np.testing.assert_array_equal(g(x), [2.0, 5.0])
    assert g.trace_count == 2


def test_static_floats_are_keyed_by_their_exact_value(backend):
    f = tg.jit(lambda x, s: x * s, static_argnums=1, backend=backend)
    x = np.ones(2)
    assert np.all(np.signbit(f(x, -0.0)))
    assert not np.any(np.signbit(f(x, 0.0)))  # -0.0 == 0.0, but its program is not 0.0's
    assert np.all(np.isnan(f(x, float("nan"))))
    f(x, float("nan"))
    assert f.trace_count == 3


# ---- values that are not what they seem to the walk

SCALES = {"a": 2.0, "b": 3.0}
LOOKUP = SCALES.get  # a method of a C type: a new bound-method object on every read


def test_a_bound_method_of_a_builtin_object_does_not_trace_every_call(backend):
    def f(x):
        return np.sum(x * LOOKUP("a"))

    g = tg.grad(f, backend=backend)
    for _ in range(3):
        np.testing.assert_array_equal(g(np.ones(3)), np.full(3, 2.0))
    assert g.trace_count == 1
    SCALES["a"] = 5.0  # what the method reads is guarded through the object it is bound to
    try:
        np.testing.assert_array_equal(g(np.ones(3)), np.full(3, 5.0))
    finally:
        SCALES["a"] = 2.0


def test_installed_third_party_packages_are_libraries_and_own_modules_are_not(tmp_path):
    import pluggy  # installed beside pytest, in site-packages

    from tracegrad.tracing.reads import is_library_module

    assert is_library_module(pluggy.__name__)
    (tmp_path / "own_research_code.py").write_text("rate = 0.5\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        import own_research_code

        assert not is_library_module(own_research_code.__name__)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("own_research_code", None)
