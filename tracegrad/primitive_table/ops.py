"""The op constructors (stage: primitives): NumPy semantics (promotion, broadcasting) on IR values,
each emitting the table's primitives as explicit nodes; and the helpers adjoint rules share.

The table's entries (the modules beside this one) call these constructors in their rules, so the
constructors are defined first and find their primitive by name (`registered`) when called.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import ir
from ..base.errors import ShapeError, at
from ..ir import Var
from .facets import Dtypes, Primitive, Shapes, registered

# ----------------------------------------------------------------------------------------------
# Emitting nodes


def emit(prim: Primitive, *inputs: Var, **params: Any) -> Var:
    """Append `prim(*inputs, **params)` to the graph being built and return its value."""
    if not prim.complex_operands and any(v.dtype.kind == "c" for v in inputs):
        _refuse_complex(prim)
    return ir.current_builder().add(prim, inputs, params, ir.current_source())


def is_float(dtype: np.dtype) -> bool:
    """Whether values of `dtype` have derivatives: real floats and complex numbers (NumPy's
    inexact dtypes)."""
    if isinstance(dtype, np.dtype):
        return dtype.kind in "fc"  # np.issubdtype's answer, at a tenth of its cost
    return np.issubdtype(dtype, np.inexact)


def is_complex(dtype: np.dtype) -> bool:
    return np.dtype(dtype).kind == "c"


def real_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype of a complex dtype's parts (complex64: float32); any other dtype itself."""
    dtype = np.dtype(dtype)
    return np.empty((), dtype).real.dtype if dtype.kind == "c" else dtype


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
    return emit(registered("const"), value=value, shape=tuple(int(d) for d in shape))


def zeros_like(v: Var) -> Var:
    return const(0, v.shape, v.dtype)


def ones_like(v: Var) -> Var:
    return const(1, v.shape, v.dtype)


def result_dtype(operands: Sequence[Operand]) -> np.dtype:
    # Python scalars are "weak" (NEP 50): float32 array * 2.0 stays float32.
    return np.result_type(*[v.dtype if isinstance(v, Var) else v for v in operands])


def broadcast_shapes(*shapes: tuple[int, ...], op: str = "operation") -> tuple[int, ...]:
    first = tuple(shapes[0]) if shapes else ()
    if all(tuple(s) == first for s in shapes[1:]):  # the common case, 25x faster than NumPy's
        return first
    try:
        return _broadcast(tuple(tuple(s) for s in shapes))
    except ValueError:
        shown = " and ".join(str(tuple(s)) for s in shapes)
        raise ShapeError(
            f"{op}: operands could not be broadcast together: shapes {shown}"
            f"{at(ir.current_source())}. Make the shapes agree, e.g. with reshape or "
            "np.expand_dims."
        ) from None


