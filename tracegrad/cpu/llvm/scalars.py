"""Scalar expressions as LLVM IR, with the semantics the Numba kernels give them.

The loop IR carries some of a kernel as Python expressions: the primitives' scalar templates
(`({0} * {1} if {0} != 0 else {0})`, `M.exp({0})`), index arithmetic (`first * n0 // nch`) and the
reductions' combining steps. The Numba printer hands that text to Numba; this module compiles the
same text to LLVM IR, so that both compilers compute the same numbers, bit for bit. What that
takes is Numba's typing and lowering of the few constructs the text uses, measured against
Numba 0.68 (tests/test_llvm_kernels.py checks every rule here against Numba itself):

- arithmetic on integers computes in int64 (uint64 when both operands are unsigned), on floats in
  NumPy's promoted type (float32 with bool, int8, uint8, int16, uint16 or float32; float64
  otherwise); `/` on integers is float64; a Python int literal is int64, a float literal float64;
- `//` and `%` follow Python (the quotient rounds down, the remainder takes the divisor's sign),
  and with NumPy's error model an integer division by zero gives 0, a float one inf or nan;
- the branches of `a if c else b` and the operands of `max`, `min` and comparisons meet in
  `np.promote_types`; `max(a, b)` is `b if b > a else a` (Python's: max(nan, 1.0) is nan);
- casts: float to integer truncates (fptosi), anything to bool is `!= 0` (nan is true);
- bool values are i1 in registers, one byte in memory;
- a complex value is a {re, im} pair of floats (as NumPy lays it out in memory): `+`, `-` and
  `*` are Numba's (CPython's) formulas on the parts, `(ac - bd) + (ad + bc)i`, after a real
  operand is made complex with imaginary part +0.0; negation and `.conjugate()` subtract from
  -0.0; `==` compares both parts, `!=` either (unordered); `abs` is libm's `hypot`; a complex
  value is true when either part is non-zero. Complex `/` and `**` and the cmath functions are
  not written here (the templates spell division out on the parts; the rest goes to Numba).

Anything else raises `Unsupported`: the kernel is then compiled by Numba instead, never computed
with a guess.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from llvmlite import ir


class Unsupported(Exception):
    """A construct this compiler does not write: the kernel goes to Numba."""


F64, F32 = np.dtype(np.float64), np.dtype(np.float32)
I64, U64 = np.dtype(np.int64), np.dtype(np.uint64)
C128, C64 = np.dtype(np.complex128), np.dtype(np.complex64)
BOOL = np.dtype(np.bool_)
# np.<name>(x): a cast to the dtype of that name
_DTYPES = {
    np.dtype(t).name: np.dtype(t)
    for t in (np.float64, np.float32, np.int64, np.int32, np.int16, np.int8)
    + (np.uint64, np.uint32, np.uint16, np.uint8, np.complex128, np.complex64)
}


def llvm_type(dtype) -> ir.Type:
    """The type a value of `dtype` has in registers."""
    dtype = np.dtype(dtype)
    if dtype == F64:
        return ir.DoubleType()
    if dtype == F32:
        return ir.FloatType()
    if dtype == BOOL:
        return ir.IntType(1)
    if dtype.kind in "iu":
        return ir.IntType(8 * dtype.itemsize)
    if dtype in (C128, C64):
        part = llvm_type(part_dtype(dtype))
        return ir.LiteralStructType([part, part])
    raise Unsupported(f"values of dtype {dtype}")


def part_dtype(dtype) -> np.dtype:
    """The dtype of a complex dtype's real and imaginary parts."""
    return F64 if np.dtype(dtype) == C128 else F32


def complex_of(dtype) -> np.dtype:
    """The complex dtype whose parts are `dtype` (float32 parts: complex64)."""
    return C64 if np.dtype(dtype) == F32 else C128


def memory_type(dtype) -> ir.Type:
    """The type a value of `dtype` has in an array (a bool is a byte)."""
    dtype = np.dtype(dtype)
    return ir.IntType(8) if dtype == BOOL else llvm_type(dtype)


@dataclass(frozen=True)
class Typed:
    value: ir.Value
    dtype: np.dtype


