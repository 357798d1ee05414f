"""The facets of a primitive (stage: primitives, the table's data): `Primitive` and what fusion,
the simplifier and the code generators read from it (`Monoid`, `IndexMap`, `Algebra`, `Pairing`),
and `PRIMITIVES`, the table every entry registers into.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir import Var


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
# that none of them names one. They are plain classes, not dataclasses: `import tracegrad`
# creates them in every process, and a dataclass costs about 1 ms to create (its methods are
# compiled from source). An entry is not changed once the table holds it.


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

    __slots__ = (
        "accumulate",
        "combine",
        "helper",
        "identity",
        "name",
        "reassociate",
        "reduce",
        "repeat",
        "widen",
    )

    def __init__(
        self,
        name: str,
        combine: str,
        identity: Callable[[np.dtype], np.ndarray],
        reduce: Callable[..., np.ndarray],
        accumulate: Callable[..., np.ndarray],
        helper: str,
        reassociate: bool = False,
        widen: bool = False,
        repeat: Callable[[np.ndarray, int], np.ndarray] | None = None,
    ):
        self.name = name
        self.combine = combine
        self.identity = identity
        self.reduce = reduce
        self.accumulate = accumulate
        self.helper = helper
        self.reassociate = reassociate
        self.widen = widen
        self.repeat = repeat

    def __repr__(self) -> str:
        return f"<monoid {self.name}>"

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
PICK_MAX = "{0} if ({0} >= {1}) | ({0} != {0}) else {1}"
PICK_MIN = "{0} if ({0} <= {1}) | ({0} != {0}) else {1}"

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
MAX = Monoid("max", PICK_MAX, _extreme(False), np.max, np.maximum.accumulate, "max")
MIN = Monoid("min", PICK_MIN, _extreme(True), np.min, np.minimum.accumulate, "min")
#: every monoid by name (the name a fusion plan's reduction carries)
MONOIDS: dict[str, Monoid] = {m.name: m for m in (SUM, PROD, MAX, MIN)}


class Window:
    """One axis of a piece's index that must be checked: `base` read if 0 <= base < length. An
    unguarded window (the last piece of a concatenation) takes every index, clamped."""

    __slots__ = ("base", "guard", "length")

    def __init__(self, base: Any, length: int, guard: bool = True):
        self.base = base
        self.length = length
        self.guard = guard


class Piece:
    """Where a piecewise shape node reads one of its inputs: `axes` holds, per axis of that
    input, an index or a `Window`."""

    __slots__ = ("axes", "input")

    def __init__(self, input: int, axes: tuple):
        self.input = input
        self.axes = axes


def _always(node: Any) -> bool:
    return True


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

    __slots__ = (
        "general_view",
        "inline",
        "inverse",
        "pieces",
        "strides",
        "through",
        "view",
        "zero_outside",
    )

    def __init__(
        self,
        through: Callable | None = None,
        pieces: Callable | None = None,
        inline: Callable[[Any], bool] = _always,
        strides: Callable | None = None,
        view: bool = False,
        general_view: bool = False,
        zero_outside: bool = False,
        inverse: str | None = None,
    ):
        self.through = through
        self.pieces = pieces
        self.inline = inline
        self.strides = strides
        self.view = view
        self.general_view = general_view
        self.zero_outside = zero_outside
        self.inverse = inverse


#: The index map of a shape-kind primitive that is no index map: its indices are data (gather,
#: argsort) or it computes (the linalg factorisations). It runs as a step of its own everywhere.
OWN_STEP = IndexMap(inline=lambda node: False)


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

    __slots__ = ("absorbing", "involution", "moves_fill", "neutral", "rewrite")

    def __init__(
        self,
        neutral: tuple[tuple[int, float], ...] = (),
        absorbing: tuple[tuple[int, float], ...] = (),
        involution: bool = False,
        moves_fill: bool = False,
        rewrite: Callable | None = None,
    ):
        self.neutral = neutral
        self.absorbing = absorbing
        self.involution = involution
        self.moves_fill = moves_fill
        self.rewrite = rewrite


NO_ALGEBRA = Algebra()


class Pairing:
    """A primitive computed together with a partner on the same argument: `call(x)` (a math
    library function) returns (this, partner) at once, where the library has it."""

    __slots__ = ("call", "partner")

    def __init__(self, partner: str, call: str):
        self.partner = partner
        self.call = call


class OfItsEntry:
    """A facet that names its own entry (a batching rule that emits the primitive again, an
    adjoint that compares with it): `make(entry)` builds it when the entry is made, so every facet
    is declared inside the entry's constructor call."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[Primitive], Any]):
        self.make = make


