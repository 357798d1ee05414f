"""The primitive table: every operation tracegrad knows, declared once with every facet it needs.

A `Primitive` holds
- `infer`: its shape and dtype rule,
- `impl`: its NumPy reference implementation (the interpreter and the oracle),
- `adjoint`: its reverse-mode rule, written with the op constructors (primitive_table/ops.py), so
  the adjoint is ordinary IR and can be differentiated again,
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
new primitive is one entry in tracegrad/primitive_table/ (tests/test_facets.py checks that each
kind has its facets).

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

# The table is declared in tracegrad/primitive_table/, one module per group of entries; importing
# them in this order registers the entries in the table's order. Everything a stage needs is
# re-exported here: the rest of the package imports this module (`from . import primitives as P`).
from .primitive_table.facets import (
    Kind as Kind,
    Shapes as Shapes,
    Dtypes as Dtypes,
    Monoid as Monoid,
    SUM as SUM,
    PROD as PROD,
    MAX as MAX,
    MIN as MIN,
    MONOIDS as MONOIDS,
    Window as Window,
    Piece as Piece,
    IndexMap as IndexMap,
    OWN_STEP as OWN_STEP,
    Algebra as Algebra,
    NO_ALGEBRA as NO_ALGEBRA,
    Pairing as Pairing,
    Primitive as Primitive,
    OfItsEntry as OfItsEntry,
    PRIMITIVES as PRIMITIVES,
    register as register,
    registered as registered,
)
from .primitive_table.ops import (
    emit as emit,
    is_float as is_float,
    is_complex as is_complex,
    real_dtype as real_dtype,
    real as real,
    imag as imag,
    conj as conj,
    float_dtype as float_dtype,
    Operand as Operand,
    const as const,
    zeros_like as zeros_like,
    ones_like as ones_like,
    result_dtype as result_dtype,
    broadcast_shapes as broadcast_shapes,
    convert as convert,
    broadcast_to as broadcast_to,
    apply_elementwise as apply_elementwise,
    prepare_operands as prepare_operands,
    add as add,
    sub as sub,
    mul as mul,
    div as div,
    power as power,
    integer_pow as integer_pow,
    ct_mul as ct_mul,
    unary_rule as unary_rule,
    sum_to as sum_to,
    neg as neg,
    reciprocal as reciprocal,
    maximum as maximum,
    minimum as minimum,
    where as where,
    compare as compare,
    logical as logical,
    unary as unary,
    reduce as reduce,
    cumulative as cumulative,
    reverse as reverse,
    reduce_sum as reduce_sum,
    normalize_axes as normalize_axes,
    reshape as reshape,
    transpose as transpose,
    swap_last as swap_last,
    slice_ as slice_,
    concatenate as concatenate,
    keepdims_shape as keepdims_shape,
)
from .primitive_table.batching import (
    with_batch_axis as with_batch_axis,
    batch_every_operand as batch_every_operand,
    every_operand as every_operand,
    batch_inline as batch_inline,
    batch_graph as batch_graph,
)
from .primitive_table.elementwise import (
    elementwise_primitive as elementwise_primitive,
    math_names as math_names,
    const_p as const_p,
    neg_p as neg_p,
    add_p as add_p,
    sub_p as sub_p,
    mul_p as mul_p,
    div_p as div_p,
    pow_p as pow_p,
    integer_pow_p as integer_pow_p,
    ct_mul_p as ct_mul_p,
    maximum_p as maximum_p,
    minimum_p as minimum_p,
    exp_p as exp_p,
    expm1_p as expm1_p,
    log_p as log_p,
    log1p_p as log1p_p,
    sqrt_p as sqrt_p,
    sin_p as sin_p,
    cos_p as cos_p,
    tan_p as tan_p,
    arcsin_p as arcsin_p,
    arccos_p as arccos_p,
    arctan_p as arctan_p,
    sinh_p as sinh_p,
    cosh_p as cosh_p,
    tanh_p as tanh_p,
    log2_p as log2_p,
    log10_p as log10_p,
    exp2_p as exp2_p,
    sigmoid_p as sigmoid_p,
    softplus_p as softplus_p,
)
from .primitive_table.special import (
    arcsinh_p as arcsinh_p,
    arccosh_p as arccosh_p,
    arctanh_p as arctanh_p,
    cbrt_p as cbrt_p,
    arctan2_p as arctan2_p,
    hypot_p as hypot_p,
    copysign_p as copysign_p,
    erf_p as erf_p,
    erfc_p as erfc_p,
    digamma as digamma,
    gammaln_p as gammaln_p,
)
from .primitive_table.piecewise import (
    floor_p as floor_p,
    ceil_p as ceil_p,
    trunc_p as trunc_p,
    rint_p as rint_p,
    floor_divide_p as floor_divide_p,
    mod_p as mod_p,
    fmod_p as fmod_p,
    isfinite_p as isfinite_p,
    isnan_p as isnan_p,
    isinf_p as isinf_p,
    signbit_p as signbit_p,
    abs_p as abs_p,
    sign_p as sign_p,
    where_p as where_p,
    convert_p as convert_p,
    named_p as named_p,
    lt_p as lt_p,
    le_p as le_p,
    gt_p as gt_p,
    ge_p as ge_p,
    eq_p as eq_p,
    ne_p as ne_p,
    and_p as and_p,
    or_p as or_p,
    not_p as not_p,
    bitwise_and_p as bitwise_and_p,
    bitwise_or_p as bitwise_or_p,
    bitwise_xor_p as bitwise_xor_p,
    invert_p as invert_p,
    bitwise as bitwise,
)
from .primitive_table.complex_parts import (
    real_p as real_p,
    imag_p as imag_p,
    conj_p as conj_p,
    complex_p as complex_p,
    make_complex as make_complex,
)
from .primitive_table.identities import (
    identity_primitive as identity_primitive,
    stop_gradient_p as stop_gradient_p,
    custom_grad_p as custom_grad_p,
    tap_p as tap_p,
    hook_p as hook_p,
)
from .primitive_table.reductions import (
    reduce_sum_p as reduce_sum_p,
    reduce_max_p as reduce_max_p,
    reduce_min_p as reduce_min_p,
    reduce_prod_p as reduce_prod_p,
    scan_primitive as scan_primitive,
    cumsum_p as cumsum_p,
)
from .primitive_table.matmul import (
    matmul as matmul,
    matmul_p as matmul_p,
    matmul_ as matmul_,
)
from .primitive_table.shape import (
    broadcast_to_p as broadcast_to_p,
    reshape_p as reshape_p,
    transpose_p as transpose_p,
    slice_p as slice_p,
    unslice_p as unslice_p,
    MAX_INLINE_PIECES as MAX_INLINE_PIECES,
    concatenate_p as concatenate_p,
)
from .primitive_table.indexing import (
    scatter_add_impl as scatter_add_impl,
    gather as gather,
    scatter_add as scatter_add,
    gather_p as gather_p,
    scatter_add_p as scatter_add_p,
    argsort_p as argsort_p,
)
from .primitive_table.random import (
    Draw as Draw,
    draws_in as draws_in,
    random_p as random_p,
)
from .primitive_table.bessel import (
    BESSEL_KINDS as BESSEL_KINDS,
    bessel as bessel,
    bessel_p as bessel_p,
)
from .primitive_table.fft import (
    fft_p as fft_p,
    rfft_p as rfft_p,
    irfft_p as irfft_p,
)
from .primitive_table.odeint import (
    odeint_p as odeint_p,
    odeint_vjp_p as odeint_vjp_p,
)

# The rule-author surface: what a new entry is written with (as short as autograd's extend.py).
# - `elementwise_primitive(name, impl, adjoint, scalar, ...)`: declare and register an elementwise
#   entry (its batching rule comes with it); `identity_primitive` for one that passes its last
#   input through (custom rules, checkpoints, taps);
# - `Primitive(...)` and `register(entry)` for any other kind, with `every_operand()` (the batching
#   rule of stacked operands) and `OfItsEntry(make)` (a facet that names its own entry);
# - the op constructors adjoint rules are written with: `emit`, `add`, `mul`, `ct_mul`, `where`,
#   `unary_rule`, `sum_to`, `with_batch_axis`...; `registered(name)` for an entry declared later.
RULE_AUTHOR_SURFACE = (
    "elementwise_primitive",
    "identity_primitive",
    "Primitive",
    "Kind",
    "register",
    "registered",
    "every_operand",
    "OfItsEntry",
    "with_batch_axis",
    "emit",
    "ct_mul",
    "unary_rule",
    "sum_to",
)


# The modules beyond primitive_table/ that add entries to the table, in the order they load: the
# linear algebra first, then the loops (which import autodiff), then the custom rules and
# checkpoints (which import the tracers). Tracing imports them all; a process that has only loaded
# persisted programs imports them when it meets an entry it does not know (runtime/program_data.py;
# tests/test_first_call.py checks that the list is complete).
EXTENSIONS = (
    "tracegrad.linalg.factorisations",
    "tracegrad.linalg.eig",
    "tracegrad.transforms.loops",
    "tracegrad.transforms.scan",
    "tracegrad.transforms.custom_jvp",
    "tracegrad.transforms.remat",
)
