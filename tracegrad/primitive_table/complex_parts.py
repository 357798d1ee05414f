"""The complex entries of the table (stage: primitives): the real and imaginary parts of a complex
value, its conjugate, and a complex value made of two real ones.

Their adjoint rules follow the convention of docs/complex.md (JAX's): a cotangent pairs with a
tangent through Re(sum(ct * t)), without a conjugate, so the rule of a holomorphic primitive is
its real rule unchanged, and these three, which are real-linear but not complex-linear, transpose
as follows: real's cotangent `c` becomes `c + 0j`, imag's becomes `-c j`, conj's `conj(c)`.
"""

from __future__ import annotations

import numpy as np

from .elementwise import elementwise_primitive
from .ops import conj, convert, emit, imag, infer_real, infer_same, neg, real, zeros_like

real_p = elementwise_primitive(
    "real",
    np.real,
    lambda ct, out, x: (convert(ct, x.dtype),),
    "{0}.real",
    infer=infer_real,
    linear=True,
    complex_operands=True,
)
imag_p = elementwise_primitive(
    "imag",
    np.imag,
    lambda ct, out, x: (make_complex(zeros_like(ct), neg(ct)),),
    "{0}.imag",
    infer=infer_real,
    linear=True,
    complex_operands=True,
)
conj_p = elementwise_primitive(
    "conj",
    np.conjugate,
    lambda ct, out, x: (conj(ct),),
    "{0}.conjugate()",
    linear=True,
    complex_operands=True,
)


def _complex_impl(re, im):
    out = np.empty(np.broadcast_shapes(re.shape, im.shape), _complex_dtype(re.dtype, im.dtype))
    out.real, out.imag = re, im  # not re + 1j * im: inf * 1j is nan + inf j
    return out


def _complex_dtype(*dtypes) -> np.dtype:
    return np.result_type(np.result_type(*dtypes), np.complex64)


# complex(x, y) = x + iy from two real values; its cotangent c pairs as Re(c (tx + i ty)), so x
# gets Re(c) and y gets -Im(c)
complex_p = elementwise_primitive(
    "complex",
    _complex_impl,
    lambda ct, out, x, y: (real(ct), neg(imag(ct))),
    "complex({0}, {1})",
    infer=lambda shapes, dtypes, p: infer_same(shapes, dtypes, p, _complex_dtype(*dtypes)),
    linear=True,
)


def make_complex(x, y):
    """x + iy of two real values (of one shape and dtype), without inf * 0 in between."""
    return emit(complex_p, x, y)