class Primitive:
    """One entry of the table: a primitive's `name`, `kind`, reference implementation `impl`
    (NumPy), shape and dtype rule `infer(shapes, dtypes, params) -> (shape, dtype)`, and the
    facets below, each None (or its default) where the primitive has none.

    - `adjoint`, `batch`: its reverse-mode and vmap rules;
    - `scalar`: its scalar template for the code generators (a string or a function of the
      operand texts and params);
    - `differentiable`; `linear`: it maps a zero cotangent to zero, so the simplifier may drop
      it then;
    - `domain`: where it is smooth (the range tests and fuzzers sample inputs from it);
    - `effectful`: the node is kept even when nothing uses its value (a gradient hook);
    - `operands`: the operand dtypes it is defined on: "number" (floats and integers), "bool"
      or "integer" (integers and bools); tests sample operands of this kind;
    - `complex_operands`: it is defined on complex values too, with NumPy's meaning, and its
      adjoint rule is right for them under the convention of docs/complex.md (a holomorphic
      function's rule is its real rule; the others branch on the dtype); a complex operand of
      any other primitive is refused while tracing (default: loops, conditionals and
      identities, which hold or pass values, take them);
    - `complex_scalar`: its scalar template for complex operands, where `scalar` would not do
      (Numba raises on a complex division by zero where NumPy gives inf and nan);
    - `run_compiled(node, compile)`: how a compiled backend runs a node that is a step of its
      own: it returns the function it calls (on host arrays), given `compile(graph)`, which
      compiles a graph on that backend into a function from a list of arrays to a list of
      arrays. A control-flow primitive (Kind.CONTROL) compiles the graphs it holds;
      scatter_add runs a compiled host loop. None: the reference implementation `impl`;
    - `monoid` (reductions, see `Monoid`), `index_map` (shape primitives, see `IndexMap`),
      `algebra` (identities the simplifier applies, see `Algebra`), `pairing` (elementwise
      primitives computed with a partner in one call, see `Pairing`);
    - `math_call`: the math-library function its scalar template calls (`M.asin` for arcsin),
      which tracegrad.vmath implements under the primitive's name; set from the template;
    - `sparsity(node, consts)`: which output elements depend on which input elements, where its
      kind does not say (transforms/sparsity.py): per input, a pair of arrays (output element
      numbers, input element numbers), or None where any output element may depend on any
      (`consts` holds the value of each input that is a constant, else None);
    - `fresh_result`: its implementations (`impl` and `run_compiled`'s) return a new array on
      every call, sharing memory with no operand, so a compiled backend may hand it to the
      caller without a copy."""

    __slots__ = (
        "adjoint",
        "algebra",
        "batch",
        "complex_operands",
        "complex_scalar",
        "differentiable",
        "domain",
        "effectful",
        "fresh_result",
        "impl",
        "index_map",
        "infer",
        "kind",
        "linear",
        "math_call",
        "monoid",
        "name",
        "operands",
        "pairing",
        "run_compiled",
        "scalar",
        "sparsity",
    )

    def __init__(
        self,
        name: str,
        kind: Kind,
        impl: Callable[..., np.ndarray],
        infer: Callable[[Shapes, Dtypes, dict], tuple[tuple[int, ...], np.dtype]],
        adjoint: Callable[..., tuple[Var | None, ...]] | None = None,
        batch: Callable[..., Var] | None = None,
        scalar: str | Callable[[Sequence[str], dict], str] | None = None,
        differentiable: bool = True,
        linear: bool = False,
        domain: tuple[float, float] = (-2.0, 2.0),
        effectful: bool = False,
        operands: str = "number",
        run_compiled: Callable[..., Callable] | None = None,
        monoid: Monoid | None = None,
        index_map: IndexMap | None = None,
        algebra: Algebra = NO_ALGEBRA,
        pairing: Pairing | None = None,
        math_call: str | None = None,
        sparsity: Callable | None = None,
        fresh_result: bool = False,
        complex_operands: bool | None = None,
        complex_scalar: str | Callable[[Sequence[str], dict], str] | None = None,
    ):
        self.name = name
        self.kind = kind
        self.impl = impl
        self.infer = infer
        self.adjoint = adjoint
        self.batch = batch
        self.scalar = scalar
        self.differentiable = differentiable
        self.linear = linear
        self.domain = domain
        self.effectful = effectful
        self.operands = operands
        self.run_compiled = run_compiled
        self.monoid = monoid
        self.index_map = index_map
        self.algebra = algebra
        self.pairing = pairing
        self.math_call = math_call
        self.sparsity = sparsity
        self.fresh_result = fresh_result
        # loops, conditionals and identities hold or pass values: complex ones too
        if complex_operands is None:
            complex_operands = kind in (Kind.CONTROL, Kind.IDENTITY, Kind.CONST)
        self.complex_operands = complex_operands
        self.complex_scalar = complex_scalar
        for facet in ("adjoint", "batch"):
            value = getattr(self, facet)
            if isinstance(value, OfItsEntry):
                setattr(self, facet, value.make(self))

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


PRIMITIVES: dict[str, Primitive] = {}


def register(prim: Primitive) -> Primitive:
    """Add an entry to the table (its name must be new); returns it."""
    assert prim.name not in PRIMITIVES, prim.name
    PRIMITIVES[prim.name] = prim
    return prim


def registered(name: str) -> Primitive:
    """The table's entry `name`: how code written before an entry (the op constructors, a rule
    that emits a primitive declared after its own) finds it when it runs."""
    return PRIMITIVES[name]
