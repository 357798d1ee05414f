"""The Fourier transforms of the table (stage: primitives): the complex transform over some axes
(forward or inverse), the transform of real values along one axis and its inverse, each
referencing NumPy's np.fft (pocketfft) with NumPy's `norm` and dtypes (complex64 stays
complex64). None has a kernel template: every backend runs them as a step of their own (on the
host for the cuda backend), between the fused kernels. Padding and truncation to a length `n` are
the shape primitives unslice and slice, emitted by the np.fft handlers before the transform.

Their adjoint rules follow the convention of docs/complex.md (JAX's): a cotangent pairs with a
tangent through Re(sum(ct * t)), without a conjugate, so a linear primitive's rule is its
transpose (not its Hermitian adjoint), and it is again one of these transforms:
- the DFT matrix is symmetric: `fft`'s transpose is `fft` of the cotangent, with the same
  direction and norm;
- `rfft` (n reals to the n // 2 + 1 first bins) is those rows of the DFT of a real vector: its
  transpose is the real part of the forward DFT of the cotangent padded with zeros to n;
- `irfft` reads its n // 2 + 1 bins as half a Hermitian spectrum: every bin but the first (and,
  for even n, the last) counts twice, and the imaginary part of those one or two not at all. Its
  transpose is conj(rfft(ct)) times the weights 1, 2, ..., 2, (1 for even n, else 2), times its
  norm's scale (1/n for "backward").
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import IRError
from .batching import with_batch_axis
from .facets import OWN_STEP, Kind, OfItsEntry, Primitive, register
from .ops import broadcast_to, conj, const, emit, mul, real, real_dtype
from .shape import unslice_p

NORMS = ("backward", "ortho", "forward")


def scale(norm: str, n: int, inverse: bool) -> float:
    """The factor NumPy's `norm` puts on a transform of length n (forward or inverse)."""
    if norm == "ortho":
        return 1 / math.sqrt(n)
    return 1 / n if (norm == "forward") != inverse else 1.0


def _shifted(params: dict, key: str) -> dict:
    """`params` with the axis (or axes) under `key` moved past a new leading batch axis."""
    value = params[key]
    moved = tuple(a + 1 for a in value) if isinstance(value, tuple) else value + 1
    return {**params, key: moved}


def _batch(key: str):
    def make(prim: Primitive):
        def rule(size, inputs, batched, **params):
            x = with_batch_axis(inputs[0], batched[0], size)  # the one operand
            return emit(prim, x, **_shifted(params, key))

        return rule

    return make


def _entry(name, impl, infer, adjoint, axis_key) -> Primitive:
    return register(
        Primitive(
            name,
            Kind.SHAPE,
            impl,
            infer,
            adjoint,
            OfItsEntry(_batch(axis_key)),
            linear=True,
            index_map=OWN_STEP,
            fresh_result=True,  # NumPy's transforms return new arrays
            complex_operands=True,
        )
    )


# ---- fft: the complex transform over `axes` (distinct axes, in NumPy's order), forward or inverse


def _fft_impl(x, axes, inverse, norm):
    transform = np.fft.ifftn if inverse else np.fft.fftn
    return transform(x, axes=axes, norm=norm)


def _fft_infer(shapes, dtypes, params):
    if dtypes[0].kind != "c":
        raise IRError(f"fft takes complex values, got {dtypes[0]}")
    return shapes[0], dtypes[0]


def _fft_rule(ct, out, x, axes, inverse, norm):
    return (emit(fft_p, ct, axes=axes, inverse=inverse, norm=norm),)


fft_p = _entry("fft", _fft_impl, _fft_infer, _fft_rule, "axes")


# ---- rfft: real values along `axis` (length n) to the n // 2 + 1 first bins of their transform


def _rfft_impl(x, axis, norm):
    return np.fft.rfft(x, axis=axis, norm=norm)


def _rfft_infer(shapes, dtypes, params):
    if dtypes[0].kind != "f":
        raise IRError(f"rfft takes real floats, got {dtypes[0]}")
    axis, shape = params["axis"], shapes[0]
    out = shape[:axis] + (shape[axis] // 2 + 1,) + shape[axis + 1 :]
    return out, np.result_type(dtypes[0], np.complex64)


def pad_to(x, axis: int, n: int):
    """`x` with zeros after its values along `axis`, to length n (n >= its length)."""
    if x.shape[axis] == n:
        return x
    shape = x.shape[:axis] + (n,) + x.shape[axis + 1 :]
    index = tuple((0, d, 1) for d in x.shape)
    return emit(unslice_p, x, shape=shape, index=index)


def _rfft_rule(ct, out, x, axis, norm):
    padded = pad_to(ct, axis, x.shape[axis])
    return (real(emit(fft_p, padded, axes=(axis,), inverse=False, norm=norm)),)


rfft_p = _entry("rfft", _rfft_impl, _rfft_infer, _rfft_rule, "axis")


# ---- irfft: n // 2 + 1 bins along `axis`, half a Hermitian spectrum, to the n real values


def _irfft_impl(x, axis, n, norm):
    return np.fft.irfft(x, n=n, axis=axis, norm=norm)


def _irfft_infer(shapes, dtypes, params):
    axis, n, shape = params["axis"], params["n"], shapes[0]
    if dtypes[0].kind != "c" or shape[axis] != n // 2 + 1:
        raise IRError(f"irfft to {n} values takes {n // 2 + 1} complex bins, got {shapes[0]}")
    return shape[:axis] + (n,) + shape[axis + 1 :], real_dtype(dtypes[0])


def hermitian_weights(n: int, norm: str) -> np.ndarray:
    """How much each of the n // 2 + 1 bins counts in irfft to n values, times the norm's scale."""
    weights = np.full(n // 2 + 1, 2.0)
    weights[0] = 1.0
    if n % 2 == 0:
        weights[-1] = 1.0
    return weights * scale(norm, n, inverse=True)


def _irfft_rule(ct, out, x, axis, n, norm):
    spectrum = conj(emit(rfft_p, ct, axis=axis, norm="backward"))
    shape = [1] * ct.ndim
    shape[axis] = n // 2 + 1
    weights = const(hermitian_weights(n, norm).astype(ct.dtype).reshape(shape))
    return (mul(spectrum, broadcast_to(weights, spectrum.shape)),)


irfft_p = _entry("irfft", _irfft_impl, _irfft_infer, _irfft_rule, "axis")
