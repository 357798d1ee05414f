"""Argument and result trees (tracegrad/base/tree.py): structure, keys and their types."""

from __future__ import annotations

import numpy as np

import tracegrad as tg
from tracegrad.base.tree import flatten, unflatten


def test_dict_keys_that_compare_equal_but_differ_in_type_are_different_trees(backend):
    """{1: x}, {1.0: x} and {True: x} are equal as Python keys, but the results come back under
    the caller's own key, whatever the order of the calls."""
    f = tg.grad(lambda d: sum(np.sum(v**2) for v in d.values()), backend=backend)
    jit = tg.jit(lambda d: d, backend=backend)
    for key in (1, 1.0, True, np.int64(1)):
        g = f({key: np.ones(2)})
        (got,) = g.keys()
        assert type(got) is type(key), (key, g)
        np.testing.assert_array_equal(g[key], 2 * np.ones(2))
        (got,) = jit({key: np.ones(2)}).keys()
        assert type(got) is type(key)


def test_tuple_keys_whose_parts_differ_in_type_are_different_trees(backend):
    """(1, "w") and (1.0, "w") are equal keys; the second call (which takes the cached-call
    path of the first one's signature) must trace its own program and keep its own key."""

    def f(d):
        return sum(np.sum(v) * (10.0 if isinstance(k[0], float) else 1.0) for k, v in d.items())

    g = tg.grad(f, backend=backend)
    x = np.ones(3)
    for key in ((1, "w"), (1.0, "w"), (True, "w"), ((1,), "w"), ((1.0,), "w")):
        got = g({key: x})
        (k,) = got.keys()
        assert k == key and repr(k) == repr(key)
        scale = 10.0 if isinstance(key[0], float) else 1.0
        np.testing.assert_array_equal(got[key], scale * np.ones(3))


def test_tree_definitions_with_equal_keys_of_other_types_are_not_equal():
    _, a = flatten({1: 0.0})
    _, b = flatten({1.0: 0.0})
    _, c = flatten({1: 5.0})
    assert a != b and a == c and hash(a) == hash(c)
    assert type(next(iter(unflatten(b, [2.0])))) is float


def test_empty_containers_and_none_keep_their_place():
    p = {"a": np.ones(2), "e": (), "n": None, "l": [], "d": {}, "b": (np.ones(3), [np.zeros(())])}
    g = tg.grad(
        lambda p: np.sum(p["a"] ** 2) + np.sum(p["b"][0] * 3) + p["b"][1][0], backend="numpy"
    )(p)
    assert g["e"] == () and g["n"] is None and g["l"] == [] and g["d"] == {}
    np.testing.assert_array_equal(g["b"][0], 3 * np.ones(3))
