"""Pytrees and calling conventions: namedtuples, dataclasses and registered classes as arguments,
results, aux payloads and gradients; keyword arguments; decorated methods; custom_vjp over trees.

Gradients are checked against finite differences and against the same function written over
plain tuples (the formulation that worked before pytrees of classes existed).
"""

from __future__ import annotations

import dataclasses
import pickle
from collections import namedtuple
from dataclasses import dataclass, field

import numpy as np
import pytest

import tracegrad as tg

Params = namedtuple("Params", "w b")
Other = namedtuple("Other", "w b")  # the same fields, another class: another tree


@dataclass
class Layer:
    w: np.ndarray
    b: np.ndarray


@dataclass(frozen=True)
class Frozen:
    w: np.ndarray
    b: np.ndarray


class Affine:
    """A user class made a pytree by registration; `name` travels as aux data."""

    def __init__(self, w, b, name="affine"):
        self.w, self.b, self.name = w, b, name

    def apply(self, x):
        return np.tanh(self.w * x + self.b)


tg.register_pytree_node(Affine, lambda a: ((a.w, a.b), a.name), lambda name, c: Affine(*c, name))


def _close(a, b, dtype=np.float64):
    tol = 1e-4 if dtype == np.float32 else 1e-9
    np.testing.assert_allclose(
        np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol, atol=tol
    )


def _same_trees(a, b, dtype=np.float64):
    la, ta = tg.tree_flatten(a)
    lb, tb = tg.tree_flatten(b)
    assert ta == tb, (ta, tb)
    for x, y in zip(la, lb, strict=True):
        _close(x, y, dtype)


def _finite_differences(f, tree, eps=1e-6):
    """d f / d tree by central differences over every leaf, in float64, in tree's structure."""
    leaves, treedef = tg.tree_flatten(tree)
    leaves = [np.array(x, dtype=np.float64) for x in leaves]
    grads = []
    for i, x in enumerate(leaves):
        g = np.zeros(x.shape)
        for idx in np.ndindex(x.shape):
            shifted = []
            for sign in (1, -1):
                moved = [y.copy() for y in leaves]
                moved[i][idx] += sign * eps
                shifted.append(float(f(tg.tree_unflatten(treedef, moved))))
            g[idx] = (shifted[0] - shifted[1]) / (2 * eps)
        grads.append(g)
    return tg.tree_unflatten(treedef, grads)


def _loss(p, x):
    return np.sum(np.tanh(p.w * x + p.b) ** 2)


def _loss_tuple(p, x):  # the same loss over a plain (w, b) tuple
    return np.sum(np.tanh(p[0] * x + p[1]) ** 2)


@pytest.fixture(params=[np.float64, np.float32], ids=["f64", "f32"])
def dtype(request):
    return request.param


# ---- the tree utilities


def test_flatten_and_unflatten_keep_each_class():
    p = Params(np.ones(2), 3.0)
    tree = {"p": p, "l": Layer(np.zeros(3), np.ones(1)), "a": Affine(1.0, 2.0, "a1"), "n": None}
    leaves, treedef = tg.tree_flatten(tree)
    assert len(leaves) == 6
    rebuilt = tg.tree_unflatten(treedef, leaves)
    assert type(rebuilt["p"]) is Params and type(rebuilt["l"]) is Layer
    assert type(rebuilt["a"]) is Affine and rebuilt["a"].name == "a1" and rebuilt["n"] is None
    assert rebuilt["p"].b == 3.0
    assert str(tg.tree_structure(p)) == "Params(w=*, b=*)"
    assert tg.tree_leaves(Frozen(1.0, 2.0)) == [1.0, 2.0]


def test_tree_definitions_hold_the_class():
    _, a = tg.tree_flatten(Params(1.0, 2.0))
    _, b = tg.tree_flatten(Other(1.0, 2.0))
    _, c = tg.tree_flatten(Params(5.0, 6.0))
    _, t = tg.tree_flatten((1.0, 2.0))
    assert a != b and a != t and a == c and hash(a) == hash(c)
    assert tg.tree_structure(Layer(1.0, 2.0)) != tg.tree_structure(Frozen(1.0, 2.0))
    assert tg.tree_structure(Affine(1.0, 2.0, "x")) != tg.tree_structure(Affine(1.0, 2.0, "y"))
    assert tg.tree_structure(Affine(1.0, 2.0, "x")) == tg.tree_structure(Affine(3.0, 4.0, "x"))
    assert len({a, b, c, t}) == 3


def test_a_tree_definition_survives_pickling():
    treedef = tg.tree_structure({"p": Params(1.0, 2.0), "l": Layer(1.0, (2.0, 3.0))})
    copy = pickle.loads(pickle.dumps(treedef))
    assert copy == treedef and hash(copy) == hash(treedef)