@functools.lru_cache(maxsize=4096)
def _broadcast(shapes: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """NumPy's broadcasting of `shapes` (ValueError where they do not broadcast). Written out:
    np.broadcast_shapes builds an empty array per shape, a tenth of a leapfrog's tracing."""
    ndim = max(len(s) for s in shapes)
    out = []
    for axis in range(-ndim, 0):
        sizes = {s[axis] for s in shapes if len(s) >= -axis} - {1}
        if len(sizes) > 1:
            raise ValueError(f"sizes {sorted(sizes)} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(int(d) for d in out)


def _refuse_complex(prim: Primitive) -> None:
    raise TypeError(
        f"{prim.name} of complex values is not supported{at(ir.current_source())}: NumPy does not "
        "define it on complex numbers, or tracegrad does not yet (docs/complex.md lists what "
        "does); compute it on the real and imaginary parts (np.real, np.imag) or on np.abs"
    )


def convert(x: Var, dtype: Any) -> Var:
    """`x` in `dtype`; complex to real keeps the real part, as NumPy's astype does."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if x.dtype.kind == "c" and dtype.kind != "c":
        x = real(x)  # NumPy warns and drops the imaginary part; say it in the graph
        if x.dtype == dtype:
            return x
    return emit(registered("convert"), x, dtype=dtype)


def real(x: Var) -> Var:
    """The real part of `x` (`x` itself when it is real)."""
    return emit(registered("real"), x) if x.dtype.kind == "c" else x


def imag(x: Var) -> Var:
    """The imaginary part of `x` (zeros when it is real)."""
    return emit(registered("imag"), x) if x.dtype.kind == "c" else zeros_like(x)


def conj(x: Var) -> Var:
    """The complex conjugate of `x` (`x` itself when it is real)."""
    return emit(registered("conj"), x) if x.dtype.kind == "c" else x


def broadcast_to(x: Var, shape: tuple[int, ...]) -> Var:
    shape = tuple(shape)
    if x.shape == shape:
        return x
    if broadcast_shapes(x.shape, shape, op="broadcast_to") != shape:
        raise ShapeError(f"cannot broadcast shape {x.shape} to {shape}{at(ir.current_source())}")
    return emit(registered("broadcast_to"), x, shape=shape)


def prepare_operands(
    operands: Sequence[Operand], op: str, dtype: np.dtype | None = None
) -> list[Var]:
    """Promote and broadcast operands to one dtype and shape, as explicit nodes."""
    dtype = result_dtype(operands) if dtype is None else np.dtype(dtype)
    shape = broadcast_shapes(*[v.shape for v in operands if isinstance(v, Var)], op=op)
    out = []
    for v in operands:
        if isinstance(v, Var):
            out.append(broadcast_to(convert(v, dtype), shape))
        else:
            out.append(const(v, shape, dtype))
    return out


def apply_elementwise(prim: Primitive, *operands: Operand, dtype: Any = None) -> Var:
    return emit(prim, *prepare_operands(operands, prim.name, dtype))


def _float_unary(prim: Primitive, x: Var) -> Var:
    return emit(prim, convert(x, float_dtype(x.dtype)))


# Op constructors: NumPy semantics (promotion, broadcasting) on IR values.
def add(a: Operand, b: Operand) -> Var:
    if result_dtype([a, b]) == np.bool_:  # NumPy: True + True is True (a logical or), not 2
        return logical(registered("or"), a, b)
    return apply_elementwise(registered("add"), a, b)


def _is_bool(x: Operand) -> bool:
    return (isinstance(x, Var) and x.dtype == np.bool_) or isinstance(x, (bool, np.bool_))


def sub(a: Operand, b: Operand) -> Var:
    if _is_bool(a) and _is_bool(b):
        raise TypeError(
            "numpy boolean subtract, the `-` operator, is not supported, use the bitwise_xor, the "
            f"`^` operator, or the logical_xor function instead{at(ir.current_source())}"
        )
    return apply_elementwise(registered("sub"), a, b)


def mul(a: Operand, b: Operand) -> Var:
    return apply_elementwise(registered("mul"), a, b)


def div(a: Operand, b: Operand) -> Var:
    dtype = float_dtype(result_dtype([a, b]))
    return apply_elementwise(registered("div"), a, b, dtype=dtype)


def power(a: Operand, b: Operand) -> Var:
    dtype = result_dtype([a, b])
    if isinstance(b, complex) and b.imag == 0:
        b = b.real  # z ** (2+0j) is z ** 2.0 (NumPy's dtype comes from the operands as given)
    integral = not isinstance(b, (Var, complex)) and math.isfinite(b) and float(b) == int(b)
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
    if isinstance(a, Var) and isinstance(b, (int, float)) and float(b) == 0.5:
        # NumPy computes x ** 0.5 as sqrt(x): -0.0 and -inf give -0.0 and nan (C's pow: 0, inf)
        return emit(registered("sqrt"), convert(a, dtype))
    return apply_elementwise(registered("pow"), a, b)


def integer_pow(x: Var, n: int) -> Var:
    if n == 1:
        return x
    if not is_float(x.dtype) and n > 3:
        # integers: exact products by squaring (wrapping like NumPy); the primitive's kernel
        # template calls the float pow() beyond the cube
        half = integer_pow(x, n // 2)
        square = mul(half, half)
        return mul(square, x) if n % 2 else square
    return emit(registered("integer_pow"), x, n=int(n))


def ct_mul(ct: Var, d: Var) -> Var:
    """`ct * d`, but exactly 0 where `ct` is 0 (even if `d` is inf or nan there)."""
    return apply_elementwise(registered("ct_mul"), ct, d)


def neg(x: Var) -> Var:
    if _is_bool(x):
        raise TypeError(
            "The numpy boolean negative, the `-` operator, is not supported, use the `~` operator "
            f"or the logical_not function instead{at(ir.current_source())}"
        )
    return emit(registered("neg"), x)


def reciprocal(x: Var) -> Var:
    return div(1.0, x)


def maximum(a: Operand, b: Operand) -> Var:
    return apply_elementwise(registered("maximum"), a, b)


def minimum(a: Operand, b: Operand) -> Var:
    return apply_elementwise(registered("minimum"), a, b)


def where(c: Operand, a: Operand, b: Operand) -> Var:
    dtype = result_dtype([a, b])
    shape = broadcast_shapes(*[v.shape for v in (c, a, b) if isinstance(v, Var)], op="where")
    if isinstance(c, Var):
        cv = broadcast_to(c if c.dtype == np.bool_ else compare(registered("ne"), c, 0), shape)
    else:
        cv = const(bool(c), shape, np.bool_)
    a, b = prepare_operands([a, b], "where", dtype)
    return emit(registered("where"), cv, broadcast_to(a, shape), broadcast_to(b, shape))


def compare(prim: Primitive, a: Operand, b: Operand) -> Var:
    kinds = [_kind(v) for v in (a, b)]
    mixed = ("u", 8) in kinds and any(k is not None and k[0] == "i" for k in kinds)
    if mixed and prim.name in _UNSIGNED_ABOVE_NEGATIVE:
        return _compare_uint64_with_signed(prim, a, b)
    return emit(prim, *prepare_operands([a, b], prim.name))


def _kind(v: Operand) -> tuple[str, int] | None:
    """(dtype kind, item size) of an operand with a dtype of its own (not a Python number)."""
    dtype = getattr(v, "dtype", None) if isinstance(v, (Var, np.ndarray, np.generic)) else None
    return None if dtype is None else (dtype.kind, dtype.itemsize)


# `u op i` for an unsigned u and a negative i (u > i); `i op u` is the mirrored comparison
_UNSIGNED_ABOVE_NEGATIVE = {
    "eq": False,
    "ne": True,
    "lt": False,
    "le": False,
    "gt": True,
    "ge": True,
}
_MIRRORED = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


def _compare_uint64_with_signed(prim: Primitive, a: Operand, b: Operand) -> Var:
    """NumPy compares uint64 with a signed integer exactly; promoting both (to float64) would
    call 2**53 + 1 equal to 2**53. A negative i is below every u; else both compare as uint64."""
    u_left = _kind(a)[0] == "u"
    u, i = (a, b) if u_left else (b, a)
    u = u if isinstance(u, Var) else const(u)
    i = convert(i if isinstance(i, Var) else const(i), np.int64)
    negative = compare(registered("lt"), i, 0)
    as_unsigned = convert(where(negative, 0, i), np.uint64)
    exact = emit(
        prim, *prepare_operands([u, as_unsigned] if u_left else [as_unsigned, u], prim.name)
    )
    name = prim.name if u_left else _MIRRORED[prim.name]
    return where(negative, _UNSIGNED_ABOVE_NEGATIVE[name], exact)


def logical(prim: Primitive, *operands: Operand) -> Var:
    return emit(prim, *prepare_operands(operands, prim.name, np.bool_))


def unary(prim: Primitive, x: Var) -> Var:
    return _float_unary(prim, x)


def reduce(prim: Primitive, x: Var, axes: Sequence[int] | int | None, keepdims=False) -> Var:
    axes = normalize_axes(axes, x.ndim)
    if (
        prim.name in ("reduce_sum", "reduce_prod")
        and x.dtype.kind in "biu"
        and x.dtype.itemsize < 8
    ):
        # NumPy sums and multiplies small integers and bools in the platform integer
        x = convert(x, np.uint64 if x.dtype.kind == "u" else np.int64)
    if prim.name in ("reduce_max", "reduce_min") and any(x.shape[a] == 0 for a in axes):
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
    return reduce(registered("reduce_sum"), x, axes, keepdims)


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
    return emit(registered("reshape"), x, shape=shape)


def transpose(x: Var, perm: Sequence[int] | None = None) -> Var:
    perm = tuple(reversed(range(x.ndim))) if perm is None else tuple(int(p) % x.ndim for p in perm)
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(
            f"axes {perm} are not a permutation of {x.ndim} axes{at(ir.current_source())}"
        )
    if perm == tuple(range(x.ndim)):
        return x
    return emit(registered("transpose"), x, perm=perm)


def swap_last(x: Var) -> Var:
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return transpose(x, perm)


def slice_(x: Var, index: tuple[tuple[int, int, int], ...]) -> Var:
    """Basic slicing with normalised (start, stop, step) per axis."""
    if all(ix == (0, d, 1) for ix, d in zip(index, x.shape, strict=True)):
        return x
    for ix, d in zip(index, x.shape, strict=True):
        r = range(*ix)  # a kernel would read outside the array: refuse it while tracing
        if len(r) and not (0 <= r[0] < d and 0 <= r[-1] < d):
            raise ir.IRError(f"slice {ix} is out of bounds for an axis of length {d}")
    return emit(registered("slice"), x, index=tuple(index))


def concatenate(xs: Sequence[Var], axis: int) -> Var:
    if len(xs) == 1:
        return xs[0]
    dtype = result_dtype(xs)
    xs = [convert(x, dtype) for x in xs]
    return emit(registered("concatenate"), *xs, axis=axis)


# ----------------------------------------------------------------------------------------------
# Shape rules


def infer_same(shapes: Shapes, dtypes: Dtypes, params: dict, out_dtype=None):
    if len(set(shapes)) > 1:
        raise ir.IRError(f"elementwise operands must have one shape, got {shapes}")
    return shapes[0], (dtypes[-1] if out_dtype is None else np.dtype(out_dtype))


def infer_real(shapes, dtypes, params):
    """The shape of the operands, the dtype of a complex operand's parts (real: its own)."""
    return infer_same(shapes, dtypes, params, real_dtype(dtypes[0]))


def infer_same_bool(shapes, dtypes, params):
    return infer_same(shapes, dtypes, params, np.bool_)


def infer_reduced(shapes, dtypes, params):
    axes = params["axes"]
    return tuple(d for i, d in enumerate(shapes[0]) if i not in axes), dtypes[0]


def slice_len(start: int, stop: int, step: int) -> int:
    return len(range(start, stop, step))


# ----------------------------------------------------------------------------------------------
# Adjoint rules: rule(ct, out, *inputs, **params) -> one cotangent (or None) per input.


def unary_rule(derivative: Callable[[Var, Var], Var]):
    return lambda ct, out, x: (ct_mul(ct, derivative(x, out)),)


def sum_to(ct: Var, shape: tuple[int, ...]) -> Var:
    """The adjoint of broadcasting `shape` up to `ct.shape`: sum over the broadcast axes."""
    lead = ct.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and ct.shape[lead + i] != 1
    )
    return reshape(reduce_sum(ct, axes), shape)


def keepdims_shape(x_shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(x_shape))


def expand_reduced(v: Var, x: Var, axes) -> Var:
    return broadcast_to(reshape(v, keepdims_shape(x.shape, axes)), x.shape)
