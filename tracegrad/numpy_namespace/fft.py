"""np.fft on traced values (stage: tracing): the discrete Fourier transforms fft, ifft, rfft,
irfft, hfft and ihfft, their 2-D and n-D forms, and fftshift, ifftshift; registered in the
dispatch registry as "fft.<name>". (np.fft.fftfreq and rfftfreq take no array: NumPy computes
them on a traced spacing `d` with the traced operators already.)

Each lowers to the table's transforms (primitive_table/fft.py: fft over some axes, rfft and
irfft along one), after padding with zeros (unslice) or truncating (slice) each axis to the
length `n` or `s` asks for, as NumPy does. The dtypes are NumPy's: float32 and complex64 give
complex64 (irfft: float32), integers and bools compute in float64. fftn runs its axes in NumPy's
order, so values agree with NumPy's to the last bit on the interpreter.
"""

from __future__ import annotations

import operator
import warnings

import numpy as np

from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from ..primitive_table.fft import NORMS, fft_p, irfft_p, pad_to, rfft_p
from ..tracing.dispatch import implements
from ..tracing.source import at_source
from .manipulation import roll
from .operands import as_var, slice_along

# ---- arguments


def _norm(name: str, norm) -> str:
    if norm is None:
        return "backward"
    if not isinstance(norm, str) or norm not in NORMS:
        raise ValueError(
            f'np.fft.{name}: invalid norm value {norm!r}; should be "backward", "ortho" or '
            f'"forward" (None means "backward"){at_source()}'
        )
    return norm


def _swapped(norm: str) -> str:
    """The norm of the transform in the other direction that hfft and ihfft are made of."""
    return {"backward": "forward", "forward": "backward", "ortho": "ortho"}[norm]


def _axis(name: str, axis, ndim: int) -> int:
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"np.fft.{name}: axis must be an int, got {axis!r}{at_source()}") from None
    if not -ndim <= axis < ndim:  # NumPy's AxisError: an IndexError and a ValueError
        raise np.exceptions.AxisError(
            f"np.fft.{name}: axis {axis} is out of bounds for an array of dimension {ndim}"
            f"{at_source()}; pass an axis in [{-ndim}, {ndim})"
        )
    return axis % ndim


def _points(name: str, n, default: int) -> int:
    """The length of a transform: `n` (None: `default`), at least 1."""
    if n is None:
        n = default
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(
            f"np.fft.{name}: the number of points must be an int, got {n!r}{at_source()}"
        ) from None
    if n < 1:
        raise ValueError(
            f"np.fft.{name}: invalid number of FFT data points ({n}) specified{at_source()}; "
            "a transform needs n >= 1 (and a non-empty axis when n is not given)"
        )
    return n


def _no_out(name: str, out) -> None:
    if out is not None:
        raise TracingError(
            f"np.fft.{name}(..., out=...) is not supported on traced values{at_source()}; "
            "use the returned value"
        )


def _complex(x: Var) -> Var:
    """`x` in the complex dtype NumPy transforms it in (float32: complex64; ints: complex128)."""
    return P.convert(x, np.result_type(x.dtype, 1j))


def _real(name: str, x: Var) -> Var:
    """`x` in the real dtype NumPy's real transforms read (float32; float64 for ints)."""
    if P.is_complex(x.dtype):
        raise TypeError(
            f"np.fft.{name} takes real values, got {x.dtype}{at_source()}; use np.fft.fft for "
            "complex values, or pass np.real(a)"
        )
    return P.convert(x, P.real_dtype(np.result_type(x.dtype, 1j)))


def _resize(x: Var, axis: int, n: int) -> Var:
    """`x` truncated or padded with zeros to length n along `axis`, as NumPy's transforms do."""
    if n < x.shape[axis]:
        return slice_along(x, axis, 0, n)
    return pad_to(x, axis, n)


# ---- the one-axis transforms