def test_tree_map_over_several_trees_and_prefixes():
    a = Params(np.ones(2), 1.0)
    b = Params(np.full(2, 2.0), 5.0)
    out = tg.tree_map(lambda x, y: x * y, a, b)
    assert type(out) is Params
    np.testing.assert_array_equal(out.w, [2.0, 2.0])
    assert out.b == 5.0
    # a leaf of the first tree may face a subtree of the others: it comes whole
    assert tg.tree_map(lambda x, y: (x, y), {"k": 1}, {"k": (2, 3)}) == {"k": (1, (2, 3))}
    keep = tg.tree_map(
        lambda x: len(x), {"a": [1, 2], "b": [3]}, is_leaf=lambda x: isinstance(x, list)
    )
    assert keep == {"a": 2, "b": 1}
    assert tg.tree_map(lambda x, y: y, a, Params(1.0, [2.0])).b == [2.0]
    with pytest.raises(
        ValueError, match=r"tree 1 does not match .* at \['a'\]\.b: expected \[\*\], got \*"
    ):
        tg.tree_map(lambda x, y: x, {"a": Params(1.0, [2.0])}, {"a": a})
    with pytest.raises(ValueError, match="expected Params"):
        tg.tree_map(lambda x, y: x, a, Other(1.0, 2.0))


def test_tree_unflatten_checks_its_arguments():
    treedef = tg.tree_structure(Params(1.0, 2.0))
    with pytest.raises(TypeError, match="expects a TreeDef first"):
        tg.tree_unflatten([1.0, 2.0], treedef)
    with pytest.raises(ValueError, match="only 1 were given"):
        tg.tree_unflatten(treedef, [1.0])
    with pytest.raises(ValueError, match="too many"):
        tg.tree_unflatten(treedef, [1.0, 2.0, 3.0])


def test_tree_util_namespace():
    assert tg.tree_util.tree_map is tg.tree_map
    assert tg.tree_util.register_pytree_node is tg.register_pytree_node


# ---- namedtuples, dataclasses and registered classes as arguments, gradients, results, aux


@pytest.mark.parametrize("make", [Params, Layer, Frozen, Affine], ids=lambda c: c.__name__)
def test_gradient_comes_back_as_the_argument_class(backend, dtype, make):
    rng = np.random.default_rng(0)
    p = make(rng.normal(size=3).astype(dtype), rng.normal(size=3).astype(dtype))
    x = rng.normal(size=3).astype(dtype)
    g = tg.grad(_loss, backend=backend)(p, x)
    assert type(g) is make
    assert g.w.dtype == dtype and g.b.dtype == dtype
    want = tg.grad(_loss_tuple, backend=backend)((p.w, p.b), x)
    _close(g.w, want[0], dtype)
    _close(g.b, want[1], dtype)
    if dtype == np.float64:
        fd = _finite_differences(lambda q: _loss(q, x), p)
        _close(g.w, fd.w, np.float32)
        _close(g.b, fd.b, np.float32)
    if make is Affine:
        assert g.name == "affine"


def test_value_and_grad_with_several_argnums_of_classes(backend):
    p, layer, x = (
        Params(np.ones(2), 0.5),
        Layer(np.full(2, 0.3), np.zeros(2)),
        np.array([1.0, -2.0]),
    )

    def loss(p, layer, x):
        return np.sum(np.sin(p.w * x + p.b) * layer.w + layer.b)

    def loss_tuple(p, layer, x):
        return np.sum(np.sin(p[0] * x + p[1]) * layer[0] + layer[1])

    value, (gp, gl) = tg.value_and_grad(loss, argnums=(0, 1), backend=backend)(p, layer, x)
    want_value, (tp, tl) = tg.value_and_grad(loss_tuple, argnums=(0, 1), backend=backend)(
        tuple(p), (layer.w, layer.b), x
    )
    _close(value, want_value)
    assert type(gp) is Params and type(gl) is Layer
    _same_trees(tuple(gp), tp)
    _same_trees((gl.w, gl.b), tl)


