"""Graph simplifications, each a function Graph -> Graph.

`optimize` is what runs before a graph executes: identity nodes that only matter to autodiff are
lowered, constants are folded, `x*1` and `x+0` disappear, repeated subexpressions are shared and
dead nodes are removed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import ir
from . import primitives as P
from .ir import Graph, Node, Var, freeze
from .primitives import Kind
from .transforms import pruning

# Arrays at most this big are folded when all their inputs are constants.
FOLD_LIMIT = 64


def dce(graph: Graph) -> Graph:
    """Drop nodes whose values no output needs."""
    kept, _ = graph.live(graph.outputs)
    return Graph(graph.inputs, tuple(kept), graph.outputs)


def cse(graph: Graph) -> Graph:
    """Share nodes that apply the same primitive to the same inputs with the same parameters."""
    env: dict[Var, Var] = {}
    seen: dict[tuple, Var] = {}
    nodes = []
    for node in graph.nodes:
        inputs = tuple(env.get(v, v) for v in node.inputs)
        key = (node.prim.name, tuple(v.id for v in inputs), node.param_key())
        if key in seen:  # (two identical hook nodes are one observation)
            env[node.out] = seen[key]
            continue
        seen[key] = node.out
        nodes.append(_with_inputs(node, inputs))
    return Graph(graph.inputs, tuple(nodes), tuple(env.get(v, v) for v in graph.outputs))


def _with_inputs(node: Node, inputs: tuple[Var, ...]) -> Node:
    if inputs == node.inputs:
        return node
    return Node(node.prim, inputs, node.params, node.out, node.source)


def _fill(node: Node | None) -> np.ndarray | None:
    """The scalar of a fill constant (one number over a shape), else None."""
    if node is not None and node.prim is P.const_p and node.params["value"].ndim == 0:
        return node.params["value"]
    return None


def _const_value(node: Node | None) -> np.ndarray | None:
    if node is not None and node.prim is P.const_p:
        return np.broadcast_to(node.params["value"], node.params["shape"])
    return None


def _uniform(value: np.ndarray) -> bool:
    first = value.reshape(-1)[0]
    if value.dtype.kind == "c":  # the signs of both parts' zeros
        return _uniform(value.real) and _uniform(value.imag)
    return bool(np.all(value == first)) and not (
        first == 0 and np.any(np.signbit(value) != np.signbit(first))
    )


def _is(value: np.ndarray | None, number: float) -> bool:
    return value is not None and value.ndim == 0 and value == number


def simplify(graph: Graph, lower: bool = True) -> Graph:
    """Local rewrites: constants folded, neutral elements removed, and (with `lower`) the identity
    nodes that only autodiff needs (stop_gradient, custom_grad) replaced by their value."""
    env: dict[Var, Var] = {}
    producer: dict[Var, Node] = {}
    nodes: list[Node] = []

    def make_fill(value, out: Var, source) -> Var:
        value = np.asarray(value, dtype=out.dtype).copy()
        node = Node(P.const_p, (), {"value": value, "shape": out.shape}, out, source)
        nodes.append(node)
        producer[out] = node
        return out

    # a rewrite may emit new nodes (`primitives.Algebra.rewrite`): they go into `nodes`
    builder = ir.Builder()
    builder.nodes = nodes
    for node in graph.nodes:
        inputs = tuple(env.get(v, v) for v in node.inputs)
        node = _with_inputs(node, inputs)
        if lower and node.prim is P.matmul_p and _outer(node):
            node = _outer_product(node, nodes, producer)  # an elementwise product, fusable
        elif lower and node.prim is P.matmul_p and _thin_product(node):
            node = _matrix_vector(node, nodes, producer)  # a fused row or column sum
        # a product rewritten above is now another node: its rewrites below read its own inputs
        inputs = node.inputs
        if node.prim.kind is Kind.IDENTITY and (not lower or node.prim.effectful):
            replacement = None
        else:
            emitted = len(nodes)
            with ir.building(builder), ir.source_location(node.source):
                replacement = _rewrite(node, [producer.get(v) for v in inputs])
            for new in nodes[emitted:]:
                producer[new.out] = new
        if isinstance(replacement, Var):
            env[node.out] = replacement
            continue
        if replacement is not None:  # a folded scalar or array
            value = np.asarray(replacement)
            if value.size and value.ndim and _uniform(value):
                value = value.reshape(-1)[0]  # one number over a shape: a fill
            if value.ndim == 0:
                env[node.out] = make_fill(value, node.out, node.source)
            else:
                value = np.array(value, dtype=node.out.dtype)
                value.flags.writeable = False
                new = Node(
                    P.const_p, (), {"value": value, "shape": node.out.shape}, node.out, node.source
                )
                nodes.append(new)
                producer[node.out] = new
            continue
        nodes.append(node)
        producer[node.out] = node
    return Graph(graph.inputs, tuple(nodes), tuple(env.get(v, v) for v in graph.outputs))


def _outer(node: Node) -> bool:
    """A product of matrices (or stacks of them) over an inner dimension of 1. A vector operand
    is not: `(1,) @ (1, m)` is `(m,)`, which neither operand broadcasts to."""
    a, b = node.inputs
    return a.ndim >= 2 and b.ndim >= 2 and a.shape[-1] == 1


def _outer_product(node: Node, nodes: list[Node], producer: dict[Var, Node]) -> Node:
    """A matrix product over an inner dimension of 1 (the adjoint of `x @ w` for a column `w`)
    is the product of its broadcast operands: one exact multiplication per element, which fuses
    into the loop that reads it, where a BLAS call would write a whole temporary."""
    shape = node.out.shape
    operands = []
    for v in node.inputs:
        wide = Var(shape, v.dtype)
        new = Node(P.broadcast_to_p, (v,), {"shape": shape}, wide, node.source)
        nodes.append(new)
        producer[wide] = new
        operands.append(wide)
    return Node(P.mul_p, tuple(operands), {}, node.out, node.source)


# A matrix-vector product (a column `w` on the right) at most this wide on its short side becomes
# a sum of elementwise products, fused into the loop that computes its matrix.
THIN_PRODUCT = 256


def _thin_product(node: Node) -> bool:
    a, b = node.inputs
    return a.ndim == 2 and b.ndim == 2 and b.shape[1] == 1 and min(a.shape) <= THIN_PRODUCT


def _matrix_vector(node: Node, nodes: list[Node], producer: dict[Var, Node]) -> Node:
    """`a @ w` for a matrix `a` (m x k) and a column `w` (k x 1), as `sum(a * w.T, axis=1)`: the
    product of the thin MLP's last layer (`h @ W3`) and the sum of its weight's adjoint
    (`h.T @ ct`, read through the transpose as `sum(h * ct, axis=0)`). Each fuses as a reduction
    into the loop that computes or reads `h`, where a BLAS call would read `h` once more; the
    sums add in another order than BLAS's (not bitwise equal to it)."""
    a, w = node.inputs
    m, k = a.shape
    add = _adder(nodes, producer, node.source, node.out.dtype)

    made = producer.get(a)
    if made is not None and made.prim is P.transpose_p and tuple(made.params["perm"]) == (1, 0):
        h, axis = made.inputs[0], 0  # a = h.T: sum over the rows of h (k x m)
        wide = add(P.broadcast_to_p, (w,), {"shape": h.shape}, h.shape)
    else:
        h, axis = a, 1
        row = add(P.reshape_p, (w,), {"shape": (1, k)}, (1, k))
        wide = add(P.broadcast_to_p, (row,), {"shape": (m, k)}, (m, k))
    terms = add(P.mul_p, (h, wide), {}, h.shape)
    sums = add(P.reduce_sum_p, (terms,), {"axes": (axis,)}, (m,))
    return Node(P.reshape_p, (sums,), {"shape": (m, 1)}, node.out, node.source)