def _c2c(x: Var, sizes, axes, inverse: bool, norm: str) -> Var:
    """The complex transform of `x` over `axes` (normalised) to `sizes`, the last axis first, as
    NumPy's fftn runs them: one node when the axes are distinct."""
    if not axes:
        return x
    x = _complex(x)
    if len(set(axes)) == len(axes):
        for axis, n in zip(axes, sizes, strict=True):
            x = _resize(x, axis, n)  # zeros transform to zeros: padding commutes
        return P.emit(fft_p, x, axes=tuple(axes), inverse=inverse, norm=norm)
    for axis, n in reversed(list(zip(axes, sizes, strict=True))):  # an axis twice: twice over
        x = P.emit(fft_p, _resize(x, axis, n), axes=(axis,), inverse=inverse, norm=norm)
    return x


def _rfft(name: str, x: Var, n: int, axis: int, norm: str) -> Var:
    return P.emit(rfft_p, _resize(_real(name, x), axis, n), axis=axis, norm=norm)


def _irfft(name: str, x: Var, n: int, axis: int, norm: str) -> Var:
    out_dtype = np.result_type(P.real_dtype(x.dtype), 1.0)  # NumPy's: float16 stays float16
    z = _resize(_complex(x), axis, n // 2 + 1)
    return P.convert(P.emit(irfft_p, z, axis=axis, n=n, norm=norm), out_dtype)


def _one_axis(name: str, a, n, axis, norm, out, inverse_default: bool = False):
    _no_out(name, out)
    x = as_var(a)
    if x.ndim == 0:
        raise np.exceptions.AxisError(
            f"np.fft.{name}: a 0-d value has no axis to transform{at_source()}"
        )
    axis = _axis(name, axis, x.ndim)
    default = 2 * (x.shape[axis] - 1) if inverse_default else x.shape[axis]
    return x, _points(name, n, default), axis, _norm(name, norm)


@implements("fft.fft")
def fft(a, n=None, axis=-1, norm=None, out=None):
    x, n, axis, norm = _one_axis("fft", a, n, axis, norm, out)
    return _c2c(x, (n,), (axis,), False, norm)


@implements("fft.ifft")
def ifft(a, n=None, axis=-1, norm=None, out=None):
    x, n, axis, norm = _one_axis("ifft", a, n, axis, norm, out)
    return _c2c(x, (n,), (axis,), True, norm)


@implements("fft.rfft")
def rfft(a, n=None, axis=-1, norm=None, out=None):
    x, n, axis, norm = _one_axis("rfft", a, n, axis, norm, out)
    return _rfft("rfft", x, n, axis, norm)


@implements("fft.irfft")
def irfft(a, n=None, axis=-1, norm=None, out=None):
    x, n, axis, norm = _one_axis("irfft", a, n, axis, norm, out, inverse_default=True)
    return _irfft("irfft", x, n, axis, norm)


@implements("fft.hfft")
def hfft(a, n=None, axis=-1, norm=None, out=None):
    """The transform of a Hermitian-symmetric signal given by its first half: NumPy's
    irfft(conj(a), n) with the norm of the other direction."""
    x, n, axis, norm = _one_axis("hfft", a, n, axis, norm, out, inverse_default=True)
    return _irfft("hfft", P.conj(_complex(x)), n, axis, _swapped(norm))


@implements("fft.ihfft")
def ihfft(a, n=None, axis=-1, norm=None, out=None):
    """The inverse of hfft: conj(rfft(a, n)) with the norm of the other direction."""
    x, n, axis, norm = _one_axis("ihfft", a, n, axis, norm, out)
    return P.conj(_rfft("ihfft", x, n, axis, _swapped(norm)))


# ---- the n-dimensional transforms


_S_WITHOUT_AXES = (
    "`axes` should not be `None` if `s` is not `None` (Deprecated in NumPy 2.0). In a future "
    "version of NumPy, this will raise an error and `s[i]` will correspond to the size along the "
    "transformed axis specified by `axes[i]`. To retain current behaviour, pass a sequence "
    "[0, ..., k-1] to `axes` for an array of dimension k."
)
_NONE_IN_S = (
    "Passing an array containing `None` values to `s` is deprecated in NumPy 2.0 and will raise "
    "an error in a future version of NumPy. To use the default behaviour of the corresponding "
    "1-D transform, pass the value matching the default for its `n` parameter. To use the "
    "default behaviour for every axis, the `s` argument can be omitted."
)


def _nd_args(name: str, a, s, axes, norm, out, real_last: bool = False):
    """NumPy's reading of fftn's arguments (numpy.fft._pocketfft._cook_nd_args, with its
    warnings): the value, the length of each transformed axis, the axes, the norm."""
    _no_out(name, out)
    x = as_var(a)
    given = s is not None
    if axes is None:
        if given:
            warnings.warn(_S_WITHOUT_AXES, DeprecationWarning, stacklevel=3)
        axes = range(-len(s), 0) if given else range(x.ndim)
    elif isinstance(axes, (int, np.integer)):
        axes = (axes,)
    axes = [_axis(name, axis, x.ndim) for axis in axes]
    sizes = list(s) if given else [x.shape[axis] for axis in axes]
    if len(sizes) != len(axes):
        raise ValueError(
            f"np.fft.{name}: shape and axes have different lengths ({len(sizes)} sizes in s, "
            f"{len(axes)} axes){at_source()}; give one size per axis"
        )
    if real_last and axes and not given:
        sizes[-1] = 2 * (x.shape[axes[-1]] - 1)
    if any(n is None for n in sizes):
        warnings.warn(_NONE_IN_S, DeprecationWarning, stacklevel=3)
    defaults = [x.shape[axis] for axis in axes]
    if real_last and axes:
        defaults[-1] = 2 * (x.shape[axes[-1]] - 1)
    sizes = [
        _points(name, d if n is None or (isinstance(n, (int, np.integer)) and n == -1) else n, d)
        for n, d in zip(sizes, defaults, strict=True)
    ]
    return x, sizes, axes, _norm(name, norm)


def _last_axis(name: str, axes) -> None:
    if not axes:
        raise ValueError(f"np.fft.{name}: the real transforms need at least one axis{at_source()}")


@implements("fft.fftn")
def fftn(a, s=None, axes=None, norm=None, out=None):
    x, sizes, axes, norm = _nd_args("fftn", a, s, axes, norm, out)
    return _c2c(x, sizes, axes, False, norm)


@implements("fft.ifftn")
def ifftn(a, s=None, axes=None, norm=None, out=None):
    x, sizes, axes, norm = _nd_args("ifftn", a, s, axes, norm, out)
    return _c2c(x, sizes, axes, True, norm)


@implements("fft.rfftn")
def rfftn(a, s=None, axes=None, norm=None, out=None):
    """rfft along the last axis given, then fft along the others (NumPy's order)."""
    x, sizes, axes, norm = _nd_args("rfftn", a, s, axes, norm, out)
    _last_axis("rfftn", axes)
    z = _rfft("rfftn", x, sizes[-1], axes[-1], norm)
    return _c2c(z, sizes[:-1], axes[:-1], False, norm)


@implements("fft.irfftn")
def irfftn(a, s=None, axes=None, norm=None, out=None):
    """ifft along every axis given but the last, first to last (NumPy's order), then irfft."""
    x, sizes, axes, norm = _nd_args("irfftn", a, s, axes, norm, out, real_last=True)
    _last_axis("irfftn", axes)
    z = _c2c(x, sizes[-2::-1], axes[-2::-1], True, norm)
    return _irfft("irfftn", z, sizes[-1], axes[-1], norm)


@implements("fft.fft2")
def fft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    return fftn(a, s, axes, norm, out)


@implements("fft.ifft2")
def ifft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    return ifftn(a, s, axes, norm, out)


@implements("fft.rfft2")
def rfft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    return rfftn(a, s, axes, norm, out)


@implements("fft.irfft2")
def irfft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    return irfftn(a, s, axes, norm, out)


# ---- shifts


def _shift(name: str, x, axes, sign: int) -> Var:
    x = as_var(x)
    if axes is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axes, (int, np.integer)):
        axes = (axes,)
    axes = tuple(_axis(name, axis, x.ndim) for axis in axes)
    if not axes:
        return x
    return roll(x, tuple(sign * (x.shape[axis] // 2) for axis in axes), axes)


@implements("fft.fftshift")
def fftshift(x, axes=None):
    """The zero frequency moved to the middle: a roll by half of each axis."""
    return _shift("fftshift", x, axes, 1)


@implements("fft.ifftshift")
def ifftshift(x, axes=None):
    """The inverse of fftshift (the same for even lengths)."""
    return _shift("ifftshift", x, axes, -1)