def test_results_and_aux_payloads_keep_their_classes(backend):
    def f(p, x):
        y = p.w * x + p.b
        return np.sum(y**2), Affine(y, x, "aux")

    p, x = Params(np.array([1.0, 2.0]), 0.5), np.array([3.0, 4.0])
    out = tg.jit(lambda p, x: Params(p.w * x, Layer(x, p.b)), backend=backend)(p, x)
    assert type(out) is Params and type(out.b) is Layer
    np.testing.assert_array_equal(out.w, [3.0, 8.0])
    np.testing.assert_array_equal(out.b.b, 0.5)
    g, aux = tg.grad(f, has_aux=True, backend=backend)(p, x)
    assert type(g) is Params and type(aux) is Affine and aux.name == "aux"
    np.testing.assert_allclose(aux.w, p.w * x + p.b)
    (value, aux2), g2 = tg.value_and_grad(
        lambda p, x: (np.sum(p.w * x), Layer(p.w, x)), has_aux=True, backend=backend
    )(p, x)
    assert type(aux2) is Layer and type(g2) is Params
    np.testing.assert_allclose(value, np.sum(p.w * x))
    np.testing.assert_allclose(g2.w, x)
    np.testing.assert_allclose(g2.b, 0.0)


def test_jacobian_and_hessian_of_a_namedtuple_argument(backend):
    p = Params(np.array([0.5, -1.0]), np.array(0.25))

    def f(p):
        return np.sin(p.w) * p.b

    jac = tg.jacobian(f, backend=backend)(p)
    want = tg.jacobian(lambda t: np.sin(t[0]) * t[1], backend=backend)(tuple(p))
    assert type(jac) is Params
    _same_trees(tuple(jac), want)
    hess = tg.hessian(lambda p: np.sum(f(p) ** 2), backend=backend)(p)
    want = tg.hessian(lambda t: np.sum((np.sin(t[0]) * t[1]) ** 2), backend=backend)(tuple(p))
    assert type(hess) is Params and type(hess.w) is Params
    _same_trees(tuple(tuple(h) for h in hess), want)


def test_two_classes_with_the_same_fields_are_two_programs(backend):
    f = tg.jit(lambda p: p._replace(w=p.w * 2), backend=backend)
    a = f(Params(np.ones(2), 1.0))
    b = f(Other(np.ones(2), 1.0))
    assert type(a) is Params and type(b) is Other
    f(Params(np.zeros(2), 2.0))
    assert f.trace_count == 2


def test_static_dataclass_fields_are_part_of_the_key(backend):
    @dataclass(frozen=True)
    class Act:
        w: np.ndarray
        kind: str = field(default="tanh", metadata={"static": True})

    f = tg.grad(
        lambda a: np.sum(np.tanh(a.w) if a.kind == "tanh" else np.sin(a.w)), backend=backend
    )
    w = np.array([0.3, -0.2])
    g = f(Act(w))
    assert type(g) is Act and g.kind == "tanh"
    np.testing.assert_allclose(g.w, 1 - np.tanh(w) ** 2)
    np.testing.assert_allclose(f(Act(w, "sin")).w, np.cos(w))
    assert f.trace_count == 2
    f(Act(w + 1))
    assert f.trace_count == 2


def test_init_false_fields_are_recomputed_and_differentiated_through(backend):
    @dataclass
    class Scaled:
        log_scale: np.ndarray
        scale: np.ndarray = field(init=False)

        def __post_init__(self):
            self.scale = np.exp(self.log_scale)

    def loss(s, x):
        return np.sum((s.scale * x) ** 2)

    s, x = Scaled(np.array([0.1, -0.3])), np.array([1.0, 2.0])
    g = tg.grad(loss, backend=backend)(s, x)
    assert type(g) is Scaled and [f.name for f in dataclasses.fields(g)] == ["log_scale", "scale"]
    fd = _finite_differences(lambda ls: loss(Scaled(ls), x), s.log_scale)
    _close(g.log_scale, fd, np.float32)


def test_a_dataclass_with_its_own_init_is_rebuilt_without_calling_it(backend):
    @dataclass(init=False)
    class Custom:
        w: np.ndarray
        b: float

        def __init__(self, values):
            self.w, self.b = values

    g = tg.grad(lambda c: np.sum(c.w * c.b), backend=backend)(Custom((np.ones(2), 3.0)))
    assert type(g) is Custom
    np.testing.assert_allclose(g.w, [3.0, 3.0])
    np.testing.assert_allclose(g.b, 2.0)


def test_a_dataclass_whose_init_takes_other_arguments(backend):
    @dataclass
    class Own:
        w: np.ndarray
        b: float

        def __init__(self, pair):  # kept by @dataclass: it does not replace a class's __init__
            self.w, self.b = pair

    g = tg.grad(lambda c: np.sum(c.w * c.b), backend=backend)(Own((np.ones(2), 3.0)))
    assert type(g) is Own
    np.testing.assert_allclose(g.w, [3.0, 3.0])


def test_none_leaves_inside_classes(backend):
    g = tg.grad(lambda p: np.sum(p.w**2), backend=backend)(Params(np.ones(2), None))
    assert type(g) is Params and g.b is None
    np.testing.assert_array_equal(g.w, [2.0, 2.0])