# A product of matrices of at most this many multiply-adds becomes a sum of elementwise products
# over its inner axis, a loop that fuses with its neighbours: a Kalman filter's 4 x 4 products
# and an RNN step's (1 x 32) @ (32 x 32), where a BLAS call (and, in a loop body, the return to a
# Python driver between steps) costs more than the arithmetic.
TINY_PRODUCT = 1024


def tiny_products(graph: Graph) -> Graph:
    """The cpu backend's lowering of products of at most TINY_PRODUCT multiply-adds: each a sum
    over its inner axis (`_product_as_sum`), which the planner fuses. (The cuda backend keeps
    its own product kernels, split-k included.)"""
    if not any(node.prim is P.matmul_p and _tiny_product(node) for node in graph.nodes):
        return graph
    nodes: list[Node] = []
    producer: dict[Var, Node] = {}
    for node in graph.nodes:
        if node.prim is P.matmul_p and _tiny_product(node):
            node = _product_as_sum(node, nodes, producer)
        nodes.append(node)
        producer[node.out] = node
    return Graph(graph.inputs, tuple(nodes), graph.outputs)


def _tiny_product(node: Node) -> bool:
    a, b = node.inputs
    if a.ndim != 2 or b.ndim != 2 or a.dtype.kind not in "fc":
        return False
    (m, k), n = a.shape, b.shape[1]
    return 0 < m * k * n <= TINY_PRODUCT