def arithmetic_type(a: np.dtype, b: np.dtype) -> np.dtype:
    """The type Numba computes `a + b` (and `-`, `*`, `//`, `%`, `&`...) in."""
    if a.kind in "fc" or b.kind in "fc":
        return np.promote_types(a, b)
    if a.kind == "u" and b.kind == "u":
        return U64
    return I64


def unify(a: np.dtype, b: np.dtype) -> np.dtype:
    """The type two values meet in (branches of a conditional, max, min, comparisons)."""
    return np.promote_types(a, b)


def _signed(dtype) -> bool:
    return np.dtype(dtype).kind in "ib"


class Scalars:
    """Writes scalar operations with one `ir.IRBuilder`; `declare` gives a module function."""

    def __init__(
        self, builder: ir.IRBuilder, declare: Callable[[str, ir.FunctionType], ir.Function]
    ):
        self.b = builder
        self.declare = declare

    # ---- constants and casts
    def const(self, value, dtype) -> Typed:
        dtype = np.dtype(dtype)
        t = llvm_type(dtype)
        if dtype.kind == "c":
            part = llvm_type(part_dtype(dtype))
            value = complex(value)
            parts = [ir.Constant(part, value.real), ir.Constant(part, value.imag)]
            return Typed(ir.Constant(t, parts), dtype)
        if dtype.kind == "f":
            return Typed(ir.Constant(t, float(value)), dtype)
        if dtype == BOOL:
            return Typed(ir.Constant(t, int(bool(value))), dtype)
        v = int(value)
        if v < 0:
            v += 1 << (8 * dtype.itemsize)
        return Typed(ir.Constant(t, v), dtype)

    def cast(self, x: Typed, dtype) -> Typed:
        dtype = np.dtype(dtype)
        src, b = x.dtype, self.b
        if src == dtype:
            return x
        if dtype == BOOL:
            return Typed(self.truth(x), dtype)
        if dtype.kind == "c":
            part = part_dtype(dtype)
            if src.kind == "c":  # each part cast (Numba's complex_to_complex)
                re, im = self.parts(x)
                return self.make_complex(self.cast(re, part), self.cast(im, part))
            return self.make_complex(self.cast(x, part), self.const(0.0, part))
        if src.kind == "c":
            raise Unsupported(f"a cast of {src} to {dtype}")
        t = llvm_type(dtype)
        if src == BOOL:
            v = b.uitofp(x.value, t) if dtype.kind == "f" else b.zext(x.value, t)
            return Typed(v, dtype)
        if src.kind == "f" and dtype.kind == "f":
            v = b.fpext(x.value, t) if dtype.itemsize > src.itemsize else b.fptrunc(x.value, t)
            return Typed(v, dtype)
        if src.kind == "f":
            return Typed(b.fptosi(x.value, t) if _signed(dtype) else b.fptoui(x.value, t), dtype)
        if dtype.kind == "f":
            return Typed(b.sitofp(x.value, t) if _signed(src) else b.uitofp(x.value, t), dtype)
        if dtype.itemsize < src.itemsize:
            return Typed(b.trunc(x.value, t), dtype)
        if dtype.itemsize == src.itemsize:
            return Typed(x.value, dtype)
        return Typed(b.sext(x.value, t) if _signed(src) else b.zext(x.value, t), dtype)

    def truth(self, x: Typed) -> ir.Value:
        """`x` as an i1: non-zero (nan included) is true."""
        if x.dtype == BOOL:
            return x.value
        if x.dtype.kind == "c":
            re, im = self.parts(x)
            return self.b.or_(self.truth(re), self.truth(im))
        if x.dtype.kind == "f":
            return self.b.fcmp_unordered("!=", x.value, ir.Constant(x.value.type, 0.0))
        return self.b.icmp_unsigned("!=", x.value, ir.Constant(x.value.type, 0))

    def to_memory(self, x: Typed) -> ir.Value:
        return self.b.zext(x.value, ir.IntType(8)) if x.dtype == BOOL else x.value

    def from_memory(self, v: ir.Value, dtype) -> Typed:
        dtype = np.dtype(dtype)
        if dtype == BOOL:
            return Typed(self.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0)), dtype)
        return Typed(v, dtype)

    # ---- complex values
    def parts(self, x: Typed) -> tuple[Typed, Typed]:
        """The real and imaginary parts of a complex value."""
        part = part_dtype(x.dtype)
        b = self.b
        return Typed(b.extract_value(x.value, 0), part), Typed(b.extract_value(x.value, 1), part)

    def make_complex(self, re: Typed, im: Typed) -> Typed:
        """The complex value of two parts of one float dtype."""
        dtype = complex_of(re.dtype)
        out = ir.Constant(llvm_type(dtype), ir.Undefined)
        out = self.b.insert_value(out, re.value, 0)
        return Typed(self.b.insert_value(out, im.value, 1), dtype)

    def _complex_binop(self, op: str, x: Typed, y: Typed, flags: tuple) -> Typed:
        if op not in ("+", "-", "*"):
            raise Unsupported(f"the operator {op} on complex values")
        t = np.promote_types(x.dtype, y.dtype)
        (a, b), (c, d) = self.parts(self.cast(x, t)), self.parts(self.cast(y, t))
        fb = self.b

        def f(fn, u, v):
            out = fn(u.value, v.value)
            out.flags.extend(flags)
            return Typed(out, u.dtype)

        if op == "*":  # CPython's _Py_c_prod, as Numba (before Python 3.14) and NumPy compute it
            re = f(fb.fsub, f(fb.fmul, a, c), f(fb.fmul, b, d))
            im = f(fb.fadd, f(fb.fmul, a, d), f(fb.fmul, b, c))
        else:
            fn = fb.fadd if op == "+" else fb.fsub
            re, im = f(fn, a, c), f(fn, b, d)
        return self.make_complex(re, im)

    def _negate_part(self, x: Typed) -> Typed:
        # Numba's negate_real: -0.0 - x
        return Typed(self.b.fsub(ir.Constant(x.value.type, -0.0), x.value), x.dtype)

    def conjugate(self, x: Typed) -> Typed:
        if x.dtype.kind != "c":
            return x
        re, im = self.parts(x)
        return self.make_complex(re, self._negate_part(im))

    # ---- arithmetic
    def binop(self, op: str, x: Typed, y: Typed, flags: tuple = ()) -> Typed:
        if x.dtype.kind == "c" or y.dtype.kind == "c":
            return self._complex_binop(op, x, y, flags)
        if op == "/":
            t = (
                F64
                if x.dtype.kind != "f" and y.dtype.kind != "f"
                else arithmetic_type(x.dtype, y.dtype)
            )
            x, y = self.cast(x, t), self.cast(y, t)
            return Typed(self.b.fdiv(x.value, y.value), t)
        if op in ("&", "|", "^") and x.dtype == BOOL and y.dtype == BOOL:
            fn = {"&": self.b.and_, "|": self.b.or_, "^": self.b.xor}[op]
            return Typed(fn(x.value, y.value), BOOL)
        t = arithmetic_type(x.dtype, y.dtype)
        x, y = self.cast(x, t), self.cast(y, t)
        a, c, b = x.value, y.value, self.b
        if t.kind == "f":
            if op in ("+", "-", "*"):
                fn = {"+": b.fadd, "-": b.fsub, "*": b.fmul}[op]
                out = fn(a, c)
                out.flags.extend(flags)
                return Typed(out, t)
            if op in ("//", "%"):
                return Typed(self._float_divmod(a, c)[0 if op == "//" else 1], t)
            if op == "**":
                return Typed(b.call(self._intrinsic("llvm.pow", t, 2), [a, c]), t)
            raise Unsupported(f"the operator {op} on {t}")
        if op in ("+", "-", "*"):
            return Typed({"+": b.add, "-": b.sub, "*": b.mul}[op](a, c), t)
        if op in ("&", "|", "^"):
            return Typed({"&": b.and_, "|": b.or_, "^": b.xor}[op](a, c), t)
        if op in ("//", "%"):
            return Typed(self._int_divmod(a, c, t)[0 if op == "//" else 1], t)
        if op in ("<<", ">>"):
            fn = b.shl if op == "<<" else (b.ashr if _signed(t) else b.lshr)
            return Typed(fn(a, c), t)
        raise Unsupported(f"the operator {op} on {t}")

    def _int_divmod(self, a, c, t):
        """Python's floor quotient and remainder on integers; 0 and 0 for a zero divisor and
        for the smallest integer divided by -1 (Numba's `int_divmod_signed`). Branch-free: the
        divisor is made safe before the division, which would trap."""
        b = self.b
        zero, one = ir.Constant(a.type, 0), ir.Constant(a.type, 1)
        width = a.type.width
        if isinstance(c, ir.Constant) and int(c.constant) % (1 << width) not in (
            0,
            (1 << width) - 1,
        ):
            # a constant divisor that is neither 0 nor -1: no guard needed (index arithmetic)
            if not _signed(t):
                return b.udiv(a, c), b.urem(a, c)
            q, r = b.sdiv(a, c), b.srem(a, c)
            fix = b.and_(b.icmp_unsigned("!=", r, zero), b.icmp_signed("<", b.xor(c, r), zero))
            return b.select(fix, b.sub(q, one), q), b.select(fix, b.add(r, c), r)
        bad = b.icmp_unsigned("==", c, zero)
        if _signed(t):
            smallest = ir.Constant(a.type, 1 << (a.type.width - 1))
            minus_one = ir.Constant(a.type, (1 << a.type.width) - 1)
            over = b.and_(b.icmp_unsigned("==", a, smallest), b.icmp_unsigned("==", c, minus_one))
            bad = b.or_(bad, over)
            safe = b.select(bad, one, c)
            q, r = b.sdiv(a, safe), b.srem(a, safe)
            fix = b.and_(b.icmp_unsigned("!=", r, zero), b.icmp_signed("<", b.xor(safe, r), zero))
            q = b.select(fix, b.sub(q, one), q)
            r = b.select(fix, b.add(r, safe), r)
        else:
            safe = b.select(bad, one, c)
            q, r = b.udiv(a, safe), b.urem(a, safe)
        return b.select(bad, zero, q), b.select(bad, zero, r)

    def _float_divmod(self, vx, wx):
        """Python's float floor quotient and remainder (CPython's float_divmod, as Numba
        writes it); a zero divisor gives `vx / wx` and `fmod(vx, wx)` (NumPy's error model)."""
        b = self.b
        t = vx.type
        zero, nzero, one, half = (ir.Constant(t, v) for v in (0.0, -0.0, 1.0, 0.5))
        mod = b.frem(vx, wx)
        div = b.fdiv(b.fsub(vx, mod), wx)
        mod_true = b.fcmp_unordered("!=", mod, zero)
        signs_differ = b.icmp_unsigned(
            "!=", b.fcmp_ordered("<", wx, zero), b.fcmp_ordered("<", mod, zero)
        )
        fix = b.and_(mod_true, signs_differ)
        div = b.select(fix, b.fsub(div, one), div)
        mod = b.select(fix, b.fadd(mod, wx), mod)
        mod = b.select(mod_true, mod, b.select(b.fcmp_ordered("<", wx, zero), nzero, zero))
        div_true = b.fcmp_ordered("!=", div, zero)
        floor = b.call(self._intrinsic("llvm.floor", _dtype_of(t), 1), [div])
        floor = b.select(b.fcmp_ordered(">", b.fsub(div, floor), half), b.fadd(floor, one), floor)
        sq = b.fmul(div, div)
        zero_q = b.fdiv(b.fmul(sq, vx), wx)
        quotient = b.select(div_true, floor, zero_q)
        by_zero = b.fcmp_ordered("==", wx, zero)
        return (
            b.select(by_zero, b.fdiv(vx, wx), quotient),
            b.select(by_zero, b.frem(vx, wx), mod),
        )

    def compare(self, op: str, x: Typed, y: Typed) -> Typed:
        t = unify(x.dtype, y.dtype)
        if t == BOOL:
            t = np.dtype(np.int8)  # compared as integers (True > False)
        x, y = self.cast(x, t), self.cast(y, t)
        if t.kind == "c":
            if op not in ("==", "!="):
                raise Unsupported(f"the comparison {op} of complex values")
            (a, b), (c, d) = self.parts(x), self.parts(y)
            re, im = self.compare(op, a, c).value, self.compare(op, b, d).value
            return Typed(self.b.and_(re, im) if op == "==" else self.b.or_(re, im), BOOL)
        if t.kind == "f":
            if op == "!=":
                return Typed(self.b.fcmp_unordered(op, x.value, y.value), BOOL)
            return Typed(self.b.fcmp_ordered(op, x.value, y.value), BOOL)
        fn = self.b.icmp_signed if _signed(t) else self.b.icmp_unsigned
        return Typed(fn(op, x.value, y.value), BOOL)

    def negate(self, x: Typed) -> Typed:
        if x.dtype.kind == "c":
            re, im = self.parts(x)
            return self.make_complex(self._negate_part(re), self._negate_part(im))
        if x.dtype.kind == "f":
            return Typed(self.b.fneg(x.value), x.dtype)
        t = arithmetic_type(x.dtype, x.dtype)
        x = self.cast(x, t)
        return Typed(self.b.neg(x.value), t)

    def invert(self, x: Typed) -> Typed:
        if x.dtype == BOOL:
            return Typed(self.b.not_(x.value), BOOL)
        if x.dtype.kind in "fc":
            raise Unsupported(f"~ of {x.dtype}")
        x = self.cast(x, arithmetic_type(x.dtype, x.dtype))
        return Typed(self.b.not_(x.value), x.dtype)

    def select(self, cond: ir.Value, x: Typed, y: Typed) -> Typed:
        t = unify(x.dtype, y.dtype)
        x, y = self.cast(x, t), self.cast(y, t)
        return Typed(self.b.select(cond, x.value, y.value), t)

    def extreme(self, largest: bool, x: Typed, y: Typed) -> Typed:
        """Python's max(x, y) (largest) or min(x, y): y where y > x (y < x), else x."""
        picked = self.compare(">" if largest else "<", y, x)
        return self.select(picked.value, y, x)

    # ---- calls
    def _intrinsic(self, name: str, dtype, arity: int) -> ir.Function:
        t = llvm_type(dtype)
        suffix = "f64" if np.dtype(dtype) == F64 else "f32"
        return self.declare(f"{name}.{suffix}", ir.FunctionType(t, [t] * arity))

    def libm(self, name: str, args: list[Typed], dtype) -> Typed:
        """A call of the C math library's `name` (`expf` for float32)."""
        t = llvm_type(dtype)
        symbol = name + ("f" if np.dtype(dtype) == F32 else "")
        fn = self.declare(symbol, ir.FunctionType(t, [t] * len(args)))
        return Typed(self.b.call(fn, [a.value for a in args]), np.dtype(dtype))

    def intrinsic(self, name: str, args: list[Typed], dtype) -> Typed:
        fn = self._intrinsic(name, dtype, len(args))
        return Typed(self.b.call(fn, [a.value for a in args]), np.dtype(dtype))