def test_a_non_array_field_is_a_clear_error():
    with pytest.raises(TypeError, match=r"argument 0\.b is a str.*register_pytree_node"):
        tg.grad(lambda p: np.sum(p.w), backend="numpy")(Params(np.ones(2), "bias"))


# ---- registration errors


def test_registration_errors():
    class Mine:
        pass

    with pytest.raises(TypeError, match="expects a class"):
        tg.register_pytree_node(Mine(), lambda m: ((), None), lambda a, c: Mine())
    for builtin in (tuple, dict, int, float, np.ndarray, np.float64, type(None)):
        with pytest.raises(TypeError, match="built-in type"):
            tg.register_pytree_node(builtin, lambda m: ((), None), lambda a, c: None)
    with pytest.raises(TypeError, match="must be callables"):
        tg.register_pytree_node(Mine, lambda m: ((), None), "unflatten")
    tg.register_pytree_node(Mine, lambda m: ((), None), lambda a, c: Mine())
    with pytest.raises(ValueError, match="already registered"):
        tg.register_pytree_node(Mine, lambda m: ((), None), lambda a, c: Mine())


@pytest.mark.parametrize(
    "flatten, message",
    [
        (lambda n: [n.w], "must return a pair"),
        (lambda n: n.w, "must return a pair"),
        (lambda n: (n.w, None), "returned children of type ndarray"),
        (lambda n: ((n.w,), ["not", "hashable"]), "aux_data .* is not hashable .* list"),
    ],
    ids=["list", "array", "array-children", "unhashable-aux"],
)
def test_a_wrong_flatten_function_is_a_clear_error(flatten, message):
    class Node:
        def __init__(self, w):
            self.w = w

    tg.register_pytree_node(Node, flatten, lambda aux, c: Node(*c))
    with pytest.raises(TypeError, match=message):
        tg.grad(lambda n: np.sum(n.w), backend="numpy")(Node(np.ones(2)))


def test_dataclass_errors():
    @dataclass
    class WithInitVar:
        w: np.ndarray
        seed: dataclasses.InitVar[int]

    with pytest.raises(TypeError, match=r"InitVar without a default .*seed"):
        tg.tree_flatten(WithInitVar(np.ones(2), 3))

    @dataclass
    class Unhashable:
        w: np.ndarray
        sizes: list = field(default_factory=list, metadata={"static": True})

    with pytest.raises(TypeError, match=r"field 'sizes' .* is static .* not hashable"):
        tg.tree_flatten(Unhashable(np.ones(2), [1, 2]))


# ---- keyword arguments


def test_keyword_arguments_are_traced_not_differentiated(backend):
    def loss(w, x, *, scale=1.0, shift=0.0):
        return np.sum((w * x * scale + shift) ** 2)

    g = tg.grad(loss, backend=backend)
    w, x = np.array([1.0, 2.0]), np.array([0.5, -1.0])
    for scale, shift in ((2.0, 0.0), (3.0, 1.0), (np.float64(0.5), -1.0)):
        np.testing.assert_allclose(
            g(w, x, scale=scale, shift=shift), 2 * (w * x * scale + shift) * x * scale
        )
    assert g.trace_count == 1  # traced: new values, the same program
    g(w, x, shift=1.0, scale=2.0)  # keyword order does not matter
    assert g.trace_count == 1
    np.testing.assert_allclose(g(w, x, scale=2.0), 2 * (w * x * 2.0) * x * 2.0)  # another signature
    np.testing.assert_allclose(g(w, x), 2 * (w * x) * x)  # the defaults again
    assert g.trace_count == 3
    np.testing.assert_allclose(g(w, x, scale=2.0, shift=1.0), 2 * (w * x * 2.0 + 1.0) * x * 2.0)
    assert g.trace_count == 3


def test_keyword_arguments_in_every_transform(backend):
    def f(x, *, p):
        return np.sin(x * p.w) + p.b

    x, p = np.array([0.3, 0.6]), Params(np.array([1.0, 2.0]), 0.5)
    np.testing.assert_allclose(tg.jit(f, backend=backend)(x, p=p), f(x, p=p))
    value, g = tg.value_and_grad(lambda x, p: np.sum(f(x, p=p)), backend=backend)(x, p=p)
    np.testing.assert_allclose(value, np.sum(f(x, p=p)))
    np.testing.assert_allclose(g, np.cos(x * p.w) * p.w)
    np.testing.assert_allclose(
        tg.jacobian(f, backend=backend)(x, p=p), np.diag(np.cos(x * p.w) * p.w)
    )
    np.testing.assert_allclose(
        tg.hessian(lambda x, p: np.sum(f(x, p=p)), backend=backend)(x, p=p),
        np.diag(-np.sin(x * p.w) * p.w**2),
    )
    with pytest.raises(TypeError, match=r"keyword argument p\.b is a str.*functools\.partial"):
        tg.jit(f, backend=backend)(x, p=Params(1.0, "b"))
    none = tg.jit(lambda x, mask=None: x if mask is None else x * mask, backend=backend)
    np.testing.assert_array_equal(none(x, mask=None), x)  # None: an empty tree, as positionally


