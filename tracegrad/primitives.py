"""The primitive table: every operation tracegrad knows, declared once with every facet it needs.

A `Primitive` holds
- `infer`: its shape and dtype rule,
- `impl`: its NumPy reference implementation (the interpreter and the oracle),
- `adjoint`: its reverse-mode rule, written with the op constructors below, so the adjoint is
  ordinary IR and can be differentiated again,
- `batch`: how it acts on values with an extra leading (batch) axis (jacobians, hessians),
- `scalar`: for elementwise primitives, the scalar expression the code generators splice into a
  loop body. `M.name(...)` marks a math-library call that each generator renders its own way
  (`math_call`: the function vectorised math implements under the primitive's name),
- `monoid`: for reductions and scans, how values combine (identity, step, accumulator dtype),
- `index_map`: for shape primitives, the input index an output index reads (affine or
  piecewise) and the strided view it makes, or `OWN_STEP` for one that computes,
- `algebra`: the identities the simplifier may apply (neutral and absorbing elements, what
  moves a fill through unchanged, other local rewrites),
- `pairing`: a partner computed in the same call (sin with cos).

Fusion, the simplifier and the code generators read these facets and name no primitive, so a
new primitive is one entry here (tests/test_facets.py checks that each kind has its facets).

Invariants the op constructors guarantee, so that rules and code generators stay simple:
- operands of an elementwise node have the node's shape and (for arithmetic) its dtype;
  broadcasting and promotion are explicit `broadcast_to` and `convert` nodes;
- a cotangent has exactly the shape and dtype of its value; an adjoint rule returns `None` for an
  input that gets no cotangent (a symbolic zero).

Adjoint rules multiply cotangents by local derivatives with `ct_mul`, whose value is 0 wherever the
cotangent is 0, even if the derivative there is inf or nan. That is how the gradient of
`np.where(x > 0, np.sqrt(x), 0.0)` stays finite at x = 0, at every order.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import ir
from .errors import ShapeError, at
from .ir import Var


class Kind(enum.Enum):
    ELEMENTWISE = "elementwise"  # one output element from the same-index input elements
    REDUCE = "reduce"  # reduces `axes` of its single input
    SCAN = "scan"  # combines its single input along `axis`, keeping every partial result
    MATMUL = "matmul"  # batched matrix product
    SHAPE = "shape"  # moves data without arithmetic (reshape, slice, broadcast...)
    CONST = "const"  # no inputs: a literal value
    IDENTITY = "identity"  # passes a value through; only autodiff treats it specially
    CONTROL = "control"  # runs the graphs it holds (loops, conditionals): transforms/loops.py


Shapes = tuple[tuple[int, ...], ...]
Dtypes = tuple[np.dtype, ...]


# ----------------------------------------------------------------------------------------------
# Facets: what fusion, the simplifier and the code generators need to know of a primitive, so
# that none of them names one.


@dataclass(frozen=True, eq=False)
class Monoid:
    """How a reduction combines values: an associative step with an identity.

    `combine` is the step on two partial results as a scalar template (`"{0} + {1}"`), which
    both code generators splice in; `identity(dtype)` the value that changes nothing; `reduce`
    NumPy's reduction over axes and `accumulate` its running version along one axis (the plan's
    references for reductions and scans); `helper` the name of the step as a
    function (`codegen_cpu._r<helper>`). With `reassociate`, float steps may be reassociated
    (what lets a compiler vectorise a sum); with `widen`, values accumulate in 64 bits (as
    NumPy's sum and prod do). `repeat(value, count)` is the reduction of `count` copies of one
    value, where the simplifier may fold it."""

    name: str
    combine: str
    identity: Callable[[np.dtype], np.ndarray]
    reduce: Callable[..., np.ndarray]
    accumulate: Callable[..., np.ndarray]
    helper: str
    reassociate: bool = False
    widen: bool = False
    repeat: Callable[[np.ndarray, int], np.ndarray] | None = None

    def accumulator(self, dtype: Any) -> np.dtype:
        """The dtype partial results of values of `dtype` are held in."""
        dtype = np.dtype(dtype)
        if self.widen and dtype.kind == "f":
            return np.dtype(np.float64)
        if self.widen and dtype.kind in "iu":
            return np.dtype(np.int64) if dtype.kind == "i" else np.dtype(np.uint64)
        return dtype


def _extreme(largest: bool) -> Callable[[np.dtype], np.ndarray]:
    """The identity of max (largest=False: the smallest value) or of min."""

    def identity(dtype: np.dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        if dtype.kind == "f":
            return np.array(np.inf if largest else -np.inf, dtype)
        if dtype.kind == "b":
            return np.array(largest, dtype)
        info = np.iinfo(dtype)
        return np.array(info.max if largest else info.min, dtype)

    return identity


# NaN-propagating like np.maximum / np.minimum (Python's max(1.0, nan) is 1.0)
_PICK_MAX = "{0} if ({0} >= {1}) | ({0} != {0}) else {1}"
_PICK_MIN = "{0} if ({0} <= {1}) | ({0} != {0}) else {1}"

SUM = Monoid(
    "sum",
    "{0} + {1}",
    lambda dtype: np.zeros((), dtype),
    np.sum,
    np.cumsum,
    "add",
    reassociate=True,
    widen=True,
    repeat=lambda value, count: value * count,
)
PROD = Monoid(
    "prod",
    "{0} * {1}",
    lambda dtype: np.ones((), dtype),
    np.prod,
    np.cumprod,
    "mul",
    reassociate=True,
    widen=True,
)
MAX = Monoid("max", _PICK_MAX, _extreme(False), np.max, np.maximum.accumulate, "max")
MIN = Monoid("min", _PICK_MIN, _extreme(True), np.min, np.minimum.accumulate, "min")
#: every monoid by name (the name a fusion plan's reduction carries)
MONOIDS: dict[str, Monoid] = {m.name: m for m in (SUM, PROD, MAX, MIN)}


@dataclass(frozen=True, eq=False)
class Window:
    """One axis of a piece's index that must be checked: `base` read if 0 <= base < length. An
    unguarded window (the last piece of a concatenation) takes every index, clamped."""

    base: Any
    length: int
    guard: bool = True


@dataclass(frozen=True, eq=False)
class Piece:
    """Where a piecewise shape node reads one of its inputs: `axes` holds, per axis of that
    input, an index or a `Window`."""

    input: int
    axes: tuple


@dataclass(frozen=True, eq=False)
class IndexMap:
    """How a shape primitive's output index reads its input: what lets a loop compute it in
    place, with no copy.

    - `through(node, index, constant)`: the input index that output `index` reads (an affine
      map: each axis an index object with `.shifted(stride, offset)`, or `constant(offset)`);
    - `pieces(node, index)`: for piecewise nodes (unslice, concatenate), the `Piece`s in order
      of precedence; `zero_outside` says that an index no piece covers reads 0;
    - `inline(node)`: whether a loop may compute this node in place (default: always);
    - `strides(params, shape, strides, out_shape)`: the view of strided memory it makes
      (new strides and an offset in elements), or None where the input must be contiguous;
      None for primitives that are not views;
    - `general_view`: where a loop cannot compute it, it is still a view of its input (NumPy's
      reshape, which copies only a non-contiguous input);
    - `inverse`: the view primitive whose view of this node's output is its input (unslice:
      slice), so a backend makes it by filling zeros and copying through that view."""

    through: Callable | None = None
    pieces: Callable | None = None
    inline: Callable[[Any], bool] = lambda node: True
    strides: Callable | None = None
    view: bool = False
    general_view: bool = False
    zero_outside: bool = False
    inverse: str | None = None


#: The index map of a shape-kind primitive that is no index map: its indices are data (gather,
#: argsort) or it computes (the linalg factorisations). It runs as a step of its own everywhere.
OWN_STEP = IndexMap(inline=lambda node: False)


@dataclass(frozen=True, eq=False)
class Algebra:
    """Identities the simplifier may apply to a node of this primitive.

    - `neutral`: (operand, value) pairs: where that operand is a fill of `value`, the node is
      its other operand (x + 0, x * 1, 1 * x);
    - `absorbing`: (operand, value) pairs: where that operand is a fill of `value`, the node is
      that fill (the masked product ct_mul(0, d) is 0 even for an infinite d);
    - `involution`: applied twice, it is the identity (-(-x));
    - `moves_fill`: a fill in gives the same fill out (shape primitives that only move data;
      not unslice, which adds zeros, nor a sort, which makes indices);
    - `rewrite(node, fills, producers)`: anything else, a Var to replace the node by, an array
      to fold it into, or None."""

    neutral: tuple[tuple[int, float], ...] = ()
    absorbing: tuple[tuple[int, float], ...] = ()
    involution: bool = False
    moves_fill: bool = False
    rewrite: Callable | None = None


NO_ALGEBRA = Algebra()


@dataclass(frozen=True, eq=False)
class Pairing:
    """A primitive computed together with a partner on the same argument: `call(x)` (a math
    library function) returns (this, partner) at once, where the library has it."""

    partner: str
    call: str


@dataclass(frozen=True, eq=False)
class Primitive:
    name: str
    kind: Kind
    impl: Callable[..., np.ndarray]
    infer: Callable[[Shapes, Dtypes, dict], tuple[tuple[int, ...], np.dtype]]
    adjoint: Callable[..., tuple[Var | None, ...]] | None = None
    batch: Callable[..., Var] | None = None
    scalar: str | Callable[[Sequence[str], dict], str] | None = None
    differentiable: bool = True
    # A linear primitive maps a zero cotangent to zero; the simplifier may drop it then.
    linear: bool = False
    # Where the primitive is smooth: the range tests and fuzzers sample inputs from.
    domain: tuple[float, float] = (-2.0, 2.0)
    # An effectful node is kept even when nothing uses its value (a gradient hook).
    effectful: bool = False
    # The operand dtypes it is defined on: "number" (floats and integers), "bool" or "integer"
    # (integers and bools); tests sample operands of this kind.
    operands: str = "number"
    # How a compiled backend runs a node that is a step of its own: `run_compiled(node, compile)`
    # returns the function it calls (on host arrays), given `compile(graph)`, which compiles a
    # graph on that backend into a function from a list of arrays to a list of arrays. A
    # control-flow primitive (Kind.CONTROL) compiles the graphs it holds; scatter_add runs a
    # compiled host loop. None: the reference implementation `impl`.
    run_compiled: Callable[..., Callable] | None = None
    # Reductions: how values combine (see `Monoid`).
    monoid: Monoid | None = None
    # Shape primitives: how an output index reads the input (see `IndexMap`).
    index_map: IndexMap | None = None
    # Identities the simplifier applies (see `Algebra`).
    algebra: Algebra = NO_ALGEBRA
    # Elementwise primitives computed with a partner in one call (see `Pairing`).
    pairing: Pairing | None = None
    # The math-library function its scalar template calls (`M.asin` for arcsin), which
    # tracegrad.vmath implements under the primitive's name; set from the template.
    math_call: str | None = None

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


PRIMITIVES: dict[str, Primitive] = {}


def _register(prim: Primitive) -> Primitive:
    assert prim.name not in PRIMITIVES, prim.name
    PRIMITIVES[prim.name] = prim
    return prim


# ----------------------------------------------------------------------------------------------
# Emitting nodes


def emit(prim: Primitive, *inputs: Var, **params: Any) -> Var:
    """Append `prim(*inputs, **params)` to the graph being built and return its value."""
    return ir.current_builder().add(prim, inputs, params, ir.current_source())


def is_float(dtype: np.dtype) -> bool:
    return np.issubdtype(dtype, np.floating)


def float_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype NumPy gives a float function of this dtype (ints and bools give float64)."""
    return np.dtype(dtype) if is_float(dtype) else np.dtype(np.float64)