def _dtype_of(t: ir.Type) -> np.dtype:
    return F64 if isinstance(t, ir.DoubleType) else F32


# ----------------------------------------------------------------------------------------------
# Python's math module and NumPy's scalar functions, as Numba lowers them on floats

# math.<name>: an LLVM intrinsic (Numba's `unary_math_intr`) or the C library (`unary_math_extern`)
_MATH_INTRINSICS = {
    "exp": "llvm.exp",
    "exp2": "llvm.exp2",
    "log": "llvm.log",
    "log10": "llvm.log10",
    "sin": "llvm.sin",
    "cos": "llvm.cos",
    "fabs": "llvm.fabs",
    "pow": "llvm.pow",
    "copysign": "llvm.copysign",
}
_MATH_EXTERNS = {
    "log1p",
    "expm1",
    "erf",
    "erfc",
    "tan",
    "asin",
    "acos",
    "atan",
    "asinh",
    "acosh",
    "atanh",
    "sinh",
    "cosh",
    "tanh",
    "log2",
    "sqrt",
    "lgamma",
    "atan2",
    "hypot",
}
# np.<name> on a float scalar
_NP_INTRINSICS = {
    "floor": "llvm.floor",
    "ceil": "llvm.ceil",
    "trunc": "llvm.trunc",
    "rint": "llvm.rint",
    "copysign": "llvm.copysign",
}
_NP_EXTERNS = {"arccosh": "acosh", "arcsinh": "asinh", "arctanh": "atanh"}