def _product_as_sum(node: Node, nodes: list[Node], producer: dict[Var, Node]) -> Node:
    """`a @ b` (m x k times k x n) as `sum(a[:, :, None] * b[None, :, :], axis=1)`, added in
    the order of k (not BLAS's order: not bitwise equal to it)."""
    a, b = node.inputs
    (m, k), n = a.shape, b.shape[1]
    wide = []
    for v, shape in ((a, (m, k, 1)), (b, (1, k, n))):
        add = _adder(nodes, producer, node.source, v.dtype)
        v3 = add(P.reshape_p, (v,), {"shape": shape}, shape)
        wide.append(add(P.broadcast_to_p, (v3,), {"shape": (m, k, n)}, (m, k, n)))
    add = _adder(nodes, producer, node.source, node.out.dtype)
    terms = add(P.mul_p, tuple(wide), {}, (m, k, n))
    return Node(P.reduce_sum_p, (terms,), {"axes": (1,)}, node.out, node.source)


def _adder(nodes: list[Node], producer: dict[Var, Node], source, dtype) -> Callable:
    """`add(prim, inputs, params, shape)`: a new node of `dtype` appended to `nodes`, its value."""

    def add(prim, inputs, params, shape) -> Var:
        out = Var(shape, dtype)
        new = Node(prim, inputs, params, out, source)
        nodes.append(new)
        producer[out] = new
        return out

    return add


