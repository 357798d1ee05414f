"""Closures of one code share a program only when everything they capture is the same.

A program is found by the code of a function, not by the function object (calls/transformed.py),
so a closure made afresh finds the program of an earlier closure of the same code. Its guards
(tracing/scope.py, tracing/guards.py) must prove that every value the new closure reaches is what
the old one reached, whichever containers hold it and however often: an object met twice is
guarded as the very object met first. These tests make closures afresh over tuples, lists, dicts
and objects holding the argument, other arrays and views of one another, and check every result
against plain NumPy.
"""

from __future__ import annotations

import enum
import functools
import logging
import os
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg

BACKENDS = ["numpy", "cpu"]


# ---- the closure over (x, x), then over (x, y)


def _reads_second(t):
    return lambda x: np.sum(x * t[1])


def _times_second(t):
    return lambda x: x * t[1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_closure_over_the_argument_twice_does_not_serve_one_over_another_array(backend):
    x = np.arange(4.0)
    value, grad = tg.value_and_grad(_reads_second((x, x)), backend=backend)(x)
    assert value == 14.0
    np.testing.assert_array_equal(grad, [0.0, 1.0, 2.0, 3.0])
    value, grad = tg.value_and_grad(_reads_second((x, np.full(4, 5.0))), backend=backend)(x)
    assert value == 30.0
    np.testing.assert_array_equal(grad, [5.0, 5.0, 5.0, 5.0])
    np.testing.assert_array_equal(tg.grad(_reads_second((x, 2 * x)), backend=backend)(x), 2 * x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_mode_closures_over_the_argument_twice_and_another_shape(backend):
    x, tangent = np.arange(4.0), np.ones(4)
    out, out_dot = tg.jvp(_times_second((x, x)), (x,), (tangent,), backend=backend)
    np.testing.assert_array_equal(out, x * x)
    np.testing.assert_array_equal(out_dot, x)
    wide = np.full((3, 4), 100.0)
    out, out_dot = tg.jvp(_times_second((x, wide)), (x,), (tangent,), backend=backend)
    assert out.shape == out_dot.shape == (3, 4)
    np.testing.assert_array_equal(out, x * wide)
    np.testing.assert_array_equal(out_dot, wide)


class _Box:
    def __init__(self, **attributes):
        self.__dict__.update(attributes)


# (make the captured value from two arrays, the function that reads the second), each a
# container that holds the first array twice when made with (a, a)
_HOLDERS = {
    "tuple": (lambda a, b: (a, b), lambda t: lambda x: np.sum(x * t[1])),
    "list": (lambda a, b: [a, b], lambda t: lambda x: np.sum(x * t[1])),
    "dict": (lambda a, b: {"p": a, "q": b}, lambda t: lambda x: np.sum(x * t["q"])),
    "attribute": (
        lambda a, b: _Box(p=a, q=b),
        lambda t: lambda x: np.sum(x * t.q) + 0.0 * np.sum(t.p),
    ),
    "nested": (
        lambda a, b: {"p": [a, (a,)], "q": [(a, b)]},
        lambda t: lambda x: np.sum(x * t["q"][0][1]),
    ),
    "containers": (
        lambda a, b: (lambda d: (d, {"w": b}))({"w": a}),
        lambda t: lambda x: np.sum(x * t[1]["w"]),
    ),
    "objects": (
        lambda a, b: (lambda o: (o, _Box(w=b)))(_Box(w=a)),
        lambda t: lambda x: np.sum(x * t[1].w),
    ),
    "default": (lambda a, b: (a, b), lambda t: lambda x, p=t[0], q=t[1]: np.sum(x * q)),
    "partial": (
        lambda a, b: (a, b),
        lambda t: functools.partial(lambda x, p, q: np.sum(x * q), p=t[0], q=t[1]),
    ),
    "namespace": (
        lambda a, b: types.SimpleNamespace(p=a, q=b),
        lambda t: lambda x: np.sum(x * t.q) + 0.0 * np.sum(t.p),
    ),
}


@pytest.mark.parametrize("holder", sorted(_HOLDERS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_value_held_twice_is_guarded_where_it_is_read(holder, backend):
    make, reader = _HOLDERS[holder]
    x, a, b = np.arange(3.0), np.ones(3), np.full(3, 7.0)
    for first, second in ((x, x), (a, a)):
        g = tg.value_and_grad(reader(make(first, second)), backend=backend)
        value, grad = g(x)
        assert value == np.sum(x * second)
        np.testing.assert_array_equal(grad, second)
        value, grad = tg.value_and_grad(reader(make(first, b)), backend=backend)(x)
        assert value == np.sum(x * b)
        np.testing.assert_array_equal(grad, b)


def test_a_partial_is_traced_once():
    g = tg.grad(functools.partial(lambda x, s: np.sum(x * s), s=2.0), backend="numpy")
    for _ in range(3):
        np.testing.assert_array_equal(g(np.ones(3)), 2.0)
    assert g.trace_count == 1


def test_a_closure_that_keeps_its_aliasing_shares_the_program():
    """The guard is the aliasing, not the objects: closures over fresh (a, a) share one program."""
    x = np.arange(3.0)
    before = tg.grad(_reads_second((x, x)), backend="numpy").trace_count
    for k in range(4):
        a = np.full(3, float(k))
        np.testing.assert_array_equal(tg.grad(_reads_second((a, a)), backend="numpy")(x), a)
    assert tg.grad(_reads_second((x, x)), backend="numpy").trace_count == before + 1


def test_the_retrace_log_names_the_value_that_is_no_longer_the_same(monkeypatch, caplog):
    monkeypatch.setenv("TRACEGRAD_LOG", "retrace")
    x = np.arange(3.0)
    pair = (x, x)

    def loss(w):
        return np.sum(w * pair[1])

    g = tg.grad(loss, backend="numpy")
    g(x)
    pair = (x, np.ones(3))
    with caplog.at_level(logging.INFO, logger="tracegrad"):
        np.testing.assert_array_equal(g(x), np.ones(3))
    assert "closure variable 'pair[1]' of loss changed (it was the same object as" in caplog.text


def test_an_object_met_beyond_the_depth_bound_and_then_nearer_is_guarded_at_both(monkeypatch):
    """Met first too deep to be walked, then near: the code reads it through the deep path, the
    program reads it through the near one, so the deep path must hold what the near one holds."""
    from tracegrad.tracing import scope

    monkeypatch.setattr(scope, "MAX_DEPTH", 2)  # deep[0] is past it, near is not

    def make(deep, near):
        return lambda x: np.sum(x * deep[0].w) + 0.0 * np.sum(near.w)

    x = np.arange(3.0)
    box = _Box(w=np.ones(3))
    np.testing.assert_array_equal(tg.grad(make([box], box), backend="numpy")(x), box.w)
    other = _Box(w=np.full(3, 4.0))
    np.testing.assert_array_equal(tg.grad(make([box], other), backend="numpy")(x), box.w)


# ---- values the walk reached only in part


class _Key(enum.Enum):
    W = 1


class _Lookup:
    """Attributes served by the class's own lookup, not found in the instance's __dict__."""

    def __init__(self, **values):
        self.__dict__["_values"] = values

    def __getattr__(self, name):
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None


class _Items:
    def __init__(self, **values):
        self._values = values

    def __getitem__(self, key):
        return self._values[key]


_PARTLY_WALKED = {
    "enum key": (lambda w: {_Key.W: w}, lambda d: lambda x: np.sum(x * d[_Key.W])),
    "tuple key": (lambda w: {(1, "w"): w}, lambda d: lambda x: np.sum(x * d[(1, "w")])),
    "float key": (lambda w: {0.5: w}, lambda d: lambda x: np.sum(x * d[0.5])),
    "__getattr__": (lambda w: _Lookup(w=w), lambda o: lambda x: np.sum(x * o.w)),
    "__getitem__": (lambda w: _Items(w=w), lambda o: lambda x: np.sum(x * o["w"])),
}


@pytest.mark.parametrize("case", sorted(_PARTLY_WALKED))
def test_values_behind_keys_and_lookups_of_a_users_class_are_guarded(case):
    make, reader = _PARTLY_WALKED[case]
    x = np.arange(3.0)
    for w in (np.ones(3), np.full(3, 3.0)):
        np.testing.assert_array_equal(tg.grad(reader(make(w)), backend="numpy")(x), w)


def _counts_extra(extra):
    return lambda x: np.sum(x) * (1.0 + len(extra))


@pytest.mark.parametrize("empty", [[], {}])
def test_an_empty_container_read_by_the_code_is_not_another_closures(empty):
    x = np.ones(3)
    np.testing.assert_array_equal(tg.grad(_counts_extra(empty), backend="numpy")(x), 1.0)
    full = [1, 2] if isinstance(empty, list) else {"a": 1, "b": 2}
    np.testing.assert_array_equal(tg.grad(_counts_extra(full), backend="numpy")(x), 3.0)


def _tapped(seen):
    def loss(w):
        return np.sum(tg.tap(w * 2.0, "h", hook=lambda name, ct: seen.append(ct)) ** 2)

    return loss


@pytest.mark.parametrize("start", [[], [None]])
def test_a_hook_appends_to_its_own_closures_list(start):
    """A program holds the hooks its trace made, which close over that trace's list: another
    closure of the same code, over another list, needs a program of its own."""
    lists = [list(start), list(start)]
    for seen in lists:
        g = tg.grad(_tapped(seen), backend="numpy")
        g(np.ones(2))
        g(np.ones(2))
    assert [len(seen) - len(start) for seen in lists] == [2, 2]
    # the same closure transformed anew keeps its program
    loss = _tapped([])
    before = tg.grad(loss, backend="numpy").trace_count
    for _ in range(3):
        tg.grad(loss, backend="numpy")(np.ones(2))
    assert tg.grad(loss, backend="numpy").trace_count == before + 1


@pytest.fixture
def persisted(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEGRAD_PROGRAM_CACHE", "1")
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path / "cache"))
    tg.clear_programs()
    yield tmp_path / "cache" / "programs"
    tg.clear_programs()


def test_a_persisted_program_keeps_its_aliasing_guards(persisted):
    x = np.arange(3.0)
    g = tg.grad(_reads_second((x, x)), backend="numpy")
    np.testing.assert_array_equal(g(x), x)
    assert len(list(persisted.glob("*.tgp"))) == 1
    traces = g.trace_count
    tg.clear_programs()  # as a new process would find it: loaded, not traced
    g = tg.grad(_reads_second((x, x)), backend="numpy")
    np.testing.assert_array_equal(g(x), x)
    assert g.trace_count == traces
    tg.clear_programs()
    g = tg.grad(_reads_second((x, np.ones(3))), backend="numpy")
    np.testing.assert_array_equal(g(x), np.ones(3))


# ---- random closures: hypothesis over one shape of captured tree, then a longer campaign

SHAPE = (3, 4)


def _pool(x: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Arrays a closure may hold: the argument, other arrays, and views of one another."""
    a = rng.normal(size=SHAPE)
    b = rng.normal(size=SHAPE)
    c = rng.normal(size=SHAPE[1])
    return [x, x[1:], x.T, x.reshape(-1), a, a[1:], a.T, a.reshape(-1), b, b[:, 1:], c, c[::2]]


def _term(x, v):
    """Something of x and v whose value and gradient change with every entry of v."""
    if v.shape == x.shape:
        return np.sum(np.sin(x) * v)
    if v.shape == x.T.shape:
        return np.sum(x.T * v * v)
    if v.shape == x[1:].shape:
        return np.sum(x[1:] * np.cos(v))
    if v.shape == x.shape[1:]:
        return np.sum(x * v)  # broadcast over the rows
    if v.ndim == 1 and v.size == x.size:
        return np.sum(x.reshape(-1) * v)
    return np.sum(x * x) * np.sum(v)


def _read(tree, path):
    for step in path:
        tree = getattr(tree, step[1:]) if isinstance(step, str) and step[:1] == "." else tree[step]
    return tree


def make_closure(tree, paths):
    """One code for every closure: a program of one is found for every other."""

    def f(x):
        total = 0.0
        for path in paths:
            total = total + _term(x, _read(tree, path))
        return total

    return f


def _numeric_gradient(f, x, h=1e-6):
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = h
        grad[i] = (f(x + step) - f(x - step)) / (2 * h)  # new arrays: what f holds stays put
    return grad


def _check(f, x, backend, tangent):
    """tracegrad's value, gradient and forward derivative of a closure against plain NumPy's;
    the message, or None."""
    want = f(x)
    want_grad = _numeric_gradient(f, x)
    value, grad = tg.value_and_grad(f, backend=backend)(x)
    if not np.allclose(value, want, rtol=1e-9, atol=1e-9):
        return f"value {value} != {want}"
    if not np.allclose(grad, want_grad, rtol=1e-5, atol=1e-6):
        return f"gradient {grad} != {want_grad}"
    out, out_dot = tg.jvp(f, (x,), (tangent,), backend=backend)
    if not (np.allclose(out, want) and np.allclose(out_dot, np.sum(want_grad * tangent))):
        return f"jvp ({out}, {out_dot}) != ({want}, {np.sum(want_grad * tangent)})"
    return None


# One shape of tree, its seven slots filled from the pool: closures made afresh differ only in
# which arrays (and which aliasing) the slots hold, the case a program found by code must tell.
_SLOT_PATHS = [(0,), (1, 0), (1, 1), (2, "p"), (2, "q", 0), (3, ".w"), (3, ".v")]


def _fixed_tree(slots):
    return (
        slots[0],
        [slots[1], slots[2]],
        {"p": slots[3], "q": (slots[4],)},
        _Box(w=slots[5], v=slots[6]),
    )


def _fixed_tree_property(backend, seed, reads, filling, changes):
    """Closures over `filling` (pool indices for the seven slots), then over it with each of
    `changes` (slot, pool index) made in turn: one or two slots differ from the last closure's,
    as a new closure differs from an old one whose program it finds."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=SHAPE)
    pool = _pool(x, rng)
    paths = tuple(_SLOT_PATHS[r] for r in reads)
    filling = list(filling)
    for change in [(), *changes]:
        for slot, index in change:
            filling[slot] = index
        f = make_closure(_fixed_tree([pool[i] for i in filling]), paths)
        problem = _check(f, x, backend, rng.normal(size=SHAPE))
        assert problem is None, f"slots {filling}, reads {paths}: {problem}"


_slots = st.lists(st.integers(0, 11), min_size=7, max_size=7)
_changes = st.lists(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 11)), min_size=1, max_size=2),
    min_size=1,
    max_size=3,
)
_SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


@settings(max_examples=40, **_SETTINGS)
@given(
    seed=st.integers(0, 2**16),
    reads=st.lists(st.integers(0, 6), min_size=1, max_size=3),
    filling=_slots,
    changes=_changes,
)
def test_fresh_closures_over_one_tree_shape_numpy(seed, reads, filling, changes):
    _fixed_tree_property("numpy", seed, reads, filling, changes)


@settings(max_examples=6, **_SETTINGS)
@given(
    seed=st.integers(0, 2**16),
    reads=st.lists(st.integers(0, 6), min_size=1, max_size=2),
    filling=_slots,
    changes=_changes,
)
def test_fresh_closures_over_one_tree_shape_cpu(seed, reads, filling, changes):
    _fixed_tree_property("cpu", seed, reads, filling, changes)


# The campaign: random trees of tuples, lists, dicts and objects, holding arrays of the pool and
# containers met earlier in the same tree, read along random paths, each tree's shape filled
# several times over. TRACEGRAD_CAMPAIGN_EXAMPLES=N runs N trees per backend (default: a few).


def _random_tree(rng, pool, depth=0):
    """(tree, paths to its arrays); a container may appear twice (shared), as may an array."""
    made: list = []  # (container, paths inside it)

    def grow(depth):
        if depth >= 3 or rng.random() < 0.35:
            if made and rng.random() < 0.15:
                return made[rng.integers(len(made))]  # a container met before, shared
            return pool[rng.integers(len(pool))], ()
        kind = ("tuple", "list", "dict", "object")[rng.integers(4)]
        n = int(rng.integers(1, 4))
        children = [grow(depth + 1) for _ in range(n)]
        keys = [f"k{i}" for i in range(n)]
        if kind == "tuple":
            node, steps = tuple(c for c, _ in children), list(range(n))
        elif kind == "list":
            node, steps = [c for c, _ in children], list(range(n))
        elif kind == "dict":
            node, steps = dict(zip(keys, (c for c, _ in children), strict=True)), keys
        else:
            node = _Box(**dict(zip(keys, (c for c, _ in children), strict=True)))
            steps = ["." + k for k in keys]
        grown = (node, [(s, sub) for s, (_, sub) in zip(steps, children, strict=True)])
        made.append(grown)
        return grown

    def leaves(tree, paths, prefix):
        if paths == ():
            yield prefix
            return
        for step, sub in paths:
            yield from leaves(_read(tree, (step,)), sub, (*prefix, step))

    tree, paths = grow(0)
    return tree, [p for p in leaves(tree, paths, ()) if isinstance(_read(tree, p), np.ndarray)]


def _refill(tree, pool, rng, memo, consistent):
    """The same shape of tree with some other arrays of the pool in it. Shared containers stay
    shared; an array held twice is swapped at both places (`consistent`) or at each on its own,
    which breaks the sharing a program of the old tree may rely on."""
    if isinstance(tree, np.ndarray):
        key = id(tree) if consistent else object()
        if key not in memo:
            memo[key] = tree if rng.random() < 0.75 else pool[rng.integers(len(pool))]
        return memo[key]
    if id(tree) in memo:
        return memo[id(tree)]
    if isinstance(tree, tuple):
        made = tuple(_refill(c, pool, rng, memo, consistent) for c in tree)
    elif isinstance(tree, list):
        made = [_refill(c, pool, rng, memo, consistent) for c in tree]
    elif isinstance(tree, dict):
        made = {k: _refill(c, pool, rng, memo, consistent) for k, c in tree.items()}
    else:
        made = _Box(**{k: _refill(c, pool, rng, memo, consistent) for k, c in vars(tree).items()})
    memo[id(tree)] = made
    return made


def _campaign(backend: str, trees: int, seed: int) -> tuple[int, list[str]]:
    """(closures checked, failures) over `trees` random trees."""
    rng = np.random.default_rng(seed)
    checked, failures = 0, []
    for n in range(trees):
        x = rng.normal(size=SHAPE)
        pool = _pool(x, rng)
        tree, leaves = _random_tree(rng, pool)
        if not leaves:
            continue
        count = int(rng.integers(1, min(3, len(leaves)) + 1))
        paths = tuple(leaves[i] for i in rng.choice(len(leaves), size=count, replace=False))
        for _ in range(3):
            problem = _check(make_closure(tree, paths), x, backend, rng.normal(size=SHAPE))
            checked += 1
            if problem is not None:
                failures.append(f"tree {n} (seed {seed}), reads {paths}: {problem}")
            tree = _refill(tree, pool + _pool(x, rng), rng, {}, rng.random() < 0.5)
    return checked, failures


@pytest.mark.parametrize("backend", BACKENDS)
def test_campaign_of_closures_over_random_trees(backend):
    trees = int(os.environ.get("TRACEGRAD_CAMPAIGN_EXAMPLES", "0")) or (
        12 if backend == "numpy" else 3
    )
    seed = int(os.environ.get("TRACEGRAD_CAMPAIGN_SEED", "7"))
    checked, failures = _campaign(backend, trees, seed)
    print(f"campaign on {backend}: {trees} trees, {checked} closures, {len(failures)} failures")
    assert not failures, "\n".join(failures[:10])