def test_keyword_arguments_inside_nested_transforms(backend):
    inner = tg.jit(lambda x, scale: x * scale, backend=backend)
    x = np.array([1.0, -2.0])
    g = tg.grad(lambda x, s: np.sum(inner(x, scale=s) ** 2), backend=backend)(x, 3.0)
    np.testing.assert_allclose(g, 2 * x * 9.0)
    outer = tg.grad(tg.jit(lambda x, scale: np.sum(x**2) * scale), backend=backend)
    np.testing.assert_allclose(outer(x, scale=2.0), 4 * x)
    twice = tg.grad(tg.grad(lambda x, *, k: np.sum(x**3) * k), backend=backend)
    np.testing.assert_allclose(twice(np.array(2.0), k=0.5), 6.0)


def test_make_ir_takes_keyword_arguments():
    graph = tg.make_ir(lambda x, y: x * y)(np.ones(2), y=np.ones(2))
    assert len(graph.inputs) == 2


# ---- methods


def test_a_decorated_method_differentiates_the_argument_after_self(backend):
    class Model:
        def __init__(self, c=2.0):
            self.c = c
            self.W = np.eye(2)

        @tg.grad(backend=backend)
        def loss(self, w):
            return np.sum(self.W @ w) * self.c

        @tg.value_and_grad(argnums=(0, 1), backend=backend)
        def loss2(self, w, b):
            return np.sum((self.W @ w + b) ** 2) * self.c

        @tg.grad(static_argnums=1, backend=backend)
        def power(self, w, n):
            return np.sum(w**n) * self.c

        @tg.jit(backend=backend)
        def predict(self, x, *, bias=0.0):
            return self.W @ x * self.c + bias

        @tg.hessian(backend=backend)
        def curvature(self, w):
            return np.sum(np.sin(w)) * self.c

    m = Model()
    w = np.array([1.0, 2.0])
    np.testing.assert_allclose(m.loss(w), [2.0, 2.0])
    value, (gw, gb) = m.loss2(w, 1.0)
    np.testing.assert_allclose(value, 2.0 * np.sum((w + 1.0) ** 2))
    np.testing.assert_allclose(gw, 4.0 * (w + 1.0))
    np.testing.assert_allclose(gb, 4.0 * np.sum(w + 1.0))
    np.testing.assert_allclose(m.power(w, 3), 6.0 * w**2)
    np.testing.assert_allclose(m.predict(w, bias=1.0), 2.0 * w + 1.0)
    np.testing.assert_allclose(m.curvature(w), np.diag(-2.0 * np.sin(w)))


def test_a_static_self_is_never_stale(backend):
    class Net:
        def __init__(self, c):
            self.c = c
            self.W = np.eye(2)

        @tg.grad(backend=backend)
        def loss(self, w):
            return np.sum(self.W @ w) * self.c

    m = Net(2.0)
    w = np.ones(2)
    np.testing.assert_allclose(m.loss(w), [2.0, 2.0])
    m.c = 5.0  # a guarded number
    np.testing.assert_allclose(m.loss(w), [5.0, 5.0])
    m.W[0, 0] = 3.0  # an array read at call time, changed in place
    np.testing.assert_allclose(m.loss(w), [15.0, 5.0])
    m.W = np.full((2, 2), 1.0)  # rebound
    np.testing.assert_allclose(m.loss(w), [10.0, 10.0])
    other = Net(7.0)
    for _ in range(2):  # two instances side by side: each gets its own values
        np.testing.assert_allclose(other.loss(w), [7.0, 7.0])
        np.testing.assert_allclose(m.loss(w), [10.0, 10.0])


def test_a_bound_method_inside_other_transforms(backend):
    class Net:
        def __init__(self, c):
            self.c = c

        @tg.jit(backend=backend)
        def energy(self, x):
            return np.sum(np.sin(x)) * self.c

    m = Net(2.0)
    x = np.array([0.1, 0.2])
    g = tg.grad(m.energy, backend=backend)  # a bound method as the function of a transform
    np.testing.assert_allclose(g(x), 2.0 * np.cos(x))
    m.c = 3.0
    np.testing.assert_allclose(g(x), 3.0 * np.cos(x))
    h = tg.grad(lambda x: m.energy(x) ** 2, backend=backend)  # called inside a trace
    np.testing.assert_allclose(h(x), 2 * m.energy(x) * 3.0 * np.cos(x))
    assert m.energy.trace_count >= 1


