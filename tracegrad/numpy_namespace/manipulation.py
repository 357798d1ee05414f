"""NumPy's array manipulation on traced values (stage: tracing): flip, roll, rot90, tile, repeat,
split, append, broadcast_arrays, meshgrid, atleast_*d, pad. Each is written with the primitives
the table already has (slices, concatenation, broadcasting), so each is differentiable at every
order and fuses into the kernels like any other node.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from ..tracing.dispatch import implements, register
from ..tracing.source import at_source
from .operands import as_var, full_ranges, normalize_axis, slice_along, zeros_along
from .shapes import concatenate, ravel

# ---- flipping, rolling, rotating


@implements("flip")
def flip(m, axis=None):
    x = as_var(m)
    axes = range(x.ndim) if axis is None else P.normalize_axes(axis, x.ndim)
    ranges = full_ranges(x)
    for a in axes:
        n = x.shape[a]
        ranges[a] = (n - 1, -1, -1)
    return P.slice_(x, tuple(ranges)) if x.size else x


@implements("fliplr")
def fliplr(m):
    x = as_var(m)
    if x.ndim < 2:
        raise ValueError(f"Input must be >= 2-d.{at_source()}")
    return flip(x, 1)


@implements("flipud")
def flipud(m):
    x = as_var(m)
    if x.ndim < 1:
        raise ValueError(f"Input must be >= 1-d.{at_source()}")
    return flip(x, 0)


@implements("roll")
def roll(a, shift, axis=None):
    x = as_var(a)
    if axis is None:
        return P.reshape(roll(ravel(x), shift, 0), x.shape)
    shifts = shift if isinstance(shift, (tuple, list)) else (shift,)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    if len(shifts) == 1:
        shifts = tuple(shifts) * len(axes)
    if len(axes) == 1:
        axes = tuple(axes) * len(shifts)
    if len(shifts) != len(axes):
        raise ValueError(
            f"'shift' and 'axis' should be scalars or 1D sequences of the same length{at_source()}"
        )
    total: dict[int, int] = {}
    for s, ax in zip(shifts, axes, strict=True):
        if not isinstance(s, (int, np.integer)):
            raise TracingError(f"np.roll: the shift must be a static int{at_source()}")
        a_ = normalize_axis(ax, x.ndim)
        total[a_] = total.get(a_, 0) + int(s)
    for a_, s in total.items():
        n = x.shape[a_]
        s = s % n if n else 0
        if s:
            x = P.concatenate([slice_along(x, a_, n - s, n), slice_along(x, a_, 0, n - s)], a_)
    return x


@implements("rot90")
def rot90(m, k=1, axes=(0, 1)):
    x = as_var(m)
    if len(axes) != 2 or x.ndim < 2:
        raise ValueError(f"len(axes) must be 2 and the array at least 2-d{at_source()}")
    a0, a1 = normalize_axis(axes[0], x.ndim), normalize_axis(axes[1], x.ndim)
    if a0 == a1:
        raise ValueError(f"Axes must be different.{at_source()}")
    k %= 4
    if k == 0:
        return x
    if k == 2:
        return flip(flip(x, a0), a1)
    perm = list(range(x.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return P.transpose(flip(x, a1), perm)
    return flip(P.transpose(x, perm), a1)


# ---- tiling, repeating, splitting, appending


@implements("tile")
def tile(A, reps):
    x = as_var(A)
    reps = tuple(int(r) for r in (reps if isinstance(reps, (tuple, list)) else (reps,)))
    d = max(len(reps), x.ndim)
    reps = (1,) * (d - len(reps)) + reps
    x = P.reshape(x, (1,) * (d - x.ndim) + x.shape)
    spread = tuple(v for s in x.shape for v in (1, s))
    full = tuple(v for r, s in zip(reps, x.shape, strict=True) for v in (r, s))
    out = P.broadcast_to(P.reshape(x, spread), full)
    return P.reshape(out, tuple(r * s for r, s in zip(reps, x.shape, strict=True)))


@implements("repeat")
def repeat(a, repeats, axis=None):
    x = as_var(a)
    if isinstance(repeats, (list, tuple, np.ndarray)) and np.ndim(repeats) <= 1:
        counts = np.asarray(repeats)
        if counts.size == 1:
            repeats = counts.reshape(()).item()
        elif counts.dtype.kind not in "iu":
            raise TypeError(f"np.repeat: repeats must be integers, not {counts.dtype}{at_source()}")
        else:  # static per-element counts: a gather of each element `count` times
            if axis is None:
                x, axis = ravel(x), 0
            axis = normalize_axis(axis, x.ndim)
            try:
                positions = np.repeat(np.arange(x.shape[axis], dtype=np.int64), counts)
            except ValueError as e:
                raise ValueError(f"np.repeat: {e}{at_source()}") from None
            return P.gather(x, P.const(positions), axis)
    if not isinstance(repeats, (int, np.integer)):
        raise TracingError(
            f"np.repeat: the repeats must be static (an int, or a list or NumPy array of ints), "
            f"not a traced value{at_source()}: the result's shape would depend on them"
        )
    if axis is None:
        x, axis = ravel(x), 0
    axis = normalize_axis(axis, x.ndim)
    r = int(repeats)
    if r < 0:
        raise ValueError(f"np.repeat: negative dimensions are not allowed{at_source()}")
    shape = x.shape[: axis + 1] + (1,) + x.shape[axis + 1 :]
    wide = x.shape[: axis + 1] + (r,) + x.shape[axis + 1 :]
    out = P.broadcast_to(P.reshape(x, shape), wide)
    return P.reshape(out, x.shape[:axis] + (x.shape[axis] * r,) + x.shape[axis + 1 :])


def _split_at(x: Var, bounds: Sequence[int], axis: int) -> list[Var]:
    n = x.shape[axis]
    edges = [0, *(min(max(int(b), 0), n) for b in bounds), n]
    return [slice_along(x, axis, lo, max(lo, hi)) for lo, hi in itertools.pairwise(edges)]


@implements("array_split")
def array_split(ary, indices_or_sections, axis=0):
    x = as_var(ary)
    axis = normalize_axis(axis, x.ndim)
    if isinstance(indices_or_sections, (int, np.integer)):
        k = int(indices_or_sections)
        if k <= 0:
            raise ValueError(f"number sections must be larger than 0.{at_source()}")
        n = x.shape[axis]
        each, extra = divmod(n, k)
        sizes = [each + 1] * extra + [each] * (k - extra)
        return _split_at(x, np.cumsum(sizes)[:-1].tolist(), axis)
    return _split_at(x, list(indices_or_sections), axis)


@implements("split")
def split(ary, indices_or_sections, axis=0):
    x = as_var(ary)
    if isinstance(indices_or_sections, (int, np.integer)) and x.shape[
        normalize_axis(axis, x.ndim)
    ] % int(indices_or_sections):
        raise ValueError(f"array split does not result in an equal division{at_source()}")
    return array_split(x, indices_or_sections, axis)


@implements("hsplit")
def hsplit(ary, indices_or_sections):
    x = as_var(ary)
    return split(x, indices_or_sections, 1 if x.ndim > 1 else 0)


@implements("vsplit")
def vsplit(ary, indices_or_sections):
    x = as_var(ary)
    if x.ndim < 2:
        raise ValueError(f"vsplit only works on arrays of 2 or more dimensions{at_source()}")
    return split(x, indices_or_sections, 0)


@implements("dsplit")
def dsplit(ary, indices_or_sections):
    x = as_var(ary)
    if x.ndim < 3:
        raise ValueError(f"dsplit only works on arrays of 3 or more dimensions{at_source()}")
    return split(x, indices_or_sections, 2)


@implements("append")
def append(arr, values, axis=None):
    if axis is None:
        return concatenate([ravel(as_var(arr)), ravel(as_var(values))], 0)
    return concatenate([arr, values], axis)


# ---- shapes of several arrays


@implements("broadcast_arrays")
def broadcast_arrays(*args, subok=False):
    xs = [as_var(a) for a in args]
    shape = np.broadcast_shapes(*(x.shape for x in xs))
    return tuple(
        P.broadcast_to(P.reshape(x, (1,) * (len(shape) - x.ndim) + x.shape), shape) for x in xs
    )


@implements("meshgrid")
def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ValueError(f"Valid values for `indexing` are 'xy' and 'ij'.{at_source()}")
    xs = [ravel(as_var(x)) for x in xi]
    ndim = len(xs)
    out = []
    for i, x in enumerate(xs):
        shape = [1] * ndim
        shape[i] = x.size
        if indexing == "xy" and ndim > 1 and i < 2:
            shape[0], shape[1] = shape[1], shape[0]
        out.append(P.reshape(x, tuple(shape)))
    if not sparse:
        full = np.broadcast_shapes(*(o.shape for o in out))
        out = [P.broadcast_to(o, full) for o in out]
    return tuple(out)


def atleast(ndim: int):
    def one(x: Var) -> Var:
        if x.ndim >= ndim:
            return x
        if ndim == 1 or x.ndim == 0:
            return P.reshape(x, (1,) * ndim if x.ndim == 0 else x.shape)
        if ndim == 2:
            return P.reshape(x, (1,) + x.shape)
        return P.reshape(x, (1,) + x.shape + (1,) if x.ndim == 1 else x.shape + (1,))

    def handler(*arys):
        out = [one(as_var(a)) for a in arys]
        return out[0] if len(out) == 1 else tuple(out)

    return handler


register("atleast_1d", atleast(1))
register("atleast_2d", atleast(2))
register("atleast_3d", atleast(3))


def _pad_widths(pad_width, ndim: int) -> list[tuple[int, int]]:
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (ndim, 2))
    if (widths < 0).any():
        raise ValueError(f"index can't contain negative values{at_source()}")
    return [(int(a), int(b)) for a, b in widths]


@implements("pad")
def pad(array, pad_width, mode="constant", **kwargs):
    """np.pad with mode constant (a static constant_values), edge, reflect, symmetric or wrap:
    each axis in turn gets slices of itself (or constants) concatenated on both sides."""
    x = as_var(array)
    if mode not in ("constant", "edge", "reflect", "symmetric", "wrap"):
        raise TracingError(
            f"np.pad: mode {mode!r} is not supported on traced values{at_source()}; use constant, edge, "
            "reflect, symmetric or wrap"
        )
    extra = set(kwargs) - ({"constant_values"} if mode == "constant" else set())
    if extra:
        raise TracingError(
            f"np.pad: argument(s) {sorted(extra)} are not supported here{at_source()}"
        )
    values = np.broadcast_to(np.asarray(kwargs.get("constant_values", 0)), (x.ndim, 2))
    for axis, (before, after) in enumerate(_pad_widths(pad_width, x.ndim)):
        n = x.shape[axis]
        if before == after == 0:
            continue
        if n == 0 and mode != "constant":
            raise ValueError(
                f"can't extend empty axis {axis} using modes other than 'constant'{at_source()}"
            )
        sides = []
        for side, width in ((0, before), (1, after)):
            if width == 0:
                sides.append(None)
                continue
            if mode == "constant":
                sides.append(zeros_along(x, axis, width, values[axis][side]))
                continue
            pieces, left = [], width
            while left > 0:  # a pad wider than the axis repeats the rule outwards, as NumPy does
                if mode == "edge":
                    edge = (
                        slice_along(x, axis, 0, 1) if side == 0 else slice_along(x, axis, n - 1, n)
                    )
                    shape = list(x.shape)
                    shape[axis] = left
                    pieces.append(P.broadcast_to(edge, tuple(shape)))
                    break
                if mode == "wrap":
                    k = min(left, n)
                    pieces.append(
                        slice_along(x, axis, n - k, n) if side == 0 else slice_along(x, axis, 0, k)
                    )
                    left -= k
                    continue
                shift = 1 if mode == "reflect" else 0
                k = min(left, n - shift) if n - shift > 0 else left
                if side == 0:
                    piece = slice_along(x, axis, shift, shift + k)
                else:
                    piece = slice_along(x, axis, n - shift - k, n - shift)
                pieces.append(flip(piece, axis))
                left -= k
                if left > 0:
                    raise TracingError(
                        f"np.pad: a {mode} pad wider than the axis is not supported{at_source()}"
                    )
            if side == 0:
                pieces = pieces[::-1]
            sides.append(P.concatenate(pieces, axis) if len(pieces) > 1 else pieces[0])
        parts = [p for p in (sides[0], x, sides[1]) if p is not None]
        x = P.concatenate(parts, axis)
    return x