def _rewrite(node: Node, producers: list[Node | None]):
    """None to keep the node; a Var to replace it by; an array to fold it into a constant."""
    prim, ins = node.prim, node.inputs
    if prim.kind is Kind.IDENTITY:
        return ins[-1]
    if prim.kind is Kind.CONST or prim.effectful:  # a random draw is not folded
        return None
    fills = [_fill(p) for p in producers]
    # Elementwise on fills only: one scalar computation.
    if prim.kind is Kind.ELEMENTWISE and all(f is not None for f in fills):
        with np.errstate(all="ignore"):
            return prim.impl(*fills, **node.params)
    # Small constant arrays fold; big ones stay (they are passed to kernels as buffers).
    values = [_const_value(p) for p in producers]
    if all(v is not None for v in values) and node.out.size <= FOLD_LIMIT:
        with np.errstate(all="ignore"):
            return prim.impl(*values, **node.params)
    # Linear primitives of a zero are zero; shape primitives that only move data move a fill.
    if prim.linear and len(ins) == 1 and _is(fills[0], 0):
        return np.zeros((), node.out.dtype)
    if prim.algebra.moves_fill and len(ins) == 1 and fills[0] is not None:
        return fills[0]
    monoid = prim.monoid
    if prim.kind is Kind.REDUCE and monoid.repeat is not None and fills[0] is not None:
        return monoid.repeat(fills[0], ins[0].size // max(node.out.size, 1))
    return _algebra(node, fills, producers)


def _algebra(node: Node, fills, producers):
    """The identities the primitive's table entry declares (`primitives.Algebra`)."""
    algebra = node.prim.algebra
    for k, value in algebra.absorbing:
        if _is(fills[k], value):
            return np.asarray(value, node.out.dtype)
    for k, value in algebra.neutral:
        if _is(fills[k], value):
            return node.inputs[1 - k]
    inner = producers[0] if producers else None
    if algebra.involution and inner is not None and inner.prim is node.prim:
        return inner.inputs[0]
    if algebra.rewrite is not None:
        return algebra.rewrite(node, fills, producers)
    return None


def share_saving_loops(graph: Graph) -> Graph:
    """A loop node that saves its carries (`save=True`, what a loop's adjoint runs forward)
    computes, as the first part of its packed output, the same loop without saving: the loop
    without saving becomes a slice of the saving one, moved up to its place, so the forward
    runs once."""
    saving: dict[tuple, Node] = {}
    for node in graph.nodes:
        if node.prim.kind is Kind.CONTROL and node.params.get("save"):
            saving.setdefault(_unsaved_key(node), node)
    if not saving:
        return graph
    emitted: set[int] = set()
    nodes: list[Node] = []
    for node in graph.nodes:
        if id(node) in emitted:
            continue
        big = None
        if node.prim.kind is Kind.CONTROL and node.params.get("save") is False:
            big = saving.get(_unsaved_key(node))
        if big is None:
            nodes.append(node)
            emitted.add(id(node))
            continue
        if id(big) not in emitted:
            emitted.add(id(big))
            nodes.append(big)
        index = ((0, node.out.shape[0], 1),)
        nodes.append(Node(P.slice_p, (big.out,), {"index": index}, node.out, node.source))
    return Graph(graph.inputs, tuple(nodes), graph.outputs)


def _unsaved_key(node: Node) -> tuple:
    params = {k: v for k, v in node.params.items() if k != "save"}
    key = tuple(sorted((k, freeze(v)) for k, v in params.items()))
    return (node.prim.name, tuple(v.id for v in node.inputs), key)


def optimize(graph: Graph, lower: bool = True, rounds: int = 4) -> Graph:
    """The pipeline that runs before execution, repeated until the graph stops shrinking.

    `lower=False` keeps the identity nodes autodiff needs (for graphs shown to users)."""
    for _ in range(rounds):
        before = len(graph.nodes)
        graph = dce(cse(simplify(share_saving_loops(graph), lower)))
        pruned = pruning.prune_loops(graph, lambda g: optimize(g, lower), ("optimized", lower))
        if pruned is graph and len(graph.nodes) == before:
            break
        graph = pruned
    return graph


# ----------------------------------------------------------------------------------------------
# Smooth idioms: rewritten before differentiation


def smooth_idioms(graph: Graph) -> Graph:
    """The numerically stable ways of writing softplus and log-sigmoid, rewritten to the smooth
    `softplus` primitive, so that their derivatives are exact at every order at z = 0 too (the
    kink conventions of maximum and abs would give the second derivative 0 there, not 1/4):

        max(z, 0) + log1p(exp(-|z|))   and  max(z, 0) + log(1 + exp(-|z|))   ->  softplus(z)
        min(z, 0) - log1p(exp(-|z|))   and  min(z, 0) - log(1 + exp(-|z|))   ->  -softplus(-z)

    in either operand order of `+`, `max` and `min` (and with |-z| for |z|). It runs on the
    traced forward graph, before autodiff; docs/limitations.md lists the idioms."""
    producer = {node.out: node for node in graph.nodes}
    canon = _structural_classes(graph)

    def made_by(v: Var, prim) -> Node | None:
        node = producer.get(v)
        return node if node is not None and node.prim is prim else None

    def is_fill(v: Var, number: float) -> bool:
        return _is(_fill(producer.get(v)), number)

    def magnitude_class(v: Var) -> int:
        """The class of v up to negation (|v| = |-v|)."""
        while (node := made_by(v, P.neg_p)) is not None:
            v = node.inputs[0]
        return canon[v]

    def ramp(v: Var, prim) -> Var | None:
        """w for prim(w, 0) or prim(0, w)."""
        node = made_by(v, prim)
        if node is None:
            return None
        a, b = node.inputs
        return a if is_fill(b, 0) else b if is_fill(a, 0) else None

    def tail(v: Var) -> Var | None:
        """u for log1p(exp(-|u|)) or log(1 + exp(-|u|))."""
        if (node := made_by(v, P.log1p_p)) is not None:
            inner = node.inputs[0]
        elif (node := made_by(v, P.log_p)) is not None and (s := made_by(node.inputs[0], P.add_p)):
            a, b = s.inputs
            inner = b if is_fill(a, 1) else a if is_fill(b, 1) else None
            if inner is None:
                return None
        else:
            return None
        e = made_by(inner, P.exp_p)
        n = made_by(e.inputs[0], P.neg_p) if e is not None else None
        m = made_by(n.inputs[0], P.abs_p) if n is not None else None
        return m.inputs[0] if m is not None else None

    def matches(w: Var | None, u: Var | None) -> bool:
        return w is not None and u is not None and magnitude_class(w) == magnitude_class(u)

    nodes: list[Node] = []
    changed = False
    for node in graph.nodes:
        if P.is_float(node.out.dtype) and node.prim is P.add_p:
            a, b = node.inputs
            for first, second in ((a, b), (b, a)):
                w = ramp(first, P.maximum_p)
                if matches(w, tail(second)):
                    nodes.append(Node(P.softplus_p, (w,), {}, node.out, node.source))
                    changed = True
                    break
            else:
                nodes.append(node)
            continue
        if P.is_float(node.out.dtype) and node.prim is P.sub_p:
            w = ramp(node.inputs[0], P.minimum_p)
            if matches(w, tail(node.inputs[1])):
                # 0 - softplus(-w): +0, not -0, where softplus(-w) rounds to 0 (as min(w, 0) - 0)
                minus_w, plus, zero = (Var(w.shape, w.dtype) for _ in range(3))
                fill = {"value": np.zeros((), w.dtype), "shape": w.shape}
                nodes.append(Node(P.neg_p, (w,), {}, minus_w, node.source))
                nodes.append(Node(P.softplus_p, (minus_w,), {}, plus, node.source))
                nodes.append(Node(P.const_p, (), fill, zero, node.source))
                nodes.append(Node(P.sub_p, (zero, plus), {}, node.out, node.source))
                changed = True
                continue
        nodes.append(node)
    return Graph(graph.inputs, tuple(nodes), graph.outputs) if changed else graph


def _structural_classes(graph: Graph) -> dict[Var, int]:
    """A number per value, equal for values computed the same way from the same inputs (what
    `cse` would merge), without changing the graph."""
    canon: dict[Var, int] = {v: v.id for v in graph.inputs}
    seen: dict[tuple, int] = {}
    for node in graph.nodes:
        if node.prim.kind is Kind.IDENTITY or node.prim.effectful:
            canon[node.out] = node.out.id
            continue
        key = (node.prim.name, tuple(canon.get(v, v.id) for v in node.inputs), node.param_key())
        canon[node.out] = seen.setdefault(key, node.out.id)
    return canon


def extract_hooks(graph: Graph) -> tuple[Graph, list[tuple[str, object]]]:
    """Move hook nodes out of the graph: their values become extra outputs, after the others.

    Returns the graph and the (name, hook) of each extra output, in order. A hook node with several
    inputs (tg.debug_print) gets one entry per input; its hook is called once, with all of them."""
    hooks = [node for node in graph.nodes if node.prim is P.hook_p]
    if not hooks:
        return graph, []
    nodes = tuple(node for node in graph.nodes if node.prim is not P.hook_p)
    outputs = graph.outputs + tuple(v for node in hooks for v in node.inputs)
    entries: list[tuple[str, object]] = []
    for node in hooks:
        name, hook = node.params["name"], node.params["hook"]
        if len(node.inputs) == 1:
            entries.append((name, hook))
        else:
            gather = _Gather(hook, len(node.inputs))
            entries += [(name, gather.slot(i)) for i in range(len(node.inputs))]
    return Graph(graph.inputs, nodes, outputs), entries


class _Gather:
    """Collects the values of one hook node's inputs (handed over one by one, in order) and calls
    its hook with all of them when the last arrives."""

    def __init__(self, hook, n: int):
        self.hook, self.values = hook, [None] * n

    def slot(self, i: int):
        def receive(name, value):
            self.values[i] = value
            if i == len(self.values) - 1:
                values, self.values = self.values, [None] * len(self.values)
                return self.hook(name, *values)
            return None

        return receive