Operand = Var | float | int | bool


def const(value: Any, shape: tuple[int, ...] | None = None, dtype: Any = None) -> Var:
    """A literal. A 0-d value with a `shape` is a fill: one number broadcast over that shape."""
    value = np.asarray(value, dtype=dtype)
    if shape is None:
        shape = value.shape
    if value.shape not in ((), tuple(shape)):
        raise ValueError(f"const of shape {value.shape} cannot fill {shape}")
    if value.ndim == 0:
        value = value.copy()  # a private 0-d array: params are immutable
    else:
        value = np.array(value, copy=True)
        value.flags.writeable = False
    return emit(const_p, value=value, shape=tuple(int(d) for d in shape))


def zeros_like(v: Var) -> Var:
    return const(0, v.shape, v.dtype)


def _result_dtype(operands: Sequence[Operand]) -> np.dtype:
    # Python scalars are "weak" (NEP 50): float32 array * 2.0 stays float32.
    return np.result_type(*[v.dtype if isinstance(v, Var) else v for v in operands])


def broadcast_shapes(*shapes: tuple[int, ...], op: str = "operation") -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        shown = " and ".join(str(tuple(s)) for s in shapes)
        raise ShapeError(
            f"{op}: operands could not be broadcast together: shapes {shown}"
            f"{at(ir.current_source())}. Make the shapes agree, e.g. with reshape or "
            "np.expand_dims."
        ) from None


def convert(x: Var, dtype: Any) -> Var:
    dtype = np.dtype(dtype)
    return x if x.dtype == dtype else emit(convert_p, x, dtype=dtype)


def broadcast_to(x: Var, shape: tuple[int, ...]) -> Var:
    shape = tuple(shape)
    if x.shape == shape:
        return x
    broadcast_shapes(x.shape, shape, op="broadcast_to")
    if tuple(np.broadcast_shapes(x.shape, shape)) != shape:
        raise ShapeError(f"cannot broadcast shape {x.shape} to {shape}{at(ir.current_source())}")
    return emit(broadcast_to_p, x, shape=shape)


def _prepare(operands: Sequence[Operand], op: str, dtype: np.dtype | None = None) -> list[Var]:
    """Promote and broadcast operands to one dtype and shape, as explicit nodes."""
    dtype = _result_dtype(operands) if dtype is None else np.dtype(dtype)
    shape = broadcast_shapes(*[v.shape for v in operands if isinstance(v, Var)], op=op)
    out = []
    for v in operands:
        if isinstance(v, Var):
            out.append(broadcast_to(convert(v, dtype), shape))
        else:
            out.append(const(v, shape, dtype))
    return out


def _elementwise(prim: Primitive, *operands: Operand, dtype: Any = None) -> Var:
    return emit(prim, *_prepare(operands, prim.name, dtype))


def _float_unary(prim: Primitive, x: Var) -> Var:
    return emit(prim, convert(x, float_dtype(x.dtype)))


# Op constructors: NumPy semantics (promotion, broadcasting) on IR values.
def add(a: Operand, b: Operand) -> Var:
    if _result_dtype([a, b]) == np.bool_:  # NumPy: True + True is True (a logical or), not 2
        return logical(or_p, a, b)
    return _elementwise(add_p, a, b)


def sub(a: Operand, b: Operand) -> Var:
    return _elementwise(sub_p, a, b)


def mul(a: Operand, b: Operand) -> Var:
    return _elementwise(mul_p, a, b)


def div(a: Operand, b: Operand) -> Var:
    dtype = float_dtype(_result_dtype([a, b]))
    return _elementwise(div_p, a, b, dtype=dtype)


def power(a: Operand, b: Operand) -> Var:
    dtype = _result_dtype([a, b])
    integral = not isinstance(b, Var) and math.isfinite(b) and float(b) == int(b)
    if isinstance(a, Var) and integral and (abs(b) <= 64 or not is_float(dtype)):
        if not is_float(dtype) and b < 0:
            raise ValueError(
                f"Integers to negative integer powers are not allowed{at(ir.current_source())} "
                "(as in NumPy); convert to float with .astype(np.float64)"
            )
        return integer_pow(convert(a, dtype), int(b))
    if not is_float(dtype):
        raise TypeError(
            f"integer ** traced integer is not supported{at(ir.current_source())}; "
            "convert to float with .astype(np.float64)"
        )
    return _elementwise(pow_p, a, b)


