"""The complex entries of the table (stage: primitives): the real and imaginary parts of a complex
value and its conjugate.

Their adjoint rules follow the convention of docs/complex.md (JAX's): a cotangent pairs with a
tangent through Re(sum(ct * t)), without a conjugate, so the rule of a holomorphic primitive is
its real rule unchanged, and these three, which are real-linear but not complex-linear, transpose
as follows: real's cotangent `c` becomes `c + 0j`, imag's becomes `-c j`, conj's `conj(c)`.
"""

from __future__ import annotations

import numpy as np

from .elementwise import elementwise_primitive
from .ops import conj, convert, infer_real, mul

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
    lambda ct, out, x: (mul(convert(ct, x.dtype), -1j),),
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
