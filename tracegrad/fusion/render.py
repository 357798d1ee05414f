"""What both code generators share: the text of values, nodes and lines of kernel source.

`codegen_cpu` (Numba on the CPU) and `codegen_cuda` (numba.cuda) write kernels from the same
fusion plan. They differ in loop structure and launch layout; everything below is the same for
both, so it lives here once:

- the dtypes kernels compute in, and whether a backend's kernels can compute a node (`supports`);
- casts and literals (`cast`, `literal`), the scalar expression of an elementwise node
  (`render_node`, through the one math renderer `render_math`);
- a reduction's identity and combining step, from its primitive's monoid;
- the line writer (`Lines`), the comments that name buffers and nodes, and dumping a program's
  source (`TRACEGRAD_DUMP_KERNELS`).

Math functions go through `render_math` only: in the "vector" math mode (the CPU's default) the
primitives that `tracegrad.vmath` implements call its vectorisable versions, everything else (and
the "libm" mode, TRACEGRAD_MATH=libm, and every CUDA kernel) calls Python's `math` module, which
Numba maps to libm and numba.cuda to libdevice.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
from collections.abc import Sequence

import numpy as np

from ..base import config
from .. import ir
from .. import primitives as P
from . import loop_ir as L
from ..ir import Node

log = logging.getLogger("tracegrad")

SUPPORTED_DTYPES = {
    np.dtype(t)
    for t in (
        np.float64,
        np.float32,
        np.int64,
        np.int32,
        np.int16,
        np.int8,
        np.uint64,
        np.uint32,
        np.uint16,
        np.uint8,
        np.bool_,
        np.complex128,
        np.complex64,
    )
}
# Numba keeps these as they are; any other dtype is cast back after arithmetic (Numba widens
# float32 * int and int32 + int32).
NATIVE = {np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.bool_)}


def supports(node: Node, bool_products: bool = True) -> bool:
    """Whether a kernel (or a matmul step) can compute this node. Without `bool_products`,
    matrix products and reductions of bools are not (they run on the host)."""
    dtypes = [v.dtype for v in node.inputs] + [node.out.dtype]
    if any(np.dtype(d) not in SUPPORTED_DTYPES for d in dtypes):
        return False
    kind = node.prim.kind
    if kind is P.Kind.ELEMENTWISE:
        if node.prim.scalar is None:
            return False
        if any(np.dtype(d).kind == "c" for d in dtypes[:-1] or dtypes):
            return _complex_template(node.prim)
        return True
    if not bool_products and kind in (P.Kind.MATMUL, P.Kind.REDUCE):
        return node.out.dtype != np.bool_
    return True


# ----------------------------------------------------------------------------------------------
# Values


def cast(dtype, text: str) -> str:
    """Keep a value in its dtype (Numba widens float32 * int and int32 + int32)."""
    dtype = np.dtype(dtype)
    return text if dtype in NATIVE else f"np.{dtype.name}({text})"


def literal(value, lib: str = "np") -> str:
    """Source text for a typed constant; nan and infinities as `<lib>.nan`, `<lib>.inf`."""
    value = np.asarray(value)
    dtype, v = value.dtype, value.item()
    if dtype.kind == "c":
        part = value.real.dtype
        parts = (literal(np.asarray(v.real, part), lib), literal(np.asarray(v.imag, part), lib))
        return cast(dtype, f"complex({parts[0]}, {parts[1]})")
    if dtype == np.bool_:
        return "True" if v else "False"
    if dtype.kind == "f":
        if math.isnan(v):
            text = f"{lib}.nan"
        elif math.isinf(v):
            text = f"{lib}.inf" if v > 0 else f"-{lib}.inf"
        else:
            text = repr(float(v))
        return cast(dtype, text)
    return cast(dtype, str(int(v)))


def reduction_identity(op: str, dtype, lib: str = "np") -> str:
    """The identity of the reduction `op` (a monoid's name) in `dtype`, as source text."""
    return literal(P.MONOIDS[op].identity(np.dtype(dtype)), lib)


def combine_text(op: str, a: str, b: str) -> str:
    """The combining step of the reduction `op` on two partial results, unparenthesised."""
    return P.MONOIDS[op].combine.format(a, b)


def combine_step(op: str, dtype, a: str, b: str) -> str:
    """The combining step of `op` on two values held in `dtype` (cast back where Numba would
    widen it)."""
    text = combine_text(op, a, b)
    return cast(dtype, f"({text})") if np.dtype(dtype) not in NATIVE else text


# ----------------------------------------------------------------------------------------------
# Math functions and nodes


def math_mode() -> str:
    """ "vector" (tracegrad.vmath where it has the function) or "libm"."""
    vm = vmath_module()
    return vm.math_mode() if vm is not None else "libm"


@functools.lru_cache(maxsize=1)
def _vmath_module():
    try:
        from .. import vmath
    except Exception as exc:  # not there yet, or broken: libm it is
        log.info("tracegrad: vmath unavailable (%s); kernels call libm", exc)
        return None
    return vmath if hasattr(vmath, "NAMES") and hasattr(vmath, "math_mode") else None


def vmath_module():
    return _vmath_module()


@functools.lru_cache(maxsize=1)
def _math_names() -> dict[str, str]:
    return P.math_names()


_MATH_CALL = re.compile(r"\bM\.(\w+)\(")
# math-library calls Numba's `math` module lacks, and what stands for them in libm mode
_LIBM_CALLS = {"cbrt": "np.cbrt"}


def render_math(math_name: str, dtype: np.dtype, mode: str) -> str:
    """The callee for the math-library call `M.<math_name>` on values of `dtype`."""
    vm = vmath_module()
    vm_name = _math_names().get(math_name, math_name)
    dtype = np.dtype(dtype)
    known = vm is not None and vm_name in vm.NAMES
    if mode == "vector" and known:
        if dtype == np.float64:
            return f"_vm.{vm_name}_f64"
        if dtype == np.float32:
            return f"_vm.{vm_name}_f32"
    return _LIBM_CALLS.get(math_name, f"math.{math_name}")


# The math-library calls of the scalar templates on complex values: Python's cmath (Numba and
# numba.cuda compile it), or NumPy's own formula where cmath has no such function (log1p, exp2,
# log2 as NumPy's complex loops compute them; expm1 without cancelling for small arguments), or
# where cmath as Numba compiles it is wrong at huge or tiny parts (sqrt, log, asin, asinh:
# below).
_COMPLEX_CALLS = {
    **{
        name: f"cmath.{name}({{0}})"
        for name in ("exp", "sin", "cos", "tan", "asin", "acos", "atan")
        + ("sinh", "cosh", "tanh", "asinh", "acosh", "atanh")
    },
    "exp2": "cmath.exp(complex({0}.real * 0.6931471805599453, {0}.imag * 0.6931471805599453))",
    "expm1": (
        "complex(math.expm1({0}.real) * math.cos({0}.imag) - 2.0 * math.sin(0.5 * {0}.imag) ** 2,"
        " math.exp({0}.real) * math.sin({0}.imag))"
    ),
    "pow": "({0} ** {1})",
}


def _tiny(a: str, b: str) -> str:
    """Whether both parts are below 2**-500, where the complex formulas scale or short-cut."""
    return f"(abs({a}) < {2.0**-500!r} and abs({b}) < {2.0**-500!r})"


def _complex_sqrt(z: str) -> str:
    """sqrt of a complex value: NumPy's npy_csqrt (Algorithm 312, CACM vol 10, Oct 1967) with
    its special values, both results rescaled after the scaling against overflow (cmath.sqrt as
    Numba compiles it doubles only the real part: np.sqrt(1e308+1e308j) had half its imaginary
    part), and tiny parts scaled up by 2**600 first (subnormal sums lost digits, and a zero
    `t` divided by zero: sqrt(5e-324j) raised ZeroDivisionError)."""
    a, b = f"{z}.real", f"{z}.imag"
    thres = 1.7976931348623157e308 / (1.0 + 1.4142135623730951)
    big = f"(abs({a}) >= {thres!r} or abs({b}) >= {thres!r})"
    tiny = _tiny(a, b)
    up = f"(0.25 if {big} else ({2.0**600!r} if {tiny} else 1.0))"
    down = f"(2.0 if {big} else ({2.0**-300!r} if {tiny} else 1.0))"
    a2, b2 = f"({a} * {up})", f"({b} * {up})"
    h = f"math.hypot({a2}, {b2})"
    tp, tn = f"math.sqrt(({a2} + {h}) * 0.5)", f"math.sqrt((-{a2} + {h}) * 0.5)"
    general = (
        f"(complex({tp} * {down}, {b2} / (2.0 * {tp}) * {down}) if {a2} >= 0.0 else "
        f"complex(abs({b2}) / (2.0 * {tn}) * {down}, math.copysign({tn}, {b2}) * {down}))"
    )
    infinite_a = (
        f"(complex(abs({b} - {b}), math.copysign({a}, {b})) if {a} < 0.0 else "
        f"complex({a}, math.copysign({b} - {b}, {b})))"
    )
    return (
        f"(complex(abs({b}), {b}) if ({a} == 0.0 and {b} == 0.0) or math.isinf({b}) else "
        f"(complex({a}, {a}) if math.isnan({a}) else "
        f"({infinite_a} if math.isinf({a}) else {general})))"
    )


def _complex_log(z: str) -> str:
    """log of a complex value: log(hypot(re, im)) + atan2(im, re), as cmath.log, with parts
    beyond 2**1000 scaled down by 2**600 and parts both below 2**-500 scaled up by 2**600 first
    (hypot overflowed to inf at 1.7e308+1.7e308j, and lost digits on subnormal parts:
    log(5e-324+5e-324j) was -744.44 for -744.09)."""
    a, b = f"{z}.real", f"{z}.imag"
    big = f"(abs({a}) >= {2.0**1000!r} or abs({b}) >= {2.0**1000!r})"
    tiny = _tiny(a, b)
    scale = f"({2.0**-600!r} if {big} else ({2.0**600!r} if {tiny} else 1.0))"
    shift = math.log(2.0**600)
    shifted = f"({shift!r} if {big} else ({-shift!r} if {tiny} else 0.0))"
    modulus = f"math.hypot({a} * {scale}, {b} * {scale})"
    return f"complex(math.log({modulus}) + {shifted}, math.atan2({b}, {a}))"


def _tiny_is_itself(z: str, call: str) -> str:
    """`call(z)` for a function that is z + O(z^3) at 0 (asin, asinh), with z itself where both
    parts are below 2**-500: cmath's formulas halve a subnormal part and round it to 0
    (cmath.asinh(5e-324+5e-324j) is 5e-324j; NumPy's is 5e-324+5e-324j)."""
    return f"(complex({z}) if {_tiny(f'{z}.real', f'{z}.imag')} else {call}({z}))"


_COMPLEX_CALLS["sqrt"] = _complex_sqrt("{0}")
_COMPLEX_CALLS["log"] = _complex_log("{0}")
_COMPLEX_CALLS["asin"] = _tiny_is_itself("{0}", "cmath.asin")
_COMPLEX_CALLS["asinh"] = _tiny_is_itself("{0}", "cmath.asinh")


def _nan_cases(name: str, cases: list[tuple[str, str]]) -> None:
    """The inverse functions' values at a NaN part that cmath as Numba compiles gets wrong,
    NumPy's (C99 Annex G): `cases` are (condition, value) on the parts `{a}` and `{b}`, tried in
    turn before the function's form. (cmath.atan(1+nan j) was pi/2 + nan j, NumPy's nan + nan j;
    cmath.atanh(nan+1j) was nan + pi/2 j.)"""
    text = _COMPLEX_CALLS[name]
    for condition, value in reversed(cases):
        text = f"({value} if ({condition}) else {text})"
    _COMPLEX_CALLS[name] = text.replace("{a}", "{0}.real").replace("{b}", "{0}.imag")


_ZERO_NAN = "{a} == 0.0 and math.isnan({b})"  # +-0 + nan j
_NAN_ZERO = "math.isnan({a}) and {b} == 0.0"  # nan +- 0 j
_HALF_PI = repr(math.pi / 2)
_INF_NAN = "math.isinf({a}) and math.isnan({b})"  # +-inf + nan j (the sign C99 leaves open)
_nan_cases(
    "asin", [(_ZERO_NAN, "complex({a}, math.nan)"), (_INF_NAN, "complex(math.nan, math.inf)")]
)
_nan_cases(
    "acos",
    [(_ZERO_NAN, f"complex({_HALF_PI}, math.nan)"), (_INF_NAN, "complex(math.nan, -math.inf)")],
)
_nan_cases("asinh", [(_NAN_ZERO, "complex(math.nan, {b})")])
_nan_cases("acosh", [(_ZERO_NAN, f"complex(math.nan, {_HALF_PI})")])
_nan_cases(
    "atanh",
    [
        (_ZERO_NAN, "complex({a}, math.nan)"),
        ("math.isnan({a}) and math.isfinite({b})", "complex(math.nan, math.nan)"),
    ],
)
_nan_cases(
    "atan",
    [
        ("math.isfinite({a}) and math.isnan({b})", "complex(math.nan, math.nan)"),
        (_INF_NAN, f"complex(math.copysign({_HALF_PI}, {{a}}), 0.0)"),
        (_NAN_ZERO, "complex(math.nan, {b})"),
    ],
)


def _parts_times(z: str, c: float) -> str:
    # each part times c (z * c on a complex z would make -inf * 0.0 a nan imaginary part)
    return f"complex({z}.real * {c!r}, {z}.imag * {c!r})"


_COMPLEX_CALLS["log10"] = _parts_times(f"({_complex_log('{0}')})", 1 / math.log(10.0))
_COMPLEX_CALLS["log2"] = _parts_times(f"({_complex_log('{0}')})", 1 / math.log(2.0))
# 1 + z with z's imaginary part as it is (1.0 + z would add +0.0 to it: a -0.0 became +0.0 and
# log1p(-1.5-0j) took the other side of the branch cut, +pi for NumPy's -pi)
_COMPLEX_CALLS["log1p"] = _complex_log("complex(1.0 + {0}.real, {0}.imag)")


def _complex_template(prim) -> bool:
    """Whether a kernel computes `prim` on complex values: its template's math calls all have a
    complex form here (scipy.special.erf has none: it runs on the host, SciPy's)."""
    if prim.complex_scalar is not None:
        return True
    template = prim.scalar
    return isinstance(template, str) and all(
        name in _COMPLEX_CALLS for name in _MATH_CALL.findall(template)
    )


def _complex_math(text: str) -> str:
    """`text` with each math-library call `M.f(args)` written for complex arguments."""
    out, pos = [], 0
    while (m := _MATH_CALL.search(text, pos)) is not None:
        depth, i, parts, last = 1, m.end(), [], m.end()
        while depth:
            c = text[i]
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif c == "," and depth == 1:
                parts.append(text[last:i].strip())
                last = i + 1
            i += 1
        parts.append(text[last : i - 1].strip())
        name = m.group(1)
        if name not in _COMPLEX_CALLS:
            raise NotImplementedError(f"no complex form of the math call {name}")
        args = [f"({_complex_math(a)})" for a in parts]
        out.append(text[pos : m.start()] + _COMPLEX_CALLS[name].format(*args))
        pos = i
    return "".join(out) + text[pos:]


def render_node(node: Node, args: Sequence[str], mode: str) -> str:
    """The scalar expression of an elementwise node on argument expressions `args`."""
    dtype = node.inputs[0].dtype if node.inputs else node.out.dtype
    complex_ = np.dtype(dtype).kind == "c"
    template = node.prim.scalar
    if complex_ and node.prim.complex_scalar is not None:
        template = node.prim.complex_scalar
    if template is None:
        raise NotImplementedError(f"{node.prim.name} has no scalar template")
    text = template(list(args), node.params) if callable(template) else template.format(*args)
    if complex_:
        text = _complex_math(text)
    else:
        text = _MATH_CALL.sub(lambda m: render_math(m.group(1), dtype, mode) + "(", text)
    return cast(node.out.dtype, text)


# ----------------------------------------------------------------------------------------------
# Lines and comments


class Lines:
    """Lines of source, each with an optional comment above it (shown or not when rendered)."""

    def __init__(self):
        self.items: list[tuple[int, str, str | None]] = []

    def add(self, indent: int, code: str, comment: str | None = None) -> None:
        self.items.append((indent, code, comment))

    def render(self, comments: bool = True) -> str:
        out = []
        for indent, code, comment in self.items:
            pad = "    " * indent
            if comments and comment:
                out.append(f"{pad}# {comment}")
            if code:
                out.append(pad + code)
        return "\n".join(out)


_ROLES = {"const": "constant", "temp": "scratch", "output": "result", "view": "view"}


def describe_buffer(b, names: dict, unnamed: str = "?") -> str:
    """`x (input 0 a0: f64[3])`: a buffer with the IR value it holds."""
    var = names.get(b.var, "?") if b.var is not None else unnamed
    what = f"input {b.input_index}" if b.role == "input" else _ROLES[b.role]
    return f"{var} ({what} {b.name}: {ir.type_str(b.shape, b.dtype)})"


def node_comment(node: Node, names: dict) -> str:
    """`%3 = mul %1 %2   [model.py:12]`: a node with its values' names and its source line."""
    args = " ".join(names.get(v, "?") for v in node.inputs)
    text = f"{names.get(node.out, '?')} = {node.prim.name}{ir.params_text(node, False)} {args}"
    text = text.rstrip()
    return f"{text}   [{node.source}]" if node.source else text


def dumped(program, prefix: str):
    """`program`, its source written first to the folder TRACEGRAD_DUMP_KERNELS names (if any)
    as `<prefix>_<graph fingerprint>.py`; a failure to write is logged."""
    directory = config.dump_kernels()
    if directory:
        try:
            os.makedirs(directory, exist_ok=True)
            path = os.path.join(directory, f"{prefix}_{program.graph.fingerprint()[:16]}.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(program.source())
        except OSError as exc:
            log.warning("tracegrad: cannot dump kernels to %s (%s)", directory, exc)
    return program


class Notes:
    """The comments of generated source: buffers, nodes and values by their IR names."""

    def __init__(self, names: dict, unnamed: str = "?"):
        self.names, self.unnamed = names, unnamed

    def buffer(self, b) -> str:
        return describe_buffer(b, self.names, self.unnamed)

    def node(self, node: Node) -> str:
        return node_comment(node, self.names)

    def value(self, var) -> str:
        return self.names.get(var, "?")


# ----------------------------------------------------------------------------------------------
# The printer of the loop IR


class Printer:
    """Writes the statements of a loop-IR kernel (`tracegrad.fusion.loop_ir`) as Python source
    for Numba. What is spelt the same on every target is written here; a target's printer
    overrides the renderings that differ (the names of its arrays, how an index or a literal is
    written, its math calls, its thread intrinsics)."""

    lib = "np"  # where literals' nan and inf come from
    zero_d = "()"  # the index of a 0-d array's element

    def __init__(self, notes: Notes):
        self.notes = notes

    # ---- expressions
    def array(self, a) -> str:
        return a if isinstance(a, str) else a.name

    def index(self, ix) -> str:
        if isinstance(ix, str):
            return ix
        if ix.var is None:
            return str(ix.offset)
        term = ix.var if ix.stride == 1 else f"{ix.stride} * {ix.var}"
        if ix.offset > 0:
            return f"{term} + {ix.offset}"
        if ix.offset < 0:
            return f"{term} - {-ix.offset}"
        return term

    def subscript(self, array, index) -> str:
        idx = ", ".join(self.index(ix) for ix in index)
        return f"{self.array(array)}[{idx or self.zero_d}]"

    def elem(self, e) -> str:
        return self.subscript(e.array, e.index)

    def combine(self, c) -> str:
        return combine_step(c.op, c.dtype, self.expr(c.a), self.expr(c.b))

    def special(self, name: str) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no {name}")

    def expr(self, e) -> str:
        if isinstance(e, str):
            return e
        if isinstance(e, L.Elem):
            return self.elem(e)
        if isinstance(e, L.Identity):
            return reduction_identity(e.op, e.dtype, self.lib)
        if isinstance(e, L.Combine):
            return self.combine(e)
        if isinstance(e, L.Cast):
            return cast(e.dtype, self.expr(e.value))
        if isinstance(e, L.BinOp):
            return f"{self.expr(e.left)} {e.op} {self.expr(e.right)}"
        return self.special(e.name)

    # ---- the plan's ops
    def size(self, n: int, prefix: str) -> str:
        """An integer the kernel needs (a length, an offset)."""
        return str(n)

    def let(self, op) -> tuple[str | None, str | None]:
        """(code, comment) binding one op of the plan."""
        return getattr(self, "let_" + type(op).__name__.lower())(op)

    def let_load(self, op):
        code = f"{op.id} = {self.subscript(op.buffer, op.index)}"
        return code, f"load {self.notes.buffer(op.buffer)}"

    def let_literal(self, op):
        return f"{op.id} = {literal(op.value, self.lib)}", None

    def let_compute(self, op):
        return f"{op.id} = {self.compute(op)}", self.notes.node(op.node)

    def compute(self, op) -> str:
        raise NotImplementedError

    def let_clamp(self, op):
        base, n = self.index(op.base), self.size(op.length, "m")  # in this order: slots
        return f"{op.id} = min(max({base}, 0), {n} - 1)", None

    def let_inside(self, op):
        base, n = self.index(op.base), self.size(op.length, "m")
        return f"{op.id} = ({base} >= 0) & ({base} < {n})", None

    def let_select(self, op):
        return f"{op.id} = {op.then} if {op.cond} else {op.other}", None

    def let_equal(self, op):
        code = f"{op.id} = {self.index(op.a)} == {self.index(op.b)}"
        return code, "identity matrix: row == column"

    def let_pair(self, s):
        raise NotImplementedError

    # ---- statements
    def statements(self, body: list, indent: int, lines: Lines) -> None:
        for s in body:
            if isinstance(s, L.Let):
                code, comment = self.let(s.op)
                if code is not None:
                    lines.add(indent, code, comment)
            elif isinstance(s, L.LetPair):
                lines.add(indent, *self.let_pair(s))
            elif isinstance(s, L.Assign):
                target = s.target if isinstance(s.target, str) else self.elem(s.target)
                lines.add(indent, f"{target} {s.update or ''}= {self.expr(s.value)}", s.note)
            elif isinstance(s, L.For):
                bounds = s.stop if s.start is None else f"{s.start}, {s.stop}"
                bounds += f", {s.step}" if s.step is not None else ""
                lines.add(indent, f"for {s.var} in range({bounds}):", s.note)
                self.statements(s.body, indent + 1, lines)
            elif isinstance(s, L.While):
                lines.add(indent, f"while {s.cond}:", s.note)
                self.statements(s.body, indent + 1, lines)
            elif isinstance(s, L.If):
                lines.add(indent, f"if {s.cond}:", s.note)
                self.statements(s.body, indent + 1, lines)
                if s.orelse is not None:
                    lines.add(indent, "else:")
                    self.statements(s.orelse, indent + 1, lines)
            elif isinstance(s, L.Note):
                lines.add(indent, "", s.text)
            elif isinstance(s, L.Call):
                call = f"{s.function}({', '.join(s.args)})"
                lines.add(indent, f"{', '.join(s.results)}, = {call}" if s.results else call)
            else:
                lines.add(indent, self.target_statement(s))

    def target_statement(self, s) -> str:
        raise NotImplementedError(f"{type(self).__name__} cannot write {type(s).__name__}")