def integer_pow(x: Var, n: int) -> Var:
    if n == 1:
        return x
    if not is_float(x.dtype) and n > 3:
        # integers: exact products by squaring (wrapping like NumPy); the primitive's kernel
        # template calls the float pow() beyond the cube
        half = integer_pow(x, n // 2)
        square = mul(half, half)
        return mul(square, x) if n % 2 else square
    return emit(integer_pow_p, x, n=int(n))


def ct_mul(ct: Var, d: Var) -> Var:
    """`ct * d`, but exactly 0 where `ct` is 0 (even if `d` is inf or nan there)."""
    return _elementwise(ct_mul_p, ct, d)


def neg(x: Var) -> Var:
    return emit(neg_p, x)


def reciprocal(x: Var) -> Var:
    return div(1.0, x)


def maximum(a: Operand, b: Operand) -> Var:
    return _elementwise(maximum_p, a, b)


def minimum(a: Operand, b: Operand) -> Var:
    return _elementwise(minimum_p, a, b)


def where(c: Operand, a: Operand, b: Operand) -> Var:
    dtype = _result_dtype([a, b])
    shape = broadcast_shapes(*[v.shape for v in (c, a, b) if isinstance(v, Var)], op="where")
    if isinstance(c, Var):
        cv = broadcast_to(c if c.dtype == np.bool_ else compare(ne_p, c, 0), shape)
    else:
        cv = const(bool(c), shape, np.bool_)
    a, b = _prepare([a, b], "where", dtype)
    return emit(where_p, cv, broadcast_to(a, shape), broadcast_to(b, shape))


def compare(prim: Primitive, a: Operand, b: Operand) -> Var:
    return emit(prim, *_prepare([a, b], prim.name))


def logical(prim: Primitive, *operands: Operand) -> Var:
    return emit(prim, *_prepare(operands, prim.name, np.bool_))


def unary(prim: Primitive, x: Var) -> Var:
    return _float_unary(prim, x)


def reduce(prim: Primitive, x: Var, axes: Sequence[int] | int | None, keepdims=False) -> Var:
    axes = normalize_axes(axes, x.ndim)
    if prim in (reduce_sum_p, reduce_prod_p) and x.dtype.kind in "biu" and x.dtype.itemsize < 8:
        # NumPy sums and multiplies small integers and bools in the platform integer
        x = convert(x, np.uint64 if x.dtype.kind == "u" else np.int64)
    if prim in (reduce_max_p, reduce_min_p) and any(x.shape[a] == 0 for a in axes):
        raise ValueError(
            f"zero-size array to reduction operation {prim.name} which has no identity"
            f"{at(ir.current_source())}"
        )
    out = emit(prim, x, axes=axes) if axes else x
    if keepdims:
        out = reshape(out, tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    return out


def cumulative(prim: Primitive, x: Var, axis: int) -> Var:
    """The running reduction of `x` along `axis` (a `Kind.SCAN` primitive: cumsum...)."""
    return emit(prim, x, axis=normalize_axes(axis, x.ndim)[0])


def reverse(x: Var, axis: int) -> Var:
    """`x` reversed along `axis` (a slice with step -1)."""
    n = x.shape[axis]
    if n <= 1:
        return x
    return slice_(
        x, tuple((n - 1, -1, -1) if a == axis else (0, d, 1) for a, d in enumerate(x.shape))
    )


def reduce_sum(x: Var, axes=None, keepdims=False) -> Var:
    return reduce(reduce_sum_p, x, axes, keepdims)


def normalize_axes(axes, ndim: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < ndim:  # NumPy's AxisError: a ValueError and an IndexError
            raise np.exceptions.AxisError(
                f"axis {a} is out of bounds for an array of dimension {ndim}"
                f"{at(ir.current_source())}"
            )
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"repeated axis in {tuple(axes)}{at(ir.current_source())}")
    return tuple(sorted(out))


def reshape(x: Var, shape: tuple[int, ...]) -> Var:
    shape = tuple(int(d) for d in shape)
    if shape == x.shape:
        return x
    return emit(reshape_p, x, shape=shape)


def transpose(x: Var, perm: Sequence[int] | None = None) -> Var:
    perm = tuple(reversed(range(x.ndim))) if perm is None else tuple(int(p) % x.ndim for p in perm)
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(
            f"axes {perm} are not a permutation of {x.ndim} axes{at(ir.current_source())}"
        )
    if perm == tuple(range(x.ndim)):
        return x
    return emit(transpose_p, x, perm=perm)


def swap_last(x: Var) -> Var:
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return transpose(x, perm)


def matmul(a: Var, b: Var) -> Var:
    """NumPy's matmul for 1-D and n-D operands, lowered to the batched 2-D primitive."""
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(
            f"matmul: operands must not be scalars (0-d){at(ir.current_source())}; use *"
        )
    dtype = _result_dtype([a, b])
    a, b = convert(a, dtype), convert(b, dtype)
    a2 = reshape(a, (1,) + a.shape) if a.ndim == 1 else a
    b2 = reshape(b, b.shape + (1,)) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ShapeError(
            f"matmul: inner dimensions differ: shapes {a.shape} and {b.shape} "
            f"({a2.shape[-1]} != {b2.shape[-2]}){at(ir.current_source())}"
        )
    batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2], op="matmul")
    a2 = broadcast_to(a2, batch + a2.shape[-2:])
    b2 = broadcast_to(b2, batch + b2.shape[-2:])
    out = matmul_(a2, b2)
    shape = batch + (a2.shape[-2],) * (a.ndim > 1) + (b2.shape[-1],) * (b.ndim > 1)
    return reshape(out, shape)


def slice_(x: Var, index: tuple[tuple[int, int, int], ...]) -> Var:
    """Basic slicing with normalised (start, stop, step) per axis."""
    if all(ix == (0, d, 1) for ix, d in zip(index, x.shape, strict=True)):
        return x
    return emit(slice_p, x, index=tuple(index))


def concatenate(xs: Sequence[Var], axis: int) -> Var:
    if len(xs) == 1:
        return xs[0]
    dtype = _result_dtype(xs)
    xs = [convert(x, dtype) for x in xs]
    return emit(concatenate_p, *xs, axis=axis)


# ----------------------------------------------------------------------------------------------
# Shape rules


def _same(shapes: Shapes, dtypes: Dtypes, params: dict, out_dtype=None):
    if len(set(shapes)) > 1:
        raise ir.IRError(f"elementwise operands must have one shape, got {shapes}")
    return shapes[0], (dtypes[-1] if out_dtype is None else np.dtype(out_dtype))


def _same_bool(shapes, dtypes, params):
    return _same(shapes, dtypes, params, np.bool_)


def _reduced(shapes, dtypes, params):
    axes = params["axes"]
    return tuple(d for i, d in enumerate(shapes[0]) if i not in axes), dtypes[0]


def _slice_len(start: int, stop: int, step: int) -> int:
    return len(range(start, stop, step))


# ----------------------------------------------------------------------------------------------
# Adjoint rules: rule(ct, out, *inputs, **params) -> one cotangent (or None) per input.


def _unary_rule(derivative: Callable[[Var, Var], Var]):
    return lambda ct, out, x: (ct_mul(ct, derivative(x, out)),)


def _sum_to(ct: Var, shape: tuple[int, ...]) -> Var:
    """The adjoint of broadcasting `shape` up to `ct.shape`: sum over the broadcast axes."""
    lead = ct.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and ct.shape[lead + i] != 1
    )
    return reshape(reduce_sum(ct, axes), shape)


def _keepdims_shape(x_shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(x_shape))


def _expand_reduced(v: Var, x: Var, axes) -> Var:
    return broadcast_to(reshape(v, _keepdims_shape(x.shape, axes)), x.shape)


def _extremum_rule(ct, out, x, axes):
    hit = compare(eq_p, x, _expand_reduced(out, x, axes))
    count = reduce_sum(convert(hit, x.dtype), axes)
    share = div(ct, count)
    return (where(hit, _expand_reduced(share, x, axes), 0.0),)


def _prod_rule(ct, out, x, axes):
    """d prod / d x_i is the product of the other elements, exact where some are zero (prod / x_i
    would be 0/0). The reduced elements are multiplied pairwise in a tree (padded with ones to a
    power of two) and the cotangent is passed back down it, each level a `ct_mul` by the other
    half: only products, so every derivative of this rule is exact at zeros too."""
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    kept_shape = tuple(x.shape[i] for i in kept)
    moved = transpose(x, kept + tuple(axes))
    n = int(np.prod([x.shape[i] for i in axes], dtype=np.int64))
    if n == 0:
        return (zeros_like(x),)
    flat = reshape(moved, kept_shape + (n,))
    width = 1 << (n - 1).bit_length()
    if width > n:
        flat = concatenate([flat, const(1, kept_shape + (width - n,), x.dtype)], len(kept))

    def half(v: Var, k: int) -> Var:
        h = v.shape[-1] // 2
        return slice_(v, tuple((0, d, 1) for d in kept_shape) + ((k * h, (k + 1) * h, 1),))

    levels = [flat]
    while levels[-1].shape[-1] > 1:
        levels.append(mul(half(levels[-1], 0), half(levels[-1], 1)))
    c = reshape(ct, kept_shape + (1,))
    for level in reversed(levels[:-1]):
        c = concatenate([ct_mul(c, half(level, 1)), ct_mul(c, half(level, 0))], len(kept))
    if width > n:
        c = slice_(c, tuple((0, d, 1) for d in kept_shape) + ((0, n, 1),))
    c = reshape(c, moved.shape)
    return (transpose(c, tuple(np.argsort(kept + tuple(axes)))),)


def _extremum_binary(pick: Primitive):
    def rule(ct, out, a, b):
        win_a, tie = compare(pick, a, b), compare(eq_p, a, b)
        half = mul(ct, 0.5)
        ct_a = where(win_a, ct, where(tie, half, 0.0))
        ct_b = where(win_a, 0.0, where(tie, half, ct))
        return ct_a, ct_b

    return rule


def _pow_rule(ct, out, a, b):
    ct_a = ct_mul(ct, mul(b, emit(pow_p, a, sub(b, 1.0))))
    # out * log(a) is 0 * -inf at a = 0; its limit (b > 0) is 0.
    ct_b = ct_mul(ct, where(compare(eq_p, out, 0.0), 0.0, mul(out, unary(log_p, a))))
    return ct_a, ct_b


def _integer_pow_rule(ct, out, x, n):
    if n == 0:
        return (None,)
    return (ct_mul(ct, mul(integer_pow(x, n - 1), float(n))),)


def _broadcast_rule(ct, out, x, shape):
    return (_sum_to(ct, x.shape),)


def _slice_rule(ct, out, x, index):
    return (emit(unslice_p, ct, shape=x.shape, index=index),)


def _unslice_rule(ct, out, x, shape, index):
    return (slice_(ct, index),)


def _concatenate_rule(ct, out, *xs, axis):
    cts, start = [], 0
    for x in xs:
        index = tuple(
            (start, start + x.shape[axis], 1) if i == axis else (0, d, 1)
            for i, d in enumerate(out.shape)
        )
        cts.append(slice_(ct, index))
        start += x.shape[axis]
    return tuple(cts)