class ExpressionCompiler:
    """Compiles one Python expression (a template filled in with names) against `env`, the
    typed values of the names; `vmath(name, dtype, args)` writes a call of tracegrad.vmath's
    function (`_vm.<name>_f64`)."""

    def __init__(self, scalars: Scalars, env: dict[str, Typed], vmath: Callable):
        self.s, self.env, self.vmath = scalars, env, vmath

    def compile(self, text: str) -> Typed:
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise Unsupported(f"an expression that is not Python: {text!r}") from exc
        return self.expr(tree.body)

    def expr(self, node: ast.expr) -> Typed:
        s = self.s
        if isinstance(node, ast.Name):
            if node.id not in self.env:
                raise Unsupported(f"the name {node.id}")
            return self.env[node.id]
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool):
                return s.const(v, BOOL)
            if isinstance(v, int):
                if not -(1 << 63) <= v < (1 << 63):
                    raise Unsupported(f"the integer literal {v}")
                return s.const(v, I64)
            if isinstance(v, float):
                return s.const(v, F64)
            raise Unsupported(f"the literal {v!r}")
        if isinstance(node, ast.BinOp):
            ops = {
                ast.Add: "+",
                ast.Sub: "-",
                ast.Mult: "*",
                ast.Div: "/",
                ast.FloorDiv: "//",
                ast.Mod: "%",
                ast.Pow: "**",
                ast.BitAnd: "&",
                ast.BitOr: "|",
                ast.BitXor: "^",
                ast.LShift: "<<",
                ast.RShift: ">>",
            }
            op = ops.get(type(node.op))
            if op is None:
                raise Unsupported(f"the operator {ast.dump(node.op)}")
            a, b = self.expr(node.left), self.expr(node.right)
            if op == "**":
                return self.power(a, b, node.right)
            return s.binop(op, a, b)
        if isinstance(node, ast.UnaryOp):
            x = self.expr(node.operand)
            if isinstance(node.op, ast.USub):
                return s.negate(x)
            if isinstance(node.op, ast.UAdd):
                return x
            if isinstance(node.op, ast.Not):
                return Typed(s.b.not_(s.truth(x)), BOOL)
            return s.invert(x)
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                raise Unsupported("a chained comparison")
            ops = {
                ast.Lt: "<",
                ast.LtE: "<=",
                ast.Gt: ">",
                ast.GtE: ">=",
                ast.Eq: "==",
                ast.NotEq: "!=",
            }
            op = ops.get(type(node.ops[0]))
            if op is None:
                raise Unsupported(f"the comparison {ast.dump(node.ops[0])}")
            return s.compare(op, self.expr(node.left), self.expr(node.comparators[0]))
        if isinstance(node, ast.BoolOp):
            values = [self.expr(v) for v in node.values]
            if any(v.dtype != BOOL for v in values):
                raise Unsupported("and/or of values that are not bools")
            out = values[0].value
            for v in values[1:]:
                out = (
                    s.b.and_(out, v.value)
                    if isinstance(node.op, ast.And)
                    else s.b.or_(out, v.value)
                )
            return Typed(out, BOOL)
        if isinstance(node, ast.IfExp):
            cond = s.truth(self.expr(node.test))
            return s.select(cond, self.expr(node.body), self.expr(node.orelse))
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Attribute) and node.attr in ("real", "imag"):
            x = self.expr(node.value)
            if x.dtype.kind == "c":
                return s.parts(x)[0 if node.attr == "real" else 1]
            if x.dtype.kind != "f":
                raise Unsupported(f".{node.attr} of {x.dtype}")
            return x if node.attr == "real" else s.const(0.0, x.dtype)  # Numba's real_imag_impl
        raise Unsupported(f"the expression {ast.dump(node)[:60]}")

    def power(self, a: Typed, b: Typed, exponent: ast.expr) -> Typed:
        # float ** float is pow(); an integer exponent makes Numba multiply repeatedly, which
        # this compiler does not copy (except x ** 0, which is 1)
        if b.dtype.kind == "f" and a.dtype.kind == "f":
            return self.s.binop("**", a, b)
        if isinstance(exponent, ast.Constant) and exponent.value == 0 and a.dtype.kind == "f":
            return self.s.const(1.0, a.dtype)
        n = exponent.value if isinstance(exponent, ast.Constant) else None
        if a.dtype == F64 and type(n) is int and 0 < n <= 64:
            # Numba's static_power_impl: the loop of repeated squaring unrolled, from 1.0 * x
            out, square = None, a
            while n:
                if n & 1:
                    out = square if out is None else self.s.binop("*", out, square)
                n >>= 1
                if n:
                    square = self.s.binop("*", square, square)
            return out
        raise Unsupported(f"{a.dtype} ** {b.dtype}")

    def call(self, node: ast.Call) -> Typed:
        if node.keywords:
            raise Unsupported("a call with keywords")
        f = node.func
        s = self.s
        if isinstance(f, ast.Attribute) and f.attr == "conjugate" and not node.args:
            x = self.expr(f.value)
            if x.dtype.kind not in "fc":
                raise Unsupported(f".conjugate() of {x.dtype}")
            return s.conjugate(x)
        args = [self.expr(a) for a in node.args]
        if isinstance(f, ast.Name) and f.id == "complex" and len(args) in (1, 2):
            return self.complex_(args)
        if isinstance(f, ast.Name):
            name = f.id
            if name in ("min", "max") and len(args) == 2:
                return s.extreme(name == "max", *args)
            if name == "abs" and len(args) == 1:
                return self.absolute(args[0])
            if name in ("float", "int", "bool"):
                return s.cast(args[0], {"float": F64, "int": I64, "bool": BOOL}[name])
            raise Unsupported(f"the function {name}")
        if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)):
            raise Unsupported(f"the call {ast.dump(f)[:60]}")
        module, name = f.value.id, f.attr
        if module == "np":
            return self.numpy(name, args)
        if module == "math":
            return self.math(name, args)
        if module == "cmath":
            return self.cmath(name, args)
        if module == "_vm":
            base, _, suffix = name.rpartition("_")
            dtype = {"f64": F64, "f32": F32}.get(suffix)
            if dtype is None:
                raise Unsupported(f"the vmath function {name}")
            return self.vmath(base, dtype, [s.cast(a, dtype) for a in args])
        raise Unsupported(f"the module {module}")

    def complex_(self, args: list[Typed]) -> Typed:
        """Python's complex(re[, im]) as Numba types it: complex64 from float32 parts only."""
        s = self.s
        part = F32 if all(a.dtype == F32 for a in args) else F64
        if any(a.dtype.kind == "c" for a in args):
            if len(args) == 1:  # complex(z): complex128, even of a complex64 (Numba's typing)
                return s.cast(args[0], C128)
            raise Unsupported("complex() of a complex value and another")
        re = s.cast(args[0], part)
        im = s.cast(args[1], part) if len(args) == 2 else s.const(0.0, part)
        return s.make_complex(re, im)

    def cmath(self, name: str, args: list[Typed]) -> Typed:
        """cmath.<name>(z) on a complex128 value, as Numba computes it (cmath_ir.py)."""
        from .cmath_ir import PROGRAMS

        program = PROGRAMS.get(name)
        if program is None or len(args) != 1:
            raise Unsupported(f"cmath.{name}")
        (z,) = args
        if z.dtype.kind != "c":
            z = self.s.cast(z, C128)
        if z.dtype != C128:
            raise Unsupported(f"cmath.{name} of {z.dtype}")
        s = self.s
        x, y = s.parts(z)
        env = {"z": z, "x": x, "y": y, "NAN": s.const(float("nan"), F64)}
        env["xf"], env["yf"] = (self.numpy("isfinite", [v]) for v in (x, y))
        inner = ExpressionCompiler(s, env, self.vmath)
        for target, text in program:
            env[target] = inner.compile(text)
        return s.cast(env[program[-1][0]], C128)

    def absolute(self, x: Typed) -> Typed:
        if x.dtype.kind == "c":  # Numba's complex_abs_impl: math.hypot(z.real, z.imag)
            re, im = self.s.parts(x)
            return self.s.libm("hypot", [re, im], re.dtype)
        if x.dtype.kind == "f":
            return self.s.intrinsic("llvm.fabs", [x], x.dtype)
        if x.dtype == BOOL:
            raise Unsupported("abs of a bool")
        if x.dtype.kind == "u":
            return x
        neg = self.s.b.icmp_signed("<", x.value, ir.Constant(x.value.type, 0))
        return Typed(self.s.b.select(neg, self.s.b.neg(x.value), x.value), x.dtype)

    def _floats(self, args: list[Typed], name: str) -> np.dtype:
        """Numba converts integer arguments of a math function to float64."""
        dtypes = {a.dtype for a in args}
        if dtypes <= {F64, F32} and len(dtypes) == 1:
            return dtypes.pop()
        if all(d.kind in "iub" for d in dtypes) or (F64 in dtypes):
            return F64
        raise Unsupported(f"{name} of {sorted(map(str, dtypes))}")

    def math(self, name: str, args: list[Typed]) -> Typed:
        s = self.s
        if name in ("isnan", "isinf", "isfinite"):
            return self.numpy(name, args)
        t = self._floats(args, f"math.{name}")
        args = [s.cast(a, t) for a in args]
        if name in _MATH_INTRINSICS:
            return s.intrinsic(_MATH_INTRINSICS[name], args, t)
        if name in _MATH_EXTERNS:
            return s.libm(name, args, t)
        raise Unsupported(f"math.{name}")

    def numpy(self, name: str, args: list[Typed]) -> Typed:
        s = self.s
        if name in _DTYPES and len(args) == 1:
            return s.cast(args[0], _DTYPES[name])
        if name == "bool_" and len(args) == 1:
            return s.cast(args[0], BOOL)
        (x, *rest) = args
        if x.dtype.kind != "f":
            raise Unsupported(f"np.{name} of {x.dtype}")
        b = s.b
        if name == "isnan":
            return Typed(b.fcmp_unordered("uno", x.value, x.value), BOOL)
        if name in ("isinf", "isfinite"):
            mag = s.intrinsic("llvm.fabs", [x], x.dtype).value
            inf = ir.Constant(x.value.type, float("inf"))
            if name == "isinf":
                return Typed(b.fcmp_ordered("==", mag, inf), BOOL)
            return Typed(b.fcmp_ordered("!=", mag, inf), BOOL)  # nan: unordered, so false
        if name == "signbit":
            width = 8 * x.dtype.itemsize
            bits = b.bitcast(x.value, ir.IntType(width))
            return Typed(b.icmp_signed("<", bits, ir.Constant(ir.IntType(width), 0)), BOOL)
        if name == "sign" and not rest:
            zero = ir.Constant(x.value.type, 0.0)
            pos = b.fcmp_ordered(">", x.value, zero)
            neg = b.fcmp_ordered("<", x.value, zero)
            one, minus = ir.Constant(x.value.type, 1.0), ir.Constant(x.value.type, -1.0)
            return Typed(b.select(pos, one, b.select(neg, minus, x.value)), x.dtype)
        if name in _NP_INTRINSICS:
            t = x.dtype if not rest else arithmetic_type(x.dtype, rest[0].dtype)
            return s.intrinsic(_NP_INTRINSICS[name], [s.cast(a, t) for a in args], t)
        if name == "fmod" and rest and rest[0].dtype == x.dtype:
            return Typed(b.frem(x.value, rest[0].value), x.dtype)
        if name in _NP_EXTERNS and not rest:
            return s.libm(_NP_EXTERNS[name], [x], x.dtype)
        raise Unsupported(f"np.{name}")
