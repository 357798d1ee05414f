"""The public transforms beyond reverse mode: vmap, jvp, linearize, vjp, jacfwd, jacrev, hvp.

Each is a `Transformed` (calls/transformed.py) whose `build` derives its graph with the graph-to-graph
transforms of tracegrad/transforms: called on arrays it compiles and caches a program per
argument signature, called on tracers it inlines its graph into the enclosing trace, so every
transform composes with every other (`vmap(grad(f))`, `jacfwd(jacrev(f))`, `grad` of a function
that calls `jvp`...). The signatures and semantics are JAX's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import ir, passes
from . import numpy_namespace  # noqa: F401 (registers the handlers tracing dispatches to)
from . import primitives as P
from .api import hessian, jacobian
from .api import grad as _grad
from .ir import Graph, Var
from .trace import trace
from .transforms import batching, forward, partial_eval
from .autodiff import adjoint
from .calls import derive
from .calls.transformed import Transformed, name_of
from .base.tree import LEAF, TreeDef, broadcast_prefix, flatten, tuple_of

jacrev = jacobian  # JAX's name for reverse-mode jacobians
VMAP_NO_BRANCHING = (
    "inside vmap: it holds one value per example, and they may differ, so one Python branch "
    "cannot be taken for all of them"
)


class _Composite(Transformed):
    """A transform whose positional arguments are all traced (no argnums, no static_argnums)."""

    def __init__(self, fun: Callable, kind: str, has_aux: bool = False, backend=None, options=()):
        super().__init__(fun, kind, (), has_aux, (), backend)
        self.options = options

    @property
    def spec(self) -> tuple:
        return (*super().spec, self.options)

    def _check_call(self, args: tuple) -> None:
        pass

    def _trace_primal(self, avals, treedef: TreeDef, n_args: int, scope, branching=False):
        """Trace the function on the first `n_args` positional arguments. Returns the graph
        (inputs: their leaves, then hidden and captured values), its output tree and captures.
        A `branching` trace's guards are the graph's last outputs (see trace.trace)."""
        primal_tree = TreeDef("tuple", treedef.children[:n_args])
        n_leaves = primal_tree.num_leaves
        fgraph, out_tree, captures = trace(
            self.fun, avals[:n_leaves], primal_tree, None, scope, branching
        )
        fgraph = passes.smooth_idioms(fgraph)
        return fgraph, out_tree, captures, n_leaves

    def _value_and_aux(self, out_tree: TreeDef) -> tuple[TreeDef, TreeDef | None]:
        if not self.has_aux:
            return out_tree, None
        if out_tree.kind not in ("tuple", "list") or len(out_tree.children) != 2:
            raise TypeError(
                f"{name_of(self)} has has_aux=True, so the function must return a pair "
                f"(output, aux); it returned {out_tree}"
            )
        return out_tree.children[0], out_tree.children[1]


def _check_like(
    what: str, name: str, tree: TreeDef, like: TreeDef, avals, like_avals, float_only=True
):
    """`tree` (tangents or cotangents) must have the structure, shapes and float dtypes of `like`."""
    if tree != like:
        raise TypeError(f"{name}: the {what} have structure {tree}, but must match {like}")
    for k, ((shape, dtype), (lshape, ldtype)) in enumerate(zip(avals, like_avals, strict=True)):
        if tuple(shape) != tuple(lshape):
            raise ValueError(
                f"{name}: {what} leaf {k} has shape {tuple(shape)}, but its primal has shape "
                f"{tuple(lshape)}; they must match"
            )
        if float_only and P.is_float(ldtype) and np.dtype(dtype) != np.dtype(ldtype):
            raise TypeError(
                f"{name}: {what} leaf {k} has dtype {np.dtype(dtype)}, but its primal has dtype "
                f"{np.dtype(ldtype)}; they must match (convert with .astype)"
            )


def _float_positions(graph: Graph, n: int) -> list[int]:
    return [i for i in range(n) if P.is_float(graph.inputs[i].dtype)]


def _with_inputs(graph: Graph, inputs: Sequence[Var]) -> Graph:
    return Graph(tuple(inputs), graph.nodes, graph.outputs)


# ----------------------------------------------------------------------------------------------
# vmap


def _is_none(a: Any) -> bool:
    return a is None


def _axis_leaves(prefix: Any, tree: TreeDef, what: str) -> list:
    """One axis (or None) per leaf of `tree`, from `prefix`: an int or None for a whole subtree,
    or containers of them with the structure of the tree's top levels (JAX's tree prefix: a
    namedtuple, dataclass or registered class of axes for an argument of that class)."""
    return broadcast_prefix(prefix, tree, _is_none, f"vmap: {what}")


def _axes_key(axes: Any) -> Any:
    """A hashable form of an in_axes/out_axes tree (part of the program's key)."""
    leaves, treedef = flatten(axes, _is_none)
    return treedef, tuple(a if a is None else int(a) for a in leaves)


def _check_axes_tree(axes: Any, what: str) -> None:
    for a in flatten(axes, _is_none)[0]:
        if a is not None and (not isinstance(a, (int, np.integer)) or isinstance(a, bool)):
            raise TypeError(
                f"vmap: {what} must be an int, None, or a tuple/list/dict (or other pytree) of "
                f"them; got {axes!r}"
            )


class Vmapped(_Composite):
    def __init__(self, fun: Callable, in_axes: Any = 0, out_axes: Any = 0, backend=None):
        _check_axes_tree(in_axes, "in_axes")
        _check_axes_tree(out_axes, "out_axes")
        super().__init__(
            fun, "vmap", backend=backend, options=(_axes_key(in_axes), _axes_key(out_axes))
        )
        self.in_axes, self.out_axes = in_axes, out_axes

    def _bind_self(self, pytree_self: bool) -> None:
        """A method's `self` is not mapped: in_axes given per argument count after it."""
        super()._bind_self(pytree_self)
        if pytree_self and type(self.in_axes) in (tuple, list):
            self.in_axes = (None, *self.in_axes)
            self.options = (_axes_key(self.in_axes), self.options[1])

    def build(self, avals, treedef, static, positions, scope=None):
        name = name_of(self)
        n_args = len(positions)  # keyword arguments, if any: a dict after them, mapped on axis 0
        in_axes = self.in_axes
        if type(in_axes) is list:
            in_axes = tuple(in_axes)
        if type(in_axes) is tuple and len(in_axes) != n_args:
            raise ValueError(
                f"{name}: in_axes has {len(in_axes)} entries but the function was called with "
                f"{n_args} positional arguments; give one entry per argument (None: not mapped)"
            )
        if type(in_axes) is not tuple:
            in_axes = (in_axes,) * n_args
        in_axes += (0,) * (len(treedef.children) - n_args)
        axes = _axis_leaves(in_axes, treedef, "in_axes")
        size, sizes, example = None, [], []
        for k, ((shape, dtype), axis) in enumerate(zip(avals, axes, strict=True)):
            if axis is None:
                example.append((shape, dtype))
                continue
            ndim = len(shape)
            if not -ndim <= axis < ndim:
                raise ValueError(
                    f"{name}: in_axes {axis} is out of range for leaf {k} of shape {tuple(shape)}"
                    + (" (a scalar has no axis to map; use None for it)" if ndim == 0 else "")
                )
            axes[k] = axis = axis % ndim
            sizes.append((k, shape[axis]))
            size = shape[axis] if size is None else size
            example.append((tuple(shape[:axis]) + tuple(shape[axis + 1 :]), dtype))
        if size is None:
            raise ValueError(f"{name}: in_axes maps no argument; map at least one with an int")
        if any(s != size for _, s in sizes):
            shown = ", ".join(f"leaf {k}: {s}" for k, s in sizes)
            raise ValueError(
                f"{name}: the mapped axes have different sizes ({shown}); they must agree"
            )
        wrap = derive.wrap_args(self, static, positions)
        fgraph, out_tree, captures = trace(
            self.fun, example, treedef, wrap, scope, no_branching=VMAP_NO_BRANCHING
        )
        out_axes = _axis_leaves(self.out_axes, out_tree, "out_axes")
        for j, (axis, out) in enumerate(zip(out_axes, fgraph.outputs, strict=True)):
            if axis is not None:
                if not -(out.ndim + 1) <= axis <= out.ndim:
                    raise ValueError(
                        f"{name}: out_axes {axis} is out of range for output {j} of shape {out.shape}"
                    )
                out_axes[j] = axis % (out.ndim + 1)
        in_full = axes + [None] * (len(fgraph.inputs) - len(axes))
        return batching.vmap(fgraph, in_full, size, out_axes, name), out_tree, captures


def vmap(
    fun: Callable | None = None, in_axes: Any = 0, out_axes: Any = 0, backend: str | None = None
):
    """Map `fun` over a leading (or `in_axes`) axis of its arguments, as one batched program.

    `in_axes`: an int (the mapped axis of every argument), None (not mapped), or a tuple with
    one entry per positional argument, each an int, None or a dict/list/tuple of them shaped like
    that argument. `out_axes` likewise for the results. Per-example gradients:

    >>> import numpy as np, tracegrad as tg
    >>> loss = lambda w, x, y: (x @ w - y) ** 2
    >>> tg.vmap(tg.grad(loss), in_axes=(None, 0, 0))(np.ones(2), np.eye(2), np.zeros(2))
    array([[2., 0.],
           [0., 2.]])
    """
    if fun is None:
        return lambda f: Vmapped(f, in_axes, out_axes, backend)
    return Vmapped(fun, in_axes, out_axes, backend)


# ----------------------------------------------------------------------------------------------
# Forward mode: jvp, jacfwd, hvp


class _Jvp(_Composite):
    """Called with (*primals, *tangents); returns (outputs, output tangents[, aux])."""

    def build(self, avals, treedef, static, positions, scope=None):
        n_args = len(treedef.children) // 2
        fgraph, out_tree, captures, n = self._trace_primal(avals, treedef, n_args, scope, True)
        primal_tree = TreeDef("tuple", treedef.children[:n_args])
        tangent_tree = TreeDef("tuple", treedef.children[n_args:])
        _check_like(
            "tangents", name_of(self), tangent_tree, primal_tree, avals[n : 2 * n], avals[:n]
        )
        value_tree, aux_tree = self._value_and_aux(out_tree)
        n_value = value_tree.num_leaves
        wrt = _float_positions(fgraph, n)
        graph = forward.jvp(fgraph, wrt)
        m = len(fgraph.inputs)
        given = dict(zip(wrt, graph.inputs[m:], strict=True))
        tangents = [given[i] if i in given else Var(*avals[n + i]) for i in range(n)]
        inputs = list(fgraph.inputs[:n]) + tangents + list(fgraph.inputs[n:])
        n_out = len(fgraph.outputs)
        n_user = out_tree.num_leaves  # then the guards (trace.trace), returned last
        values, out_tangents = graph.outputs[:n_out], graph.outputs[n_out:]
        outputs = list(values[:n_value]) + list(out_tangents[:n_value])
        tree = tuple_of(value_tree, value_tree)
        if aux_tree is not None:
            outputs += list(values[n_value:n_user])
            tree = tuple_of(value_tree, value_tree, aux_tree)
        outputs += list(values[n_user:])
        return Graph(tuple(inputs), graph.nodes, tuple(outputs)), tree, captures


def _as_tuple(value: Any, what: str) -> tuple:
    if not isinstance(value, (tuple, list)):
        raise TypeError(
            f"{what} must be a tuple or list with one entry per positional argument, got "
            f"{type(value).__name__} (write ({what[:-1] if what.endswith('s') else what},) for one argument)"
        )
    return tuple(value)


def jvp(fun: Callable, primals: Sequence, tangents: Sequence, has_aux: bool = False, backend=None):
    """Forward mode: `(fun(*primals), J @ tangents)`, the tangent having the output's structure.

    >>> import numpy as np, tracegrad as tg
    >>> y, t = tg.jvp(np.sin, (np.zeros(2),), (np.ones(2),))
    >>> t
    array([1., 1.])
    """
    primals, tangents = _as_tuple(primals, "primals"), _as_tuple(tangents, "tangents")
    if len(primals) != len(tangents):
        raise ValueError(
            f"jvp: {len(primals)} primals but {len(tangents)} tangents; give one tangent per primal"
        )
    return _Jvp(fun, "jvp", has_aux, backend)(*primals, *tangents)


def jacfwd(fun=None, argnums=0, has_aux=False, static_argnums=(), backend=None, holomorphic=False):
    """d f / d x by forward mode, shape `f(x).shape + x.shape` (like `jacobian`): one batched
    tangent per input element, cheaper than reverse mode when outputs outnumber inputs.
    Complex arguments need `holomorphic=True` (docs/complex.md).

    >>> import numpy as np, tracegrad as tg
    >>> tg.jacfwd(lambda x: x ** 3)(np.array([1.0, 2.0]))
    array([[ 3.,  0.],
           [ 0., 12.]])
    """
    if fun is None:
        return lambda f: jacfwd(f, argnums, has_aux, static_argnums, backend, holomorphic)
    options = (argnums, has_aux, static_argnums, backend, False, holomorphic)
    return Transformed(fun, "jacfwd", *options)


def hvp(fun: Callable, backend: str | None = None):
    """`hvp(f)(x, v)`: the Hessian of scalar `f` at `x` times `v`, without forming the Hessian
    (forward mode over reverse mode: memory and time of a few gradients).

    >>> import numpy as np, tracegrad as tg
    >>> tg.hvp(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]), np.ones(2))  # diag(6 x) @ v
    array([ 6., 12.])
    """
    grad_f = _grad(fun, backend=backend)

    def product(x, v):
        return jvp(grad_f, (x,), (v,), backend=backend)[1]

    product.__name__ = f"hvp_{getattr(fun, '__name__', 'f')}"
    return product


# ----------------------------------------------------------------------------------------------
# Staged transforms: linearize and vjp run the primal once and keep the residuals


class _Staged(_Composite):
    """Two programs from one derivation: the known part (`kind`) computes the values and the
    residuals from the primals; the apply part (`kind + '_apply'`), called with
    (*primals, residuals, *seeds), computes the tangents or cotangents from the residuals."""

    def _derive(self, fgraph: Graph, n: int, seed_avals, n_value: int) -> Graph:
        raise NotImplementedError

    def build(self, avals, treedef, static, positions, scope=None):
        apply = self.kind.endswith("_apply")
        n_args = self.options[0]
        fgraph, out_tree, captures, n = self._trace_primal(avals, treedef, n_args, scope)
        value_tree, aux_tree = self._value_and_aux(out_tree)
        n_value, n_out = value_tree.num_leaves, len(fgraph.outputs)
        m = len(fgraph.inputs)
        _, seed_avals = self._seeds(treedef, avals, n_args, n, value_tree, fgraph, apply)
        # inputs: fgraph.inputs, then the seeds;  outputs: fgraph.outputs, then the derivatives
        full = self._derive(fgraph, n, seed_avals, n_value)
        split = partial_eval.split(passes.optimize(full, lower=False), m, n_out)
        n_res = len(split.known.outputs) - n_out
        if not apply:
            tree = tuple_of(
                value_tree, *([aux_tree] if aux_tree else []), TreeDef("tuple", (LEAF,) * n_res)
            )
            return split.known, tree, captures
        res_tree = treedef.children[n_args]
        res_avals = avals[n : n + res_tree.num_leaves]
        if res_tree.num_leaves != n_res or any(
            (tuple(s), np.dtype(d)) != (v.shape, v.dtype)
            for (s, d), v in zip(res_avals, split.unknown.inputs[:n_res], strict=False)
        ):
            raise ValueError(
                f"{name_of(self)}: the residuals do not belong to this function and these "
                "primals; call the function returned with the arguments it was made for"
            )
        inputs = list(fgraph.inputs[:n]) + list(split.unknown.inputs) + list(fgraph.inputs[n:])
        graph = Graph(tuple(inputs), split.unknown.nodes, split.unknown.outputs)
        return graph, self._result_tree(treedef, n_args, value_tree), captures


class _Linearize(_Staged):
    def _seeds(self, treedef, avals, n_args, n, value_tree, fgraph, apply):
        primal_tree = TreeDef("tuple", treedef.children[:n_args])
        if apply:
            tree = TreeDef("tuple", treedef.children[n_args + 1 :])
            r = treedef.children[n_args].num_leaves
            _check_like("tangents", name_of(self), tree, primal_tree, avals[n + r :], avals[:n])
        return primal_tree, avals[:n]

    def _derive(self, fgraph, n, seed_avals, n_value):
        wrt = _float_positions(fgraph, n)
        graph = forward.jvp(fgraph, wrt)
        m = len(fgraph.inputs)
        given = dict(zip(wrt, graph.inputs[m:], strict=True))
        seeds = [given[i] if i in given else Var(*seed_avals[i]) for i in range(n)]
        n_out = len(fgraph.outputs)
        outputs = graph.outputs[:n_out] + graph.outputs[n_out : n_out + n_value]
        return Graph(tuple(fgraph.inputs) + tuple(seeds), graph.nodes, outputs)

    def _result_tree(self, treedef, n_args, value_tree):
        return value_tree


class _Vjp(_Staged):
    def _seeds(self, treedef, avals, n_args, n, value_tree, fgraph, apply):
        value_avals = [(v.shape, v.dtype) for v in fgraph.outputs[: value_tree.num_leaves]]
        if apply:
            tree = treedef.children[n_args + 1]
            r = treedef.children[n_args].num_leaves
            _check_like("cotangents", name_of(self), tree, value_tree, avals[n + r :], value_avals)
        return value_tree, value_avals

    def _derive(self, fgraph, n, seed_avals, n_value):
        wrt = _float_positions(fgraph, n)
        outs = [j for j in range(n_value) if P.is_float(fgraph.outputs[j].dtype)]
        graph = adjoint(fgraph, wrt, outs, seed_ones=False)
        m = len(fgraph.inputs)
        given = dict(zip(outs, graph.inputs[m:], strict=True))
        seeds = [given[j] if j in given else Var(*seed_avals[j]) for j in range(n_value)]
        n_out = len(fgraph.outputs)
        cts = dict(zip(wrt, graph.outputs[n_out:], strict=True))
        builder = ir.Builder()
        builder.inputs = list(fgraph.inputs) + seeds
        builder.nodes = list(graph.nodes)
        with ir.building(builder):
            results = [cts[i] if i in cts else P.zeros_like(fgraph.inputs[i]) for i in range(n)]
        return builder.graph(list(graph.outputs[:n_out]) + results)

    def _result_tree(self, treedef, n_args, value_tree):
        return TreeDef("tuple", treedef.children[:n_args])


def linearize(fun: Callable, *primals, backend: str | None = None):
    """`(fun(*primals), f_jvp)`: `f_jvp(*tangents)` is the jvp at `primals`, computed from values
    kept from the first run (the primal computation is not repeated).

    >>> import numpy as np, tracegrad as tg
    >>> value, f_jvp = tg.linearize(lambda x: np.sin(x), 0.0)
    >>> float(value), float(f_jvp(2.0))  # cos(0) * 2
    (0.0, 2.0)
    """
    n = len(primals)
    known = _Linearize(fun, "linearize", False, backend, options=(n,))
    value, residuals = known(*primals)
    apply = _Linearize(fun, "linearize_apply", False, backend, options=(n,))

    def f_jvp(*tangents):
        if len(tangents) != n:
            raise TypeError(f"f_jvp takes {n} tangents (one per primal), got {len(tangents)}")
        return apply(*primals, residuals, *tangents)

    return value, f_jvp


def vjp(fun: Callable, *primals, has_aux: bool = False, backend: str | None = None):
    """`(fun(*primals), f_vjp)` (and `aux` with `has_aux`): `f_vjp(cotangent)` returns one
    cotangent per primal, computed from values kept from the first run.

    >>> import numpy as np, tracegrad as tg
    >>> value, f_vjp = tg.vjp(lambda x: x ** 2, np.array([1.0, 2.0]))
    >>> f_vjp(np.ones(2))
    (array([2., 4.]),)
    """
    n = len(primals)
    known = _Vjp(fun, "vjp", has_aux, backend, options=(n,))
    out = known(*primals)
    value, residuals = out[0], out[-1]
    apply = _Vjp(fun, "vjp_apply", has_aux, backend, options=(n,))

    def f_vjp(cotangent):
        return apply(*primals, residuals, cotangent)

    return (value, f_vjp, out[1]) if has_aux else (value, f_vjp)


__all__ = ["hessian", "hvp", "jacfwd", "jacrev", "jvp", "linearize", "vjp", "vmap"]