def _convert_rule(ct, out, x, dtype):
    return (convert(ct, x.dtype) if is_float(x.dtype) else None,)


def _custom_grad_rule(ct, out, *inputs, bwd: ir.Graph, n_args: int):
    """Cotangents of the primal arguments come from the user's traced `bwd(residuals, ct)`."""
    residuals = inputs[n_args:-1]
    cts = ir.inline(ir.current_builder(), bwd, [*residuals, ct])
    # the residuals and the forward value get no cotangent through this node
    return tuple(cts) + (None,) * (len(inputs) - n_args)


# ----------------------------------------------------------------------------------------------
# Batching rules: batch(size, inputs, batched, **params) -> output with a leading batch axis.


def _batched(x: Var, is_batched: bool, size: int) -> Var:
    return x if is_batched else broadcast_to(reshape(x, (1,) + x.shape), (size,) + x.shape)


def batch_every_operand(prim: Primitive, graph_param: str | None = None):
    """The batching rule that broadcasts every unbatched operand and applies `prim` to the batch
    (elementwise primitives; stacked-matrix ones). With `graph_param`, the graph the node holds
    under that name (a custom rule, a checkpointed function) is batched with it."""

    def rule(size, inputs, batched, **params):
        xs = [_batched(x, b, size) for x, b in zip(inputs, batched, strict=True)]
        if graph_param is not None:
            params = {**params, graph_param: batch_graph(params[graph_param], size)}
        return emit(prim, *xs, **params)

    return rule


def _batch_reduce(prim: Primitive):
    return lambda size, inputs, batched, axes: emit(
        prim, inputs[0], axes=tuple(a + 1 for a in axes)
    )


def _batch_broadcast(size, inputs, batched, shape):
    (x,) = inputs
    lead = len(shape) - (x.ndim - 1)
    x = reshape(x, (size,) + (1,) * lead + x.shape[1:])
    return broadcast_to(x, (size,) + tuple(shape))


def _batch_matmul(size, inputs, batched):
    """One product for the whole batch. With one operand batched, the batch axis is folded into
    its rows (a) or columns (b): one larger matrix product, never `size` copies of the other."""
    (a, b), (ba, bb) = inputs, batched
    if ba and bb:
        return matmul_(a, b)
    if ba:  # a: (B, *lead, m, k) and b: (*lead, k, n)
        lead, (m, k), n = b.shape[:-2], a.shape[-2:], b.shape[-1]
        nl = len(lead)
        rows = reshape(transpose(a, (*range(1, nl + 1), 0, nl + 1, nl + 2)), (*lead, size * m, k))
        out = reshape(matmul_(rows, b), (*lead, size, m, n))
        return transpose(out, (nl, *range(nl), nl + 1, nl + 2))
    # b: (B, *lead, k, n) and a: (*lead, m, k)
    lead, m, (k, n) = a.shape[:-2], a.shape[-2], b.shape[-2:]
    nl = len(lead)
    cols = reshape(transpose(b, (*range(1, nl + 1), nl + 1, 0, nl + 2)), (*lead, k, size * n))
    out = reshape(matmul_(a, cols), (*lead, m, size, n))
    return transpose(out, (nl + 1, *range(nl), nl, nl + 2))


def _batch_concatenate(size, inputs, batched, axis):
    xs = [_batched(x, b, size) for x, b in zip(inputs, batched, strict=True)]
    return emit(concatenate_p, *xs, axis=axis + 1)


def batch_inline(graph: ir.Graph, args: Sequence[Var], batched: Sequence[bool], size: int):
    """Emit `graph` into the current builder with a leading batch axis of `size` on some inputs.

    Returns the output values and, for each, whether it carries the batch axis.
    """
    builder = ir.current_builder()
    env: dict[Var, tuple[Var, bool]] = {
        v: (a, b) for v, a, b in zip(graph.inputs, args, batched, strict=True)
    }
    for node in graph.nodes:
        inputs = [env[v] for v in node.inputs]
        flags = tuple(b for _, b in inputs)
        values = tuple(v for v, _ in inputs)
        with ir.source_location(node.source):
            if any(flags):
                env[node.out] = (node.prim.batch(size, values, flags, **node.params), True)
            else:
                env[node.out] = (builder.add(node.prim, values, node.params, node.source), False)
    return [env[v] for v in graph.outputs]


def batch_graph(graph: ir.Graph, size: int) -> ir.Graph:
    """`graph` with a leading batch axis of `size` on every input and every output (the graph a
    node holds, such as a custom rule, when the node itself is batched)."""
    builder = ir.Builder()
    for v in graph.inputs:
        builder.new_input((size,) + v.shape, v.dtype)
    with ir.building(builder):
        outs = batch_inline(graph, builder.inputs, [True] * len(graph.inputs), size)
        outputs = [_batched(v, b, size) for v, b in outs]
    return builder.graph(outputs)


# ----------------------------------------------------------------------------------------------
# Scalar templates. `M.f(...)` is a math-library call; each code generator renders it.


def _integer_pow_scalar(args, params):
    # x*x is correctly rounded, x*x*x within 1.2 ulp and 1/x correctly rounded; any other power
    # calls pow() with a float exponent (within 1 ulp, like NumPy's power, and no intermediate
    # overflow or underflow: 1e155 ** -2 is 1e-310). An integer exponent would make Numba
    # multiply repeatedly (48 ulp at n = 64). Integer x only reaches here with n <= 3.
    x, n = args[0], params["n"]
    if n == 0:
        return f"({x} ** 0)"
    if 0 < n <= 3:
        return "(" + " * ".join([x] * n) + ")"
    if n == -1:
        return f"(1 / {x})"
    return f"M.pow({x}, {float(n)!r})"


def _convert_scalar(args, params):
    dtype = np.dtype(params["dtype"])
    if dtype == np.bool_:
        return f"({args[0]} != 0)"
    return f"np.{dtype.name}({args[0]})"


# ----------------------------------------------------------------------------------------------
# The table


_ONE_CALL = re.compile(r"M\.(\w+)\(\{0\}(, \{1\})?\)")


def _ew(
    name,
    impl,
    adjoint=None,
    scalar=None,
    infer=_same,
    differentiable=True,
    linear=False,
    domain=(-2.0, 2.0),
    algebra=NO_ALGEBRA,
    pairing=None,
):
    call = _ONE_CALL.fullmatch(scalar) if isinstance(scalar, str) else None
    prim = Primitive(
        name,
        Kind.ELEMENTWISE,
        impl,
        infer,
        adjoint,
        None,
        scalar,
        differentiable,
        linear,
        domain,
        algebra=algebra,
        pairing=pairing,
        math_call=call.group(1) if call else None,
    )
    object.__setattr__(prim, "batch", batch_every_operand(prim))
    return _register(prim)


def math_names() -> dict[str, str]:
    """Math-library names whose vectorised version (tracegrad.vmath) is named otherwise: the
    primitive's name (asin -> arcsin)."""
    return {
        p.math_call: p.name
        for p in PRIMITIVES.values()
        if p.math_call is not None and p.math_call != p.name
    }


const_p = _register(
    Primitive(
        "const",
        Kind.CONST,
        impl=lambda value, shape: np.broadcast_to(value, shape),
        infer=lambda shapes, dtypes, p: (tuple(p["shape"]), p["value"].dtype),
        differentiable=False,
    )
)

neg_p = _ew(
    "neg",
    np.negative,
    lambda ct, out, x: (neg(ct),),
    "(-{0})",
    linear=True,
    algebra=Algebra(involution=True),
)
add_p = _ew(
    "add",
    np.add,
    lambda ct, out, a, b: (ct, ct),
    "({0} + {1})",
    linear=True,
    algebra=Algebra(neutral=((1, 0), (0, 0))),
)
sub_p = _ew(
    "sub",
    np.subtract,
    lambda ct, out, a, b: (ct, neg(ct)),
    "({0} - {1})",
    linear=True,
    algebra=Algebra(neutral=((1, 0),)),
)
mul_p = _ew(
    "mul",
    np.multiply,
    lambda ct, out, a, b: (ct_mul(ct, b), ct_mul(ct, a)),
    "({0} * {1})",
    algebra=Algebra(neutral=((1, 1), (0, 1))),
)
div_p = _ew(
    "div",
    np.true_divide,
    lambda ct, out, a, b: (ct_mul(ct, reciprocal(b)), ct_mul(ct, neg(div(out, b)))),
    "({0} / {1})",
    domain=(0.5, 2.0),
    algebra=Algebra(neutral=((1, 1),)),
)
pow_p = _ew("pow", np.power, _pow_rule, "({0} ** {1})", domain=(0.5, 2.0))
integer_pow_p = _ew(
    "integer_pow",
    lambda x, n: np.power(x, n) if n >= 0 else np.power(x, float(n)).astype(x.dtype),
    _integer_pow_rule,
    _integer_pow_scalar,
    # x**0 is 1, even for nan and inf (as in NumPy)
    algebra=Algebra(
        rewrite=lambda node, fills, producers: (
            np.ones((), node.out.dtype) if node.params["n"] == 0 else None
        )
    ),
)
ct_mul_p = _ew(
    "ct_mul",
    lambda ct, d: np.where(ct == 0, ct, ct * d),
    # d(out)/d(d) is ct, itself 0 where masked: mask that term on ct, not on g.
    lambda g, out, ct, d: (ct_mul(g, d), ct_mul(ct, g)),
    "({0} * {1} if {0} != 0 else {0})",
    algebra=Algebra(absorbing=((0, 0),), neutral=((1, 1), (0, 1))),
)
maximum_p = _ew("maximum", np.maximum, None, f"({_PICK_MAX})")
minimum_p = _ew("minimum", np.minimum, None, f"({_PICK_MIN})")