@pytest.mark.parametrize("kind", ["registered", "dataclass", "namedtuple"])
def test_a_pytree_self_is_traced_not_differentiated(backend, kind):
    if kind == "registered":
        cls = Affine
        make = lambda w, b: Affine(w, b, "m")
    elif kind == "dataclass":

        @dataclass
        class cls:
            w: np.ndarray
            b: np.ndarray

        make = cls
    else:
        cls = namedtuple("cls", "w b")
        make = cls

    traces = []

    def loss(self, x):
        traces.append(type(self))
        return np.sum(np.tanh(self.w * x + self.b))

    cls.loss = tg.grad(loss, backend=backend)
    m = make(np.array([0.5, 1.0]), np.array([0.1, -0.1]))
    x = np.array([1.0, 2.0])
    g = m.loss(x)
    np.testing.assert_allclose(g, (1 - np.tanh(m.w * x + m.b) ** 2) * m.w)
    m2 = make(np.array([2.0, 3.0]), np.array([0.0, 0.0]))
    np.testing.assert_allclose(m2.loss(x), (1 - np.tanh(m2.w * x) ** 2) * m2.w)
    assert traces == [cls]  # self is rebuilt as its class; its leaves are inputs: no new trace


def test_a_method_reached_through_the_class_counts_self_as_argument_0(backend):
    @dataclass
    class Lin:
        w: np.ndarray

        def loss(self, x):
            return np.sum(self.w * x)

    Lin.loss = tg.grad(Lin.loss, backend=backend)
    m, x = Lin(np.array([1.0, 2.0])), np.array([3.0, 4.0])
    np.testing.assert_allclose(m.loss(x), m.w)  # through the instance: d/dx
    g = Lin.loss(m, x)  # through the class: a plain function of (self, x), d/dself
    assert type(g) is Lin
    np.testing.assert_allclose(g.w, x)


def test_method_error_messages_count_after_self():
    class M:
        @tg.grad(argnums=1, backend="numpy")
        def loss(self, w):
            return np.sum(w)

        @tg.grad(backend="numpy")
        def loss_n(self, w, n):
            return np.sum(w * n)

    with pytest.raises(
        ValueError, match=r"argnums 1 is out of range: .* 1 positional argument\(s\) after self"
    ):
        M().loss(np.ones(2))
    with pytest.raises(TypeError, match=r"argument 1 of .* is None.*static_argnums=\(1,\)"):
        M().loss_n(np.ones(2), None)
    with pytest.raises(TypeError, match=r"argument 1 is a str"):
        M().loss_n(np.ones(2), "n")
    Named = namedtuple("Named", "w name")  # a pytree self: every field is a traced child
    Named.loss = tg.grad(lambda self, x: np.sum(self.w * x), backend="numpy")
    with pytest.raises(TypeError, match=r"self\.name is a str"):
        Named(np.ones(2), "n1").loss(np.ones(2))


# ---- custom_vjp over trees


@tg.custom_vjp
def _mixed(p, x):
    u = p.w * x
    return {"y": np.sin(u) + p.b, "z": (u**2).astype(np.float32), "n": np.int64(3)}


Residuals = namedtuple("Residuals", "u w x")


def _mixed_fwd(p, x):
    return _mixed(p, x), Residuals(p.w * x, p.w, x)


def _mixed_bwd(res, ct):
    assert ct["n"].dtype == np.int64  # an integer output gets zero cotangents
    gu = ct["y"] * np.cos(res.u) + ct["z"] * 2 * res.u
    return Params(gu * res.x, np.sum(ct["y"])), gu * res.w


_mixed.defvjp(_mixed_fwd, _mixed_bwd)


def _mixed_plain(p, x):
    u = p.w * x
    return {"y": np.sin(u) + p.b, "z": (u**2).astype(np.float32), "n": np.int64(3)}


def _tree_loss(f):
    def loss(p, x):
        out = f(p, x)
        return np.sum(out["y"] ** 2) + np.sum(out["z"] * 3.0) + out["n"]

    return loss


