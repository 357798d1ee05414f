"""Sequences as signals, on traced values (stage: tracing): convolve, correlate and unwrap.

np.convolve and np.correlate slide the shorter sequence (reversed for the convolution) along the
zero-padded longer one. Up to 16 points it is a sum of that many shifted copies of the longer one
(zeros around), each times one point: one fused loop, and so is its adjoint. A longer one is one
matrix product: the longer sequence cut into overlapping windows of 128 + m - 1 points (a gather
by a constant index table, about (1 + m / 128) times its length) times the Toeplitz matrix of
the shorter one ((128 + m - 1) x 128, a gather of it). Either sequence may be traced; the
derivatives are those of the shifts, the gathers and the product, at every order.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from ..tracing.dispatch import implements
from ..tracing.source import at_source
from .operands import as_var, normalize_axis, slice_along, zeros_along
from .scans import diff
from .shapes import concatenate

_MODES = {0: "valid", 1: "same", 2: "full"}


def _sequence(name: str, what: str, x) -> Var:
    v = as_var(x)
    if v.ndim == 0:
        v = P.reshape(v, (1,))
    if v.ndim != 1:
        raise ValueError(
            f"np.{name}: {what} must be 1-D (a sequence), got shape {v.shape}{at_source()}"
        )
    if v.shape[0] == 0:
        raise ValueError(f"np.{name}: {what} cannot be empty{at_source()}")
    return v


def _windowed_product(name: str, a, v, mode, flip: bool) -> Var:
    mode = _MODES.get(mode, mode) if isinstance(mode, (int, np.integer)) else mode
    if mode not in ("full", "same", "valid"):
        raise ValueError(
            f"np.{name}: mode must be 'full', 'same' or 'valid', got {mode!r}{at_source()}"
        )
    a, v = _sequence(name, "a", a), _sequence(name, "v", v)
    dtype = P.result_dtype([a, v])
    if dtype == np.bool_:
        raise TracingError(
            f"np.{name} of booleans is not supported on traced values{at_source()}; convert "
            "with .astype(int)"
        )
    a, v = P.convert(a, dtype), P.convert(v, dtype)
    n, m = a.shape[0], v.shape[0]
    # full[k] = sum_j padded[k + j] * kernel[j], padded = a with m - 1 zeros on each side
    if mode == "full":
        start, length = 0, n + m - 1
    elif mode == "same":  # NumPy's centring, for either sequence the longer
        short = min(n, m)
        shift = (short - 1) // 2 if (name == "convolve" or n >= m) else short // 2
        start, length = shift, max(n, m)
    else:
        start, length = min(n, m) - 1, max(n, m) - min(n, m) + 1
    # the shorter sequence is the kernel: convolution is symmetric, a correlation with the
    # two swapped is the same sequence reversed
    if m <= n:
        return _region(a, P.reverse(v, 0) if flip else v, start, length)
    if flip:
        return _region(v, P.reverse(a, 0), start, length)
    total = n + m - 1
    return P.reverse(_region(v, a, total - start - length, length), 0)


# Up to this kernel length the product is a sum of shifted copies (one fused loop, its compile
# time growing with the kernel); longer kernels are one blocked Toeplitz matrix product.
SHIFTED_SUM_MAX = 16
BLOCK = 128  # outputs per block of the longer kernels' product


def _region(a: Var, kernel: Var, start: int, length: int) -> Var:
    """out[k] = sum_j padded[start + k + j] * kernel[j] for k < length, where padded is `a`
    with len(kernel) - 1 zeros on each side."""
    m = kernel.shape[0]
    if m <= SHIFTED_SUM_MAX:
        # sum_j kernel[j] * (a shifted right by m - 1 - j, zeros around): the adjoint in `a` is
        # then a sum of slices of the cotangent, one fused loop as the forward is
        out = None
        for j in range(m):
            weight = P.broadcast_to(P.reshape(slice_along(kernel, 0, j, j + 1), ()), a.shape)
            shifted = P.concatenate(
                [zeros_along(a, 0, m - 1 - j), P.mul(a, weight), zeros_along(a, 0, j)], 0
            )
            out = shifted if out is None else P.add(out, shifted)
        return slice_along(out, 0, start, start + length)
    # Blocks of `block` outputs: block r reads the window padded[start + block r + t] for
    # t < block + m - 1, and out[block r + s] = sum_t window_r[t] toeplitz[t, s] with
    # toeplitz[t, s] = kernel[t - s] (0 outside the kernel): one matrix product of the
    # (blocks, block + m - 1) windows and the (block + m - 1, block) Toeplitz matrix
    block = min(m, BLOCK)
    blocks = -(-length // block)
    width = block + m - 1
    n = a.shape[0]
    tail = max(m - 1, start + blocks * block - n)  # every window inside
    padded = P.concatenate([zeros_along(a, 0, m - 1), a, zeros_along(a, 0, tail)], 0)
    reads = start + block * np.arange(blocks, dtype=np.int64)[:, None] + np.arange(width)[None, :]
    windows = P.gather(padded, P.const(reads), 0)
    lag = np.arange(width)[:, None] - np.arange(block)[None, :]
    inside = (lag >= 0) & (lag < m)
    taps = P.gather(kernel, P.const(np.clip(lag, 0, m - 1).astype(np.int64)), 0)
    toeplitz = P.where(P.const(inside), taps, P.const(0, taps.shape, taps.dtype))
    out = P.reshape(P.matmul(windows, toeplitz), (blocks * block,))
    return slice_along(out, 0, 0, length)


@implements("convolve")
def convolve(a, v, mode="full"):
    """np.convolve of two 1-D sequences, modes full, same and valid."""
    return _windowed_product("convolve", a, v, mode, True)


@implements("correlate")
def correlate(a, v, mode="valid"):
    """np.correlate of two 1-D sequences, modes valid, same and full: sum a[n + k] conj(v[n])
    (NumPy conjugates v)."""
    return _windowed_product("correlate", a, P.conj(_sequence("correlate", "v", v)), mode, False)


@implements("unwrap")
def unwrap(p, discont=None, axis=-1, *, period=2 * np.pi):
    """NumPy's unwrap: each jump between neighbours larger than `discont` (period / 2 by
    default) is reduced modulo the period by adding the running sum of the corrections. The
    corrections are piecewise constant: the derivative is the identity, as NumPy's values are."""
    if isinstance(period, Var) or isinstance(discont, Var):
        raise TracingError(
            f"np.unwrap: period and discont must be static numbers, not traced values{at_source()}"
        )
    x = as_var(p)
    if x.ndim == 0:
        raise ValueError(f"np.unwrap: p must have at least one axis{at_source()}")
    axis = normalize_axis(axis, x.ndim)
    dd = diff(x, axis=axis)
    if discont is None:
        discont = period / 2
    dtype = np.result_type(dd.dtype, period)
    if np.issubdtype(dtype, np.integer):
        high, rem = divmod(period, 2)
        ambiguous = rem == 0
    else:
        high, ambiguous = period / 2, True
    low = -high
    dd = P.convert(dd, dtype)
    ddmod = P.add(P.apply_elementwise(P.mod_p, P.sub(dd, low), period), low)
    if ambiguous:  # a jump of exactly half a period upwards stays upwards
        half = P.logical(P.and_p, P.compare(P.eq_p, ddmod, low), P.compare(P.gt_p, dd, 0))
        ddmod = P.where(half, P.const(high, ddmod.shape, ddmod.dtype), ddmod)
    correction = P.sub(ddmod, dd)
    small = P.compare(P.lt_p, P.emit(P.abs_p, dd), discont)
    correction = P.where(small, P.const(0, correction.shape, correction.dtype), correction)
    n = x.shape[axis]
    if n < 2:
        return P.convert(x, dtype)
    running = P.cumulative(P.cumsum_p, correction, axis)
    head = P.convert(slice_along(x, axis, 0, 1), dtype)
    rest = P.add(slice_along(x, axis, 1, n), running)
    return concatenate([head, P.convert(rest, dtype)], axis)