exp_p = _ew("exp", np.exp, _unary_rule(lambda x, out: out), "M.exp({0})")
expm1_p = _ew("expm1", np.expm1, _unary_rule(lambda x, out: add(out, 1.0)), "M.expm1({0})")
log_p = _ew(
    "log", np.log, _unary_rule(lambda x, out: reciprocal(x)), "M.log({0})", domain=(0.2, 3.0)
)
log1p_p = _ew(
    "log1p",
    np.log1p,
    _unary_rule(lambda x, out: reciprocal(add(x, 1.0))),
    "M.log1p({0})",
    domain=(-0.5, 2.0),
)
sqrt_p = _ew(
    "sqrt", np.sqrt, _unary_rule(lambda x, out: div(0.5, out)), "M.sqrt({0})", domain=(0.2, 3.0)
)
sin_p = _ew(
    "sin",
    np.sin,
    _unary_rule(lambda x, out: unary(cos_p, x)),
    "M.sin({0})",
    pairing=Pairing("cos", "sincos"),
)
cos_p = _ew("cos", np.cos, _unary_rule(lambda x, out: neg(unary(sin_p, x))), "M.cos({0})")
tan_p = _ew(
    "tan",
    np.tan,
    _unary_rule(lambda x, out: add(mul(out, out), 1.0)),
    "M.tan({0})",
    domain=(-1.2, 1.2),
)
arcsin_p = _ew(
    "arcsin",
    np.arcsin,
    _unary_rule(lambda x, out: reciprocal(unary(sqrt_p, sub(1.0, mul(x, x))))),
    "M.asin({0})",
    domain=(-0.9, 0.9),
)
arccos_p = _ew(
    "arccos",
    np.arccos,
    _unary_rule(lambda x, out: neg(reciprocal(unary(sqrt_p, sub(1.0, mul(x, x)))))),
    "M.acos({0})",
    domain=(-0.9, 0.9),
)
arctan_p = _ew(
    "arctan", np.arctan, _unary_rule(lambda x, out: reciprocal(add(mul(x, x), 1.0))), "M.atan({0})"
)
sinh_p = _ew("sinh", np.sinh, _unary_rule(lambda x, out: unary(cosh_p, x)), "M.sinh({0})")
cosh_p = _ew("cosh", np.cosh, _unary_rule(lambda x, out: unary(sinh_p, x)), "M.cosh({0})")
tanh_p = _ew("tanh", np.tanh, _unary_rule(lambda x, out: sub(1.0, mul(out, out))), "M.tanh({0})")
# ---- Base-2 and base-10 logs and powers, softplus and sigmoid (one block; docs/limitations.md)
# As exact as NumPy's: log2 and exp2 at powers of two, log10 at powers of ten (kernels call
# tracegrad.vmath's versions, or libm's). Their derivatives are written with primitives, so every
# order exists.


# math.exp2 is Python 3.11's (and what numba.cuda lowers); before it, pow(2, x)
_EXP2_SCALAR = "M.exp2({0})" if hasattr(math, "exp2") else "M.pow(2.0, {0})"


def _sigmoid_impl(x):
    e = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def _softplus_impl(x):
    # log(1 + e**x) without overflow; its limits: 0 at -inf, x at +inf
    return (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))).astype(x.dtype, copy=False)


log2_p = _ew(
    "log2",
    np.log2,
    _unary_rule(lambda x, out: div(1 / math.log(2.0), x)),
    "M.log2({0})",
    domain=(0.2, 3.0),
)
log10_p = _ew(
    "log10",
    np.log10,
    _unary_rule(lambda x, out: div(1 / math.log(10.0), x)),
    "M.log10({0})",
    domain=(0.2, 3.0),
)
exp2_p = _ew("exp2", np.exp2, _unary_rule(lambda x, out: mul(out, math.log(2.0))), _EXP2_SCALAR)
# sigmoid(x) = 1 / (1 + e**-x); its derivative sigmoid(x) * sigmoid(-x) is 1 - sigmoid(x) without
# the cancellation for large x.
sigmoid_p = _ew(
    "sigmoid",
    _sigmoid_impl,
    _unary_rule(lambda x, out: mul(out, unary(sigmoid_p, neg(x)))),
    "((1.0 if {0} >= 0 else M.exp(-abs({0}))) / (1.0 + M.exp(-abs({0}))))",
)
# softplus(x) = log(1 + e**x), smooth everywhere (the simplifier rewrites the stable idioms
# max(x, 0) + log1p(exp(-|x|)) and friends to it, see passes.smooth_idioms).
softplus_p = _ew(
    "softplus",
    _softplus_impl,
    _unary_rule(lambda x, out: unary(sigmoid_p, x)),
    "(({0} if {0} > 0 else 0.0) + M.log1p(M.exp(-abs({0}))))",
)

# ---- Inverse hyperbolic functions, arctan2, hypot, cbrt, copysign (one block; NumPy's names)
arcsinh_p = _ew(
    "arcsinh",
    np.arcsinh,
    _unary_rule(lambda x, out: reciprocal(unary(sqrt_p, add(mul(x, x), 1.0)))),
    "np.arcsinh({0})",
)
arccosh_p = _ew(
    "arccosh",
    np.arccosh,
    _unary_rule(lambda x, out: reciprocal(unary(sqrt_p, sub(mul(x, x), 1.0)))),
    "np.arccosh({0})",
    domain=(1.2, 3.0),
)
arctanh_p = _ew(
    "arctanh",
    np.arctanh,
    _unary_rule(lambda x, out: reciprocal(sub(1.0, mul(x, x)))),
    "np.arctanh({0})",
    domain=(-0.9, 0.9),
)
# cbrt' = 1 / (3 cbrt(x)^2): infinite at 0, like the function's slope
cbrt_p = _ew(
    "cbrt",
    np.cbrt,
    _unary_rule(lambda x, out: div(1.0 / 3.0, mul(out, out))),
    "M.cbrt({0})",
    domain=(0.2, 3.0),
)


def _arctan2_rule(ct, out, y, x):
    r2 = add(mul(x, x), mul(y, y))
    return ct_mul(ct, div(x, r2)), ct_mul(ct, neg(div(y, r2)))


arctan2_p = _ew("arctan2", np.arctan2, _arctan2_rule, "M.atan2({0}, {1})", domain=(0.5, 2.0))
hypot_p = _ew(
    "hypot",
    np.hypot,
    lambda ct, out, a, b: (ct_mul(ct, div(a, out)), ct_mul(ct, div(b, out))),
    "M.hypot({0}, {1})",
    domain=(0.5, 2.0),
)
# copysign(a, b) = |a| sign(b): slope sign(a) sign(b) in a (as |a|'s, 0 at a = 0), none in b
copysign_p = _ew(
    "copysign",
    np.copysign,
    lambda ct, out, a, b: (
        ct_mul(ct, mul(emit(sign_p, a), emit(copysign_p, ones_like(b), b))),
        None,
    ),
    "np.copysign({0}, {1})",
)
# ---- The error function (scipy.special.erf / erfc, and the normal distribution built on them)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
erf_p = _ew(
    "erf",
    lambda x: _special("erf")(x),
    _unary_rule(lambda x, out: mul(unary(exp_p, neg(mul(x, x))), _TWO_OVER_SQRT_PI)),
    "M.erf({0})",
)
erfc_p = _ew(
    "erfc",
    lambda x: _special("erfc")(x),
    _unary_rule(lambda x, out: mul(unary(exp_p, neg(mul(x, x))), -_TWO_OVER_SQRT_PI)),
    "M.erfc({0})",
)


def _special(name: str, math_name: str | None = None):
    """scipy.special's ufunc, or math's function vectorised when SciPy is not installed (the
    reference implementation must not need an optional dependency)."""
    try:
        import scipy.special

        return getattr(scipy.special, name)
    except ImportError:
        scalar = getattr(math, math_name or name)
        return lambda x: np.vectorize(scalar, otypes=[x.dtype])(x) if x.size else x.copy()


# ---- log|Gamma| and its derivatives (scipy.special.gammaln, digamma). gammaln is a primitive whose
# kernels call libm's lgamma; digamma (its derivative) is a composition of primitives: the
# recurrence psi(x) = psi(x + 8) - sum_k 1 / (x + k) and the asymptotic series at x + 8 >= 8.5
# (truncation error below 1e-14), reflected below 1/2 (psi(x) = psi(1 - x) - pi / tan(pi x)). Being
# primitives all the way down, its derivatives (the polygamma functions) exist at every order and
# the whole function fuses into the loop that uses it.
_DIGAMMA_SHIFT = 8
# the asymptotic series' coefficients of y**-2k: B_2k / (2k)
_DIGAMMA_SERIES = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760)