def test_custom_vjp_with_tree_arguments_and_several_outputs(backend):
    p, x = Params(np.array([0.5, 1.5]), np.array(0.2)), np.array([0.7, -0.4])
    got = tg.grad(_tree_loss(_mixed), argnums=(0, 1), backend=backend)(p, x)
    want = tg.grad(_tree_loss(_mixed_plain), argnums=(0, 1), backend=backend)(p, x)
    assert type(got[0]) is Params
    _same_trees(got, want, np.float32)
    out = tg.jit(_mixed, backend=backend)(p, x)
    assert out["z"].dtype == np.float32 and out["n"] == 3
    np.testing.assert_allclose(out["y"], np.sin(p.w * x) + p.b)
    # the rule is differentiated again: second derivatives through the packed outputs
    h = tg.hessian(lambda x: _tree_loss(_mixed)(p, x), backend=backend)(x)
    h_plain = tg.hessian(lambda x: _tree_loss(_mixed_plain)(p, x), backend=backend)(x)
    _close(h, h_plain, np.float32)


def test_custom_vjp_the_rule_is_used_for_several_outputs(backend):
    """A bwd that is not the true derivative shows that it is the one used, with all the
    output cotangents at once (a clipped sum is not the sum of clipped parts)."""

    @tg.custom_vjp
    def pair(x):
        return x, 2 * x

    pair.defvjp(lambda x: (pair(x), None), lambda _, ct: (np.clip(ct[0] + ct[1], -1.0, 1.0),))

    def loss(x):
        a, b = pair(x)
        return np.sum(a * 0.75 + b)

    g = tg.grad(loss, backend=backend)(np.ones(3))
    np.testing.assert_allclose(g, np.ones(3))  # clip(0.75 + 1) = 1; summed parts would give 1.75


def test_custom_vjp_none_cotangents_for_parts_of_an_argument(backend):
    @tg.custom_vjp
    def f(p):
        return np.sum(p.w * p.b)

    f.defvjp(lambda p: (f(p), p), lambda p, ct: (Params(ct * p.b, None),))
    g = tg.grad(f, backend=backend)(Params(np.array([1.0, 2.0]), np.array([3.0, 4.0])))
    assert type(g) is Params
    np.testing.assert_allclose(g.w, [3.0, 4.0])
    np.testing.assert_allclose(g.b, [0.0, 0.0])


def test_custom_vjp_takes_keyword_arguments(backend):
    @tg.custom_vjp
    def scale(x, k=2.0):
        return x * k

    scale.defvjp(lambda x, k=2.0: (scale(x, k), k), lambda k, ct: (ct * k * 10.0, None))
    g = tg.grad(lambda x: np.sum(scale(x, k=3.0)) + np.sum(scale(x=x, k=4.0)), backend=backend)
    np.testing.assert_allclose(g(np.ones(2)), [70.0, 70.0])  # the rule, with k bound to its place
    with pytest.raises(TypeError, match="scale: missing a required argument: 'x'"):
        tg.grad(lambda x: np.sum(scale(k=x)), backend=backend)(np.ones(2))


def test_custom_vjp_cotangent_structure_errors():
    @tg.custom_vjp
    def f(p):
        return np.sum(p.w * p.b)

    f.defvjp(lambda p: (f(p), p), lambda p, ct: ((ct * p.b, ct * p.w),))
    with pytest.raises(
        TypeError, match=r"cotangent that bwd returned for argument 0 .* \(\*, \*\).* Params"
    ):
        tg.grad(f, backend="numpy")(Params(np.ones(2), np.ones(2)))

    f.defvjp(lambda p: (f(p), p), lambda p, ct: (Params(ct * p.b, (ct, ct)),))
    with pytest.raises(TypeError, match=r"\(\*, \*\) as the cotangent of argument 0\.b"):
        tg.grad(f, backend="numpy")(Params(np.ones(2), np.ones(2)))


def test_broadcast_prefix_gives_one_entry_per_leaf():
    from tracegrad.base.tree import broadcast_prefix

    args = (Params(np.ones(2), 1.0), {"a": 1.0, "b": (2.0, 3.0)}, None)
    treedef = tg.tree_structure(args)
    none_is_entry = lambda a: a is None
    assert broadcast_prefix(0, treedef) == [0] * 5
    assert broadcast_prefix((None, 1, 0), treedef, none_is_entry) == [None, None, 1, 1, 1]
    got = broadcast_prefix((Params(0, None), {"b": (1, 2), "a": None}, 3), treedef, none_is_entry)
    assert got == [0, None, None, 1, 2]
    with pytest.raises(ValueError, match=r"in_axes does not match .* at \[0\]: expected Params"):
        broadcast_prefix((Other(0, 0), 0, 0), treedef, none_is_entry, "in_axes")
    with pytest.raises(ValueError, match=r"at the top: expected \(\*, \*, \*\) .* got \(\*, \*\)"):
        broadcast_prefix((0, 0), treedef, none_is_entry, "in_axes")


# ---- with the other transforms


def _mlp_loss(p, x, y):
    return (np.tanh(x @ p.w + p.b).sum() - y) ** 2