def digamma(x: Var) -> Var:
    """psi(x) = d/dx log|Gamma(x)|, as one fusable chain of elementwise primitives."""
    x = convert(x, float_dtype(x.dtype))
    reflect = compare(lt_p, x, 0.5)
    z = where(reflect, sub(1.0, x), x)
    shift = None
    for k in range(_DIGAMMA_SHIFT):
        term = div(1.0, add(z, float(k)) if k else z)
        shift = term if shift is None else add(shift, term)
    y = add(z, float(_DIGAMMA_SHIFT))
    inv2 = div(1.0, mul(y, y))
    series = None
    for c in reversed(_DIGAMMA_SERIES):  # Horner in y**-2
        series = const(c, inv2.shape, inv2.dtype) if series is None else add(series, c)
        series = mul(series, inv2)
    psi = sub(sub(sub(unary(log_p, y), div(0.5, y)), series), shift)
    # pi / tan(pi x) only where reflected (elsewhere tan is evaluated at a harmless 1/4)
    t = unary(tan_p, mul(where(reflect, x, 0.25), math.pi))
    return where(reflect, sub(psi, div(math.pi, t)), psi)


gammaln_p = _ew(
    "gammaln",
    lambda x: _special("gammaln", "lgamma")(x),
    _unary_rule(lambda x, out: digamma(x)),
    "M.lgamma({0})",
    domain=(0.5, 4.0),
)


# ---- Rounding, NumPy's floor division and remainders: piecewise constant or linear. Rounding has
# a zero derivative (as JAX and PyTorch give); a - (a // b) b has slopes 1 and -(a // b).
floor_p = _ew("floor", np.floor, lambda ct, out, x: (None,), "np.floor({0})", differentiable=False)
ceil_p = _ew("ceil", np.ceil, lambda ct, out, x: (None,), "np.ceil({0})", differentiable=False)
trunc_p = _ew("trunc", np.trunc, lambda ct, out, x: (None,), "np.trunc({0})", differentiable=False)
rint_p = _ew("rint", np.rint, lambda ct, out, x: (None,), "np.rint({0})", differentiable=False)
floor_divide_p = _ew("floor_divide", np.floor_divide, None, "({0} // {1})", differentiable=False)
mod_p = _ew(
    "mod",
    np.mod,
    lambda ct, out, a, b: (ct, ct_mul(ct, neg(emit(floor_divide_p, a, b)))),
    "({0} % {1})",
    domain=(0.5, 2.0),
)
fmod_p = _ew(
    "fmod",
    np.fmod,
    lambda ct, out, a, b: (ct, ct_mul(ct, neg(emit(trunc_p, div(a, b))))),
    "np.fmod({0}, {1})",
    domain=(0.5, 2.0),
)
isfinite_p = _ew(
    "isfinite", np.isfinite, scalar="np.isfinite({0})", infer=_same_bool, differentiable=False
)
isnan_p = _ew("isnan", np.isnan, scalar="np.isnan({0})", infer=_same_bool, differentiable=False)
isinf_p = _ew("isinf", np.isinf, scalar="np.isinf({0})", infer=_same_bool, differentiable=False)
signbit_p = _ew(
    "signbit", np.signbit, scalar="np.signbit({0})", infer=_same_bool, differentiable=False
)


def ones_like(v: Var) -> Var:
    return const(1, v.shape, v.dtype)


abs_p = _ew("abs", np.abs, _unary_rule(lambda x, out: emit(sign_p, x)), "abs({0})")
sign_p = _ew("sign", np.sign, lambda ct, out, x: (None,), "np.sign({0})")

where_p = _ew(
    "where",
    np.where,
    lambda ct, out, c, a, b: (None, where(c, ct, 0.0), where(c, 0.0, ct)),
    "({1} if {0} else {2})",
    # a known condition picks its operand
    algebra=Algebra(
        rewrite=lambda node, fills, producers: (
            None if fills[0] is None else node.inputs[1 if bool(fills[0]) else 2]
        )
    ),
)
convert_p = _ew(
    "convert",
    lambda x, dtype: x.astype(dtype),
    _convert_rule,
    _convert_scalar,
    infer=lambda shapes, dtypes, p: (shapes[0], np.dtype(p["dtype"])),
    linear=True,
)

# named: a value under a user's name (the cotangent at a tg.tap). It computes nothing; it exists so
# that the name reaches the printed graph and the generated kernels, where the value is an output.
named_p = _ew("named", lambda x, name: x, lambda ct, out, x, name: (ct,), "{0}", linear=True)

lt_p = _ew("lt", np.less, scalar="({0} < {1})", infer=_same_bool, differentiable=False)
le_p = _ew("le", np.less_equal, scalar="({0} <= {1})", infer=_same_bool, differentiable=False)
gt_p = _ew("gt", np.greater, scalar="({0} > {1})", infer=_same_bool, differentiable=False)
ge_p = _ew("ge", np.greater_equal, scalar="({0} >= {1})", infer=_same_bool, differentiable=False)
eq_p = _ew("eq", np.equal, scalar="({0} == {1})", infer=_same_bool, differentiable=False)
ne_p = _ew("ne", np.not_equal, scalar="({0} != {1})", infer=_same_bool, differentiable=False)
and_p = _ew("and", np.logical_and, scalar="({0} and {1})", infer=_same_bool, differentiable=False)
or_p = _ew("or", np.logical_or, scalar="({0} or {1})", infer=_same_bool, differentiable=False)
not_p = _ew("not", np.logical_not, scalar="(not {0})", infer=_same_bool, differentiable=False)
for _p in (and_p, or_p, not_p):
    object.__setattr__(_p, "operands", "bool")

# Bitwise operations on integers (& | ^ ~ and np.bitwise_*): the result keeps the operands' dtype.
# On bools NumPy's bitwise ops are the logical ones; the op constructors route bools to and/or/not.
bitwise_and_p = _ew("bitwise_and", np.bitwise_and, scalar="({0} & {1})", differentiable=False)
bitwise_or_p = _ew("bitwise_or", np.bitwise_or, scalar="({0} | {1})", differentiable=False)
bitwise_xor_p = _ew("bitwise_xor", np.bitwise_xor, scalar="({0} ^ {1})", differentiable=False)
invert_p = _ew("invert", np.invert, scalar="(~{0})", differentiable=False)
for _p in (bitwise_and_p, bitwise_or_p, bitwise_xor_p, invert_p):
    object.__setattr__(_p, "operands", "integer")

# the same operation on bools: NumPy's bitwise ops are the logical ones there
_ON_BOOLS = {bitwise_and_p: and_p, bitwise_or_p: or_p, bitwise_xor_p: ne_p, invert_p: not_p}


def bitwise(prim: Primitive, *operands: Operand) -> Var:
    """NumPy's bitwise ufunc `prim` (and, or, xor, invert) on integers, its logical twin on bools."""
    dtype = _result_dtype(operands)
    if dtype == np.bool_:
        return emit(_ON_BOOLS[prim], *_prepare(operands, prim.name, np.bool_))
    if dtype.kind not in "iu":
        raise TypeError(
            f"np.{prim.name} is defined on integers and bools, not on {dtype}"
            f"{at(ir.current_source())}; compare first (x > 0) or convert with .astype(np.int64)"
        )
    return _elementwise(prim, *operands, dtype=dtype)


object.__setattr__(maximum_p, "adjoint", _extremum_binary(gt_p))
object.__setattr__(minimum_p, "adjoint", _extremum_binary(lt_p))


def _identity(name, adjoint, batch, differentiable=True, effectful=False):
    return _register(
        Primitive(
            name,
            Kind.IDENTITY,
            impl=lambda *xs, **params: xs[-1],
            infer=lambda shapes, dtypes, p: (shapes[-1], dtypes[-1]),
            adjoint=adjoint,
            batch=batch,
            differentiable=differentiable,
            effectful=effectful,
        )
    )


stop_gradient_p = _identity(
    "stop_gradient",
    lambda ct, out, x: (None,),
    lambda size, inputs, batched: emit(stop_gradient_p, inputs[0]),
)
custom_grad_p = _identity("custom_grad", _custom_grad_rule, None)
# every operand batched, and the user's rule batched with them
object.__setattr__(custom_grad_p, "batch", batch_every_operand(custom_grad_p, "bwd"))
# tap: a named intermediate value (tg.tap). The differentiation that owns it reports the cotangent
# flowing into it, then lowers it; the cotangent passes through unchanged.
tap_p = _identity(
    "tap",
    lambda ct, out, x, name, hook: (ct,),
    lambda size, inputs, batched, name, hook: emit(tap_p, inputs[0], name=name, hook=hook),
)
# hook: after the program runs, `hook(name, *values)` is called on the host with its inputs' values
# (one for a tg.tap hook; any number for tg.debug_print).
hook_p = _identity(
    "hook",
    None,
    lambda size, inputs, batched, name, hook: emit(hook_p, *inputs, name=name, hook=hook),
    differentiable=False,
    effectful=True,
)


def _reduction(name, monoid: Monoid, adjoint, linear=False):
    prim = Primitive(
        name,
        Kind.REDUCE,
        lambda x, axes: monoid.reduce(x, axis=axes),
        _reduced,
        adjoint,
        None,
        None,
        True,
        linear,
        monoid=monoid,
    )
    object.__setattr__(prim, "batch", _batch_reduce(prim))
    return _register(prim)


reduce_sum_p = _reduction(
    "reduce_sum", SUM, lambda ct, out, x, axes: (_expand_reduced(ct, x, axes),), linear=True
)
reduce_max_p = _reduction("reduce_max", MAX, _extremum_rule)
reduce_min_p = _reduction("reduce_min", MIN, _extremum_rule)
reduce_prod_p = _reduction("reduce_prod", PROD, _prod_rule)


def _scan_prim(name, monoid: Monoid, adjoint, linear=False):
    """A running reduction along `axis`: each output element combines the input elements up to
    it (its fused kernels come from the monoid; see fusion's `Scan`)."""
    prim = Primitive(
        name,
        Kind.SCAN,
        lambda x, axis: monoid.accumulate(x, axis=axis),
        lambda shapes, dtypes, p: (shapes[0], dtypes[0]),
        adjoint,
        None,
        None,
        True,
        linear,
        monoid=monoid,
    )
    object.__setattr__(
        prim, "batch", lambda size, inputs, batched, axis: emit(prim, inputs[0], axis=axis + 1)
    )
    return _register(prim)


# the adjoint of a running sum is the running sum from the other end
cumsum_p = _scan_prim(
    "cumsum",
    SUM,
    lambda ct, out, x, axis: (reverse(cumulative(cumsum_p, reverse(ct, axis), axis), axis),),
    linear=True,
)


def _matmul_infer(shapes, dtypes, params):
    a, b = shapes
    if a[:-2] != b[:-2] or a[-1] != b[-2] or len(a) < 2:
        raise ir.IRError(f"matmul of {a} and {b}")
    return a[:-1] + b[-1:], dtypes[0]


matmul_p = _register(
    Primitive(
        "matmul",
        Kind.MATMUL,
        impl=np.matmul,
        infer=_matmul_infer,
        adjoint=lambda ct, out, a, b: (matmul_(ct, swap_last(b)), matmul_(swap_last(a), ct)),
        batch=_batch_matmul,
    )
)


def matmul_(a: Var, b: Var) -> Var:
    """The batched 2-D product (a contraction over one element becomes an elementwise product
    in passes.simplify)."""
    return emit(matmul_p, a, b)


def _shape_prim(name, impl, infer, adjoint, batch, index_map, algebra=NO_ALGEBRA):
    return _register(
        Primitive(
            name,
            Kind.SHAPE,
            impl,
            infer,
            adjoint,
            batch,
            linear=True,
            index_map=index_map,
            algebra=algebra,
        )
    )


# ---- Index maps: the input index an output index reads (see `IndexMap`)


def _broadcast_through(node, index, constant):
    x = node.inputs[0]
    lead = len(node.out.shape) - x.ndim
    return tuple(constant(0) if x.shape[j] == 1 else index[lead + j] for j in range(x.ndim))


def _broadcast_strides(params, shape, strides, out_shape):
    lead = len(out_shape) - len(shape)
    return (0,) * lead + tuple(
        0 if d == 1 and out_shape[lead + i] != 1 else s
        for i, (d, s) in enumerate(zip(shape, strides, strict=True))
    ), 0


def _transpose_through(node, index, constant):
    out = [None] * node.inputs[0].ndim
    for k, j in enumerate(node.params["perm"]):
        out[j] = index[k]
    return tuple(out)


def _slice_through(node, index, constant):
    return tuple(
        constant(0) if n == 1 else ix.shifted(step, start)
        for ix, (start, _, step), n in zip(
            index, node.params["index"], node.inputs[0].shape, strict=True
        )
    )


def _slice_strides(params, shape, strides, out_shape):
    offset, new = 0, []
    for (start, _stop, step), s, n in zip(params["index"], strides, out_shape, strict=True):
        if n:
            offset += start * s
        new.append(s * step)
    return tuple(new), offset


def _reshape_through(node, index, constant):
    """Only unit axes come and go (`_unit_axes_only`)."""
    kept = iter([ix for ix, d in zip(index, node.out.shape, strict=True) if d != 1])
    return tuple(constant(0) if d == 1 else next(kept) for d in node.inputs[0].shape)


def _unit_axes_only(node) -> bool:
    a, b = node.inputs[0].shape, node.out.shape
    return [d for d in a if d != 1] == [d for d in b if d != 1]


def _unslice_pieces(node, index):
    """One piece: the input, read at (index - start) * step on the axes it does not cover."""
    x = node.inputs[0]
    if x.size == 0:
        return []
    axes = []
    for ix, (start, _, step), n_in, n_out in zip(
        index, node.params["index"], x.shape, node.out.shape, strict=True
    ):
        if (start, step) == (0, 1) and n_in == n_out:
            axes.append(ix)
        else:  # step is +-1 (`_unslice_steps_ok`)
            axes.append(Window(ix.shifted(1, -start).shifted(step, 0), n_in))
    return [Piece(0, tuple(axes))]


def _unslice_steps_ok(node) -> bool:
    return all(step in (1, -1) for _, _, step in node.params["index"])


def _concatenate_pieces(node, index):
    """Each non-empty input over its range of the axis; the last takes what the others do not."""
    axis = node.params["axis"]
    pieces, start = [], 0
    for k, x in enumerate(node.inputs):
        length = x.shape[axis]
        if length:
            pieces.append((k, start, length))
        start += length
    out = []
    for n, (k, off, length) in enumerate(pieces):
        window = Window(index[axis].shifted(1, -off), length, guard=n < len(pieces) - 1)
        out.append(Piece(k, index[:axis] + (window,) + index[axis + 1 :]))
    return out


def _transpose_twice(node, fills, producers):
    """A transpose undone (forward mode makes these)."""
    inner = producers[0]
    if inner is None or inner.prim is not node.prim:
        return None
    combined = tuple(inner.params["perm"][p] for p in node.params["perm"])
    return inner.inputs[0] if combined == tuple(range(len(combined))) else None


def _reshape_twice(node, fills, producers):
    inner = producers[0]
    if inner is None or inner.prim is not node.prim:
        return None
    return inner.inputs[0] if inner.inputs[0].shape == node.out.shape else None


_MOVES_FILL = Algebra(moves_fill=True)


broadcast_to_p = _shape_prim(
    "broadcast_to",
    lambda x, shape: np.broadcast_to(x, shape),
    lambda shapes, dtypes, p: (tuple(p["shape"]), dtypes[0]),
    _broadcast_rule,
    _batch_broadcast,
    IndexMap(through=_broadcast_through, strides=_broadcast_strides, view=True),
    _MOVES_FILL,
)
reshape_p = _shape_prim(
    "reshape",
    lambda x, shape: np.reshape(x, shape),
    lambda shapes, dtypes, p: (tuple(p["shape"]), dtypes[0]),
    lambda ct, out, x, shape: (reshape(ct, x.shape),),
    lambda size, inputs, batched, shape: reshape(inputs[0], (size,) + tuple(shape)),
    # strides None: a reshape views contiguous memory only
    IndexMap(through=_reshape_through, inline=_unit_axes_only, view=True, general_view=True),
    Algebra(moves_fill=True, rewrite=_reshape_twice),
)
transpose_p = _shape_prim(
    "transpose",
    lambda x, perm: np.transpose(x, perm),
    lambda shapes, dtypes, p: (tuple(shapes[0][i] for i in p["perm"]), dtypes[0]),
    lambda ct, out, x, perm: (transpose(ct, tuple(np.argsort(perm))),),
    lambda size, inputs, batched, perm: transpose(inputs[0], (0,) + tuple(p + 1 for p in perm)),
    IndexMap(
        through=_transpose_through,
        strides=lambda params, shape, strides, out_shape: (
            tuple(strides[p] for p in params["perm"]),
            0,
        ),
        view=True,
    ),
    Algebra(moves_fill=True, rewrite=_transpose_twice),
)
slice_p = _shape_prim(
    "slice",
    lambda x, index: x[tuple(slice(a, (None if b < 0 else b), c) for a, b, c in index)],
    lambda shapes, dtypes, p: (tuple(_slice_len(*ix) for ix in p["index"]), dtypes[0]),
    _slice_rule,
    lambda size, inputs, batched, index: slice_(inputs[0], ((0, size, 1),) + tuple(index)),
    IndexMap(through=_slice_through, strides=_slice_strides, view=True),
    _MOVES_FILL,
)


def _unslice_impl(x, shape, index):
    out = np.zeros(shape, dtype=x.dtype)
    out[tuple(slice(a, (None if b < 0 else b), c) for a, b, c in index)] = x
    return out