def test_vmap_per_example_gradients_of_namedtuple_params(backend):
    rng = np.random.default_rng(3)
    p = Params(rng.normal(size=(3, 2)), rng.normal(size=2))
    xs, ys = rng.normal(size=(4, 3)), rng.normal(size=4)
    got = tg.vmap(tg.grad(_mlp_loss), in_axes=(None, 0, 0), backend=backend)(p, xs, ys)
    assert type(got) is Params and got.w.shape == (4, 3, 2) and got.b.shape == (4, 2)
    for i in range(4):
        want = tg.grad(_mlp_loss, backend=backend)(p, xs[i], ys[i])
        _same_trees(Params(got.w[i], got.b[i]), want)


def test_vmap_axes_given_as_a_pytree_and_keyword_arguments(backend):
    p = Params(np.arange(6.0).reshape(3, 2), 0.5)
    x = np.array([1.0, -1.0])

    def f(p, x, *, scale):
        return np.sum(np.sin(p.w * x) + p.b) * scale

    scales = np.array([1.0, 2.0, 3.0])  # keyword arguments are mapped over axis 0, as in JAX
    out = tg.vmap(f, in_axes=(Params(0, None), None), backend=backend)(p, x, scale=scales)
    want = [f(Params(p.w[i], p.b), x, scale=scales[i]) for i in range(3)]
    np.testing.assert_allclose(out, want)
    with pytest.raises(ValueError, match=r"in_axes does not match .* at \[0\]: expected Params"):
        tg.vmap(f, in_axes=(Other(0, None), None), backend=backend)(p, x, scale=scales)


def test_vmap_and_jacfwd_as_methods(backend):
    class Model:
        def __init__(self):
            self.W = np.array([[1.0, 2.0], [3.0, 4.0]])

        @tg.vmap(in_axes=(0,), backend=backend)
        def predict(self, x):
            return self.W @ x

        @tg.jacfwd(backend=backend)
        def jac(self, x):
            return np.sin(self.W @ x)

    @dataclass
    class Lin:
        w: np.ndarray

        @tg.vmap(in_axes=(0,), backend=backend)
        def apply(self, x):
            return self.w * x

    m, xs = Model(), np.arange(6.0).reshape(3, 2)
    np.testing.assert_allclose(m.predict(xs), xs @ m.W.T)
    x = xs[1]
    np.testing.assert_allclose(m.jac(x), np.cos(m.W @ x)[:, None] * m.W)
    lin = Lin(np.array([2.0, 3.0]))
    np.testing.assert_allclose(lin.apply(xs), xs * lin.w)


def test_checkpoint_and_custom_jvp_take_trees_and_keyword_arguments(backend):
    p, x = Params(np.array([0.3, 0.5]), 2.0), np.array([1.0, -1.0])

    def f(p, x, *, scale=1.0):
        return np.sum(np.sin(p.w * x) * p.b) * scale

    want = tg.grad(f, backend=backend)(p, x, scale=3.0)
    got = tg.grad(lambda p, x: tg.checkpoint(f)(p, x, scale=3.0), backend=backend)(p, x)
    assert type(got) is Params
    _same_trees(got, want)

    @tg.custom_jvp
    def g(p, x, scale=1.0):
        return np.sum(np.sin(p.w * x) * p.b) * scale

    @g.defjvp
    def g_jvp(primals, tangents):
        (p, x, scale), (tp, tx, _) = primals, tangents
        c = np.cos(p.w * x) * p.b * scale
        return g(p, x, scale), np.sum(c * (tp.w * x + p.w * tx)) + np.sum(
            np.sin(p.w * x)
        ) * tp.b * scale

    got = tg.grad(lambda p, x: g(p, x, scale=3.0), backend=backend)(p, x)
    assert type(got) is Params
    _same_trees(got, want)


def test_device_arrays_inside_classes_stay_on_the_device():
    from conftest import BACKENDS

    if "cuda" not in BACKENDS:
        pytest.skip("the cuda backend is not installed")
    from numba import cuda

    p = Params(cuda.to_device(np.array([1.0, 2.0])), cuda.to_device(np.array([0.5, 0.5])))
    g = tg.grad(lambda p, x: np.sum(p.w * x + p.b), backend="cuda")(p, np.array([3.0, 4.0]))
    assert type(g) is Params and not isinstance(g.w, np.ndarray)
    np.testing.assert_array_equal(g.w.copy_to_host(), [3.0, 4.0])
    np.testing.assert_array_equal(g.b.copy_to_host(), [1.0, 1.0])
    out = tg.jit(lambda p, *, k: Layer(p.w * k, p.b), backend="cuda")(p, k=2.0)
    assert type(out) is Layer
    np.testing.assert_array_equal(out.w.copy_to_host(), [2.0, 4.0])