unslice_p = _shape_prim(
    "unslice",
    _unslice_impl,
    lambda shapes, dtypes, p: (tuple(p["shape"]), dtypes[0]),
    _unslice_rule,
    lambda size, inputs, batched, shape, index: emit(
        unslice_p, inputs[0], shape=(size,) + tuple(shape), index=((0, size, 1),) + tuple(index)
    ),
    # zeros, and the input where a slice of the result would read
    IndexMap(pieces=_unslice_pieces, inline=_unslice_steps_ok, zero_outside=True, inverse="slice"),
)


def _concatenate_infer(shapes, dtypes, params):
    axis = params["axis"]
    total = sum(s[axis] for s in shapes)
    return shapes[0][:axis] + (total,) + shapes[0][axis + 1 :], dtypes[0]


# A loop computes a concatenation in place (a branch per operand) up to this many operands; more
# (a vector assembled from many scalars, as an unrolled loop's `y[i] = ...` writes do) make a
# kernel whose compile time grows faster than its size, so the operands are stored and joined
# by NumPy's concatenate, a step of its own.
MAX_INLINE_PIECES = 16


def _merge_adjacent_slices(node, fills, producers):
    """Neighbouring operands that are neighbouring windows of one value (the rows of a rolled
    loop's stacked results, written back one by one) become one window of it."""
    axis = node.params["axis"]
    merged: list[tuple[Var, Var | None, tuple | None]] = []  # (operand, sliced value, window)
    for v, made in zip(node.inputs, producers, strict=True):
        if made is None or made.prim is not slice_p:
            merged.append((v, None, None))
            continue
        source, window = made.inputs[0], made.params["index"]
        if merged and merged[-1][1] is source:
            last = merged[-1][2]
            a, b, c = last[axis]
            start, stop, step = window[axis]
            if (
                c == step == 1
                and b == start
                and b >= 0
                and stop >= 0
                and all(
                    w == u for k, (w, u) in enumerate(zip(window, last, strict=True)) if k != axis
                )
            ):
                joined = last[:axis] + ((a, stop, 1),) + last[axis + 1 :]
                merged[-1] = (None, source, joined)
                continue
        merged.append((v, source, window))
    if len(merged) == len(node.inputs):
        return None
    operands = [v if v is not None else slice_(source, window) for v, source, window in merged]
    return concatenate(operands, axis)


concatenate_p = _shape_prim(
    "concatenate",
    lambda *xs, axis: np.concatenate(xs, axis=axis),
    _concatenate_infer,
    _concatenate_rule,
    _batch_concatenate,
    IndexMap(pieces=_concatenate_pieces, inline=lambda node: len(node.inputs) <= MAX_INLINE_PIECES),
    Algebra(rewrite=_merge_adjacent_slices),
)


# ---- Gathers and scatter-adds along one axis, with integer indices that may be traced values.
# They run as steps of their own (no kernel template: the planner gives them an evaluation step
# on every backend); an index out of range raises NumPy's IndexError when the program runs.


def _gather_impl(x, idx, axis):
    return np.take(x, idx, axis=axis)


def _gather_infer(shapes, dtypes, p):
    x, idx, axis = shapes[0], shapes[1], p["axis"]
    if np.dtype(dtypes[1]).kind not in "iu":
        raise ir.IRError(f"gather indices must be integers, got {dtypes[1]}")
    return x[:axis] + idx + x[axis + 1 :], dtypes[0]


def _fast_scatter(v, idx, n) -> bool:
    """Whether a scatter-add may take a summing fast path: float values, indices in range (out
    of range, np.add.at raises NumPy's IndexError)."""
    return v.dtype.kind == "f" and idx.size > 0 and idx.min() >= -n and idx.max() < n


def _scatter_add_compiled(node, compile):
    """The compiled backends' scatter-add: a Numba loop (tracegrad.runtime.host_kernels)."""
    from .runtime import host_kernels

    axis, shape = node.params["axis"], tuple(node.params["shape"])

    def run(v, idx):
        idx = np.asarray(idx)
        if _fast_scatter(v, idx, shape[axis]):
            return host_kernels.scatter_add(v, idx, axis, shape)
        return _scatter_add_impl(v, idx, axis, shape)

    return run


def _scatter_add_impl(v, idx, axis, shape):
    n = shape[axis]
    idx = np.asarray(idx)
    if _fast_scatter(v, idx, n):
        # one np.bincount over flat output positions: several times faster than np.add.at
        # (unbuffered, one element at a time); sums in float64, so float32 gets one rounding
        pre = int(np.prod(shape[:axis], dtype=np.int64))
        post = int(np.prod(shape[axis + 1 :], dtype=np.int64))
        rows = np.where(idx < 0, idx + n, idx).astype(np.int64).reshape(1, -1, 1)
        flat = (np.arange(pre).reshape(-1, 1, 1) * n + rows) * post + np.arange(post).reshape(
            1, 1, -1
        )
        sums = np.bincount(flat.ravel(), weights=v.reshape(-1), minlength=pre * n * post)
        return sums.astype(v.dtype, copy=False).reshape(shape)
    out = np.zeros(shape, dtype=v.dtype)
    np.add.at(out, (slice(None),) * axis + (idx,), v)  # raises NumPy's IndexError out of range
    return out


def _scatter_add_infer(shapes, dtypes, p):
    shape, axis, idx = tuple(p["shape"]), p["axis"], shapes[1]
    if shapes[0] != shape[:axis] + idx + shape[axis + 1 :]:
        raise ir.IRError(f"scatter_add of {shapes[0]} with indices {idx} into {shape} along {axis}")
    return shape, dtypes[0]


def gather(x: Var, idx: Var, axis: int) -> Var:
    return emit(gather_p, x, idx, axis=axis)


def scatter_add(v: Var, idx: Var, axis: int, shape: tuple[int, ...]) -> Var:
    return emit(scatter_add_p, v, idx, axis=axis, shape=tuple(shape))


def _batch_offsets(size: int, n: int, idx: Var) -> Var:
    """Batched indices offset into each example's block of a flattened (batch, axis) pair."""
    offsets = const((np.arange(size, dtype=idx.dtype) * n).reshape((size,) + (1,) * (idx.ndim - 1)))
    return add(idx, broadcast_to(offsets, idx.shape))


def _batch_gather(size, inputs, batched, axis):
    """Batched data, shared indices: the same gather one axis further. Batched indices: the
    gather puts their batch axis where the gathered axis was (moved to the front); with batched
    data too, the batch and gathered axes are flattened into one and each example's indices are
    offset into its own block."""
    x, idx = inputs
    bx, bi = batched
    if not bi:
        return gather(x, idx, axis + 1)
    if bx:
        n = x.shape[axis + 1]
        perm = (*range(1, axis + 1), 0, *range(axis + 1, x.ndim))
        x = reshape(transpose(x, perm), x.shape[1 : axis + 1] + (size * n,) + x.shape[axis + 2 :])
        idx = _batch_offsets(size, n, idx)
    out = gather(x, idx, axis)
    return transpose(out, (axis, *range(axis), *range(axis + 1, out.ndim)))


def _batch_scatter_add(size, inputs, batched, axis, shape):
    v, idx = inputs
    bv, bi = batched
    if not bi:
        return scatter_add(v, idx, axis + 1, (size,) + tuple(shape))
    v = _batched(v, bv, size)  # (B,) + shape[:axis] + idx.shape[1:] + rest
    n = shape[axis]
    shifted = _batch_offsets(size, n, idx)
    # v with its batch axis moved to where the indices' batch axis goes
    moved = transpose(v, (*range(1, axis + 1), 0, *range(axis + 1, v.ndim)))
    flat_shape = tuple(shape[:axis]) + (size * n,) + tuple(shape[axis + 1 :])
    out = scatter_add(moved, shifted, axis, flat_shape)
    out = reshape(out, tuple(shape[:axis]) + (size, n) + tuple(shape[axis + 1 :]))
    return transpose(out, (axis, *range(axis), *range(axis + 1, out.ndim)))


gather_p = _register(
    Primitive(
        "gather",
        Kind.SHAPE,
        _gather_impl,
        _gather_infer,
        lambda ct, out, x, idx, axis: (scatter_add(ct, idx, axis, x.shape), None),
        _batch_gather,
        linear=True,
        index_map=OWN_STEP,
    )
)
scatter_add_p = _register(
    Primitive(
        "scatter_add",
        Kind.SHAPE,
        _scatter_add_impl,
        _scatter_add_infer,
        lambda ct, out, v, idx, axis, shape: (gather(ct, idx, axis), None),
        _batch_scatter_add,
        linear=True,
        run_compiled=_scatter_add_compiled,
        index_map=OWN_STEP,
    )
)


# argsort: the permutation that sorts along an axis (no derivative: an index). np.sort is a
# gather by it, so the sort's derivative routes each cotangent back through the permutation.
argsort_p = _register(
    Primitive(
        "argsort",
        Kind.SHAPE,
        lambda x, axis, kind: np.argsort(x, axis=axis, kind=kind),
        lambda shapes, dtypes, p: (shapes[0], np.dtype(np.int64)),
        lambda ct, out, x, axis, kind: (None,),
        lambda size, inputs, batched, axis, kind: emit(
            argsort_p, inputs[0], axis=axis + 1, kind=kind
        ),
        differentiable=False,
        index_map=OWN_STEP,
    )
)
