"""The loop IR printed as LLVM IR: a fused loop's kernel for llvmlite, beside the Numba printer.

`print_kernel` writes the same statements `cpu/kernels.py` prints as Python source for Numba, as
one LLVM module with two functions:

    void @kernel(i8** data, i64 first, i64 last, i64 finish)
        the loop nest over the axis-0 chunks first..last-1; `data` holds the arrays' data
        pointers in argument order (the kernel's buffers, then its partial-results arrays), and
        callers from native code call it;
    i32 @kernel_py(PyObject* a0, ..., i64 first, i64 last, i64 finish)
        what Python calls through ctypes: it reads each NumPy array's data pointer from the
        array object and calls `kernel`, after checking that every array is C-contiguous,
        aligned and of the shape it was compiled for; it returns 1 (and computes nothing) when
        one is not, or when the chunks asked for are not chunks of this kernel, and the caller
        runs the Numba kernel instead.

Unlike the Numba kernels, which take sizes and constants as run-time arguments so that one
compiled kernel serves every shape, these have the shapes, offsets and constants written in: a
kernel compiles in milliseconds, and constant sizes let LLVM lay out loops and addresses. The
scalar expressions are compiled by `scalars.py` with Numba's semantics; a reduction's step adds
with the `reassoc` flag, as the Numba kernels' `_radd` does, and nothing else carries fast-math
flags (the vmath functions keep their own `contract`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir

from ... import primitives as P
from ...fusion import loop_ir as L
from ...fusion.render import NATIVE, combine_text, render_math, render_node
from ...fusion.steps import Buffer, Clamp, Compute, Equal, Inside, Literal, Load, Select
from .scalars import (
    BOOL,
    I64,
    ExpressionCompiler,
    Scalars,
    Typed,
    Unsupported,
    llvm_type,
    memory_type,
)

KERNEL = "__tg_kernel__"
I8P = ir.IntType(8).as_pointer()
I64T = ir.IntType(64)

# Where a NumPy array object keeps what a kernel needs (PyArrayObject_fields, stable since
# NumPy 1.7): checked against a live array before the first kernel is called (`layout_ok`).
ARRAY_DATA, ARRAY_DIMS, ARRAY_FLAGS = 16, 32, 64
C_CONTIGUOUS, ALIGNED = 0x0001, 0x0100


@dataclass
class NativeKernel:
    """A kernel printed as LLVM IR: its text (the function names still `KERNEL...`, replaced by
    `name` when compiled), the arrays it takes, in order, and their shapes."""

    text: str
    name: str
    arrays: list  # Buffers, then the partial results' names
    shapes: list[tuple[int, ...]]
    vmath: set = field(default_factory=set)


class _Printer:
    def __init__(self, kernel: L.Kernel, shape, nch: int, mode: str, declare_vmath):
        self.kernel, self.shape, self.nch, self.mode = kernel, tuple(shape), nch, mode
        self.module = ir.Module(name="tracegrad_kernel")
        self.declare_vmath = declare_vmath
        self.vmath_used: set = set()
        self.arrays: list = [a for a in kernel.args if not isinstance(a, str)]
        sizes = {f"n{a}": d for a, d in enumerate(self.shape)} | {"nch": nch}
        self.partials = {}
        for name, dims, dtype in kernel.info.get("partials", []):
            self.partials[name] = (tuple(sizes[d] for d in dims), np.dtype(dtype))
            self.arrays.append(name)
        self.sizes = sizes

    # ---- the module's functions
    def declare(self, name: str, fnty: ir.FunctionType) -> ir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, fnty, name=name)
        return fn

    def print(self) -> NativeKernel:
        fnty = ir.FunctionType(ir.VoidType(), [I8P.as_pointer(), I64T, I64T, I64T])
        fn = ir.Function(self.module, fnty, name=KERNEL)
        data, first, last, finish = fn.args
        self.entry = fn.append_basic_block("entry")
        body = fn.append_basic_block("body")
        self.b = ir.IRBuilder(body)
        self.s = Scalars(self.b, self.declare)
        self.vars: dict[str, ir.Value] = {}  # name -> its alloca
        self.var_types: dict[str, np.dtype] = {}
        self.values: dict[str, Typed] = {}  # SSA values: ops, sizes
        self.values |= {n: self.s.const(v, I64) for n, v in self.sizes.items()}
        self.values |= {"first": Typed(first, I64), "last": Typed(last, I64)}
        self.values["finish"] = Typed(finish, I64)
        self.base: dict[int, ir.Value] = {}
        self.base_by_name: dict[str, ir.Value] = {}
        for k, a in enumerate(self.arrays):
            ptr = self.b.load(self.b.gep(data, [ir.Constant(I64T, k)]))
            dtype = a.dtype if isinstance(a, Buffer) else self.partials[a][1]
            typed_ptr = self.b.bitcast(ptr, memory_type(dtype).as_pointer(), name=f"b{k}")
            if isinstance(a, Buffer):
                self.base[id(a)] = typed_ptr
            else:
                self.base_by_name[a] = typed_ptr
        self.statements(self.kernel.body)
        self.b.ret_void()
        ir.IRBuilder(self.entry).branch(body)
        self.python_entry(fn)
        shapes = [
            tuple(a.shape) if isinstance(a, Buffer) else self.partials[a][0] for a in self.arrays
        ]
        return NativeKernel(str(self.module), "", self.arrays, shapes, self.vmath_used)

    def python_entry(self, kernel_fn: ir.Function) -> None:
        n = len(self.arrays)
        fnty = ir.FunctionType(ir.IntType(32), [I8P] * n + [I64T, I64T, I64T])
        fn = ir.Function(self.module, fnty, name=KERNEL + "_py")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        bad = b.append_basic_block("refuse")
        data = b.alloca(I8P, ir.Constant(I64T, n or 1), name="data")
        first, last = fn.args[n], fn.args[n + 1]
        # the chunks asked for are chunks of this kernel (0 <= first <= last <= nch)
        zero, nch = ir.Constant(I64T, 0), ir.Constant(I64T, self.nch)
        ok = b.and_(b.icmp_signed("<=", zero, first), b.icmp_signed("<=", first, last))
        ok = b.and_(ok, b.icmp_signed("<=", last, nch))
        arrays = b.append_basic_block("arrays")
        b.cbranch(ok, arrays, bad)
        b.position_at_end(arrays)
        for k, a in enumerate(self.arrays):
            obj = fn.args[k]
            shape = tuple(a.shape) if isinstance(a, Buffer) else self.partials[a][0]
            flags = b.load(
                b.bitcast(b.gep(obj, [ir.Constant(I64T, ARRAY_FLAGS)]), ir.IntType(32).as_pointer())
            )
            want = ir.Constant(ir.IntType(32), C_CONTIGUOUS | ALIGNED)
            ok = b.icmp_unsigned("==", b.and_(flags, want), want)
            dims = b.load(
                b.bitcast(
                    b.gep(obj, [ir.Constant(I64T, ARRAY_DIMS)]), I64T.as_pointer().as_pointer()
                )
            )
            for axis, d in enumerate(shape):
                got = b.load(b.gep(dims, [ir.Constant(I64T, axis)]))
                ok = b.and_(ok, b.icmp_unsigned("==", got, ir.Constant(I64T, d)))
            next_block = b.append_basic_block(f"array{k}")
            b.cbranch(ok, next_block, bad)
            b.position_at_end(next_block)
            ptr = b.load(b.bitcast(b.gep(obj, [ir.Constant(I64T, ARRAY_DATA)]), I8P.as_pointer()))
            b.store(ptr, b.gep(data, [ir.Constant(I64T, k)]))
        b.call(kernel_fn, [data, *fn.args[n:]])
        b.ret(ir.Constant(ir.IntType(32), 0))
        b.position_at_end(bad)
        b.ret(ir.Constant(ir.IntType(32), 1))

    # ---- names
    def var(self, name: str, dtype) -> ir.Value:
        dtype = np.dtype(dtype)
        slot = self.vars.get(name)
        if slot is None:
            with_entry = ir.IRBuilder(self.entry)
            slot = with_entry.alloca(
                memory_type(dtype) if dtype == BOOL else llvm_type(dtype), name=name
            )
            self.vars[name], self.var_types[name] = slot, dtype
        elif self.var_types[name] != dtype:
            raise Unsupported(f"{name} holds values of two types ({self.var_types[name]}, {dtype})")
        return slot

    def env(self) -> dict:
        return _Env(self)

    def expr_text(self, text: str) -> Typed:
        return ExpressionCompiler(self.s, self.env(), self.vmath_call).compile(text)

    def vmath_call(self, name: str, dtype, args: list[Typed]) -> Typed:
        fn = self.declare_vmath(self, name, dtype)
        self.vmath_used.add((name, np.dtype(dtype).name))
        return Typed(self.b.call(fn, [a.value for a in args]), np.dtype(dtype))

    # ---- expressions of the loop IR
    def index_value(self, ix) -> Typed:
        if isinstance(ix, str):
            return self.s.cast(self.expr_text(ix), I64)
        if ix.var is None:
            return self.s.const(ix.offset, I64)
        v = self.s.cast(self.lookup(ix.var), I64).value
        if ix.stride != 1:
            v = self.b.mul(v, ir.Constant(I64T, ix.stride))
        if ix.offset:
            v = self.b.add(v, ir.Constant(I64T, ix.offset))
        return Typed(v, I64)

    def lookup(self, name: str) -> Typed:
        return self.env()[name]

    def address(self, array, index) -> tuple[ir.Value, np.dtype]:
        if isinstance(array, Buffer):
            base, shape, dtype = self.base[id(array)], tuple(array.shape), np.dtype(array.dtype)
        elif array in self.partials:
            base = self.base_by_name[array]
            shape, dtype = self.partials[array]
        else:
            raise Unsupported(f"the array {array}")
        if len(index) != len(shape):
            raise Unsupported(f"an index of {len(index)} axes into {len(shape)}")
        flat = None
        stride = 1
        for ix, d in reversed(list(zip(index, shape, strict=True))):
            term = self.index_value(ix).value
            if stride != 1:
                term = self.b.mul(term, ir.Constant(I64T, stride))
            flat = term if flat is None else self.b.add(flat, term)
            stride *= d
        if flat is None:
            flat = ir.Constant(I64T, 0)
        return self.b.gep(base, [flat]), dtype

    def load(self, array, index) -> Typed:
        ptr, dtype = self.address(array, index)
        return self.s.from_memory(self.b.load(ptr), dtype)

    def expr(self, e) -> Typed:
        if isinstance(e, str):
            return self.expr_text(e)
        if isinstance(e, L.Elem):
            return self.load(e.array, e.index)
        if isinstance(e, L.Identity):
            return self.s.const(P.MONOIDS[e.op].identity(np.dtype(e.dtype)).item(), e.dtype)
        if isinstance(e, L.Combine):
            return self.combine(e)
        if isinstance(e, L.Cast):
            return self.s.cast(self.expr(e.value), e.dtype)
        if isinstance(e, L.BinOp):
            return self.s.binop(e.op, self.expr(e.left), self.expr(e.right))
        raise Unsupported(f"the expression {e!r}")

    def combine(self, c: L.Combine) -> Typed:
        a, b = self.expr(c.a), self.expr(c.b)
        monoid = P.MONOIDS[c.op]
        if monoid.reassociate and np.dtype(c.dtype).kind in "fc" and c.reassociate:
            op = {"sum": "+", "prod": "*"}[c.op]
            return self.s.binop(op, a, b, flags=("reassoc",))  # the helpers `_radd`, `_rmul`
        env = {"__a": a, "__b": b}
        out = ExpressionCompiler(self.s, env, self.vmath_call).compile(
            combine_text(c.op, "__a", "__b")
        )
        if c.reassociate and monoid.reassociate:
            return out  # written inline, as the Numba printer writes it
        if c.reassociate:
            return out  # `_rmax`, `_rmin`: the same expression in a function of its own
        return out if np.dtype(c.dtype) in NATIVE else self.s.cast(out, c.dtype)

    # ---- ops
    def let(self, op) -> None:
        s = self.s
        if isinstance(op, Load):
            value = self.load(op.buffer, op.index)
        elif isinstance(op, Literal):
            v = np.asarray(op.value)
            value = s.const(v.item(), v.dtype)
        elif isinstance(op, Compute):
            value = self.compute(op)
        elif isinstance(op, Clamp):
            base = self.index_value(op.base)
            low = s.extreme(True, base, s.const(0, I64))
            value = s.extreme(False, low, s.const(op.length - 1, I64))
        elif isinstance(op, Inside):
            base = self.index_value(op.base)
            above = s.compare(">=", base, s.const(0, I64))
            below = s.compare("<", base, s.const(op.length, I64))
            value = s.binop("&", above, below)
        elif isinstance(op, Select):
            cond = s.truth(self.lookup(op.cond))
            value = s.select(cond, self.lookup(op.then), self.lookup(op.other))
        elif isinstance(op, Equal):
            value = s.compare("==", self.index_value(op.a), self.index_value(op.b))
        else:
            raise Unsupported(f"the op {type(op).__name__}")
        _name(value, op.id)
        self.values[op.id] = value

    def compute(self, op: Compute) -> Typed:
        node = op.node
        text = render_node(node, op.args, self.mode)
        value = self.expr_text(text)
        return self.s.cast(value, node.out.dtype)

    def let_pair(self, st: L.LetPair) -> None:
        callee = render_math(st.call, st.dtype, self.mode)
        if not callee.startswith("_vm."):
            raise Unsupported(f"the pair {st.call} without vmath")
        base, _, _ = callee[len("_vm.") :].rpartition("_")
        dtype = np.dtype(st.dtype)
        fn = self.declare_vmath(self, base, dtype)
        self.vmath_used.add((base, dtype.name))
        arg = self.s.cast(self.lookup(st.arg), dtype)
        t = llvm_type(dtype)
        out1, out2 = self.b.alloca(t), self.b.alloca(t)
        self.b.call(fn, [arg.value, out1, out2])
        first = Typed(self.b.load(out1), dtype)
        second = Typed(self.b.load(out2), dtype)
        self.values[st.first.id] = self.s.cast(first, st.first.node.out.dtype)
        self.values[st.second.id] = self.s.cast(second, st.second.node.out.dtype)

    # ---- statements
    def statements(self, body: list) -> None:
        for st in body:
            if isinstance(st, L.Let):
                self.let(st.op)
            elif isinstance(st, L.LetPair):
                self.let_pair(st)
            elif isinstance(st, L.Assign):
                self.assign(st)
            elif isinstance(st, L.For):
                self.loop(st)
            elif isinstance(st, L.While):
                self.while_loop(st)
            elif isinstance(st, L.If):
                self.branch(st)
            elif isinstance(st, L.Note):
                continue
            else:
                raise Unsupported(f"the statement {type(st).__name__}")

    def assign(self, st: L.Assign) -> None:
        value = self.expr(st.value)
        if st.update is not None:
            current = (
                self.expr(st.target) if isinstance(st.target, L.Elem) else self.lookup(st.target)
            )
            value = self.s.binop(st.update, current, value)
        if isinstance(st.target, L.Elem):
            ptr, dtype = self.address(st.target.array, st.target.index)
            self.b.store(self.s.to_memory(self.s.cast(value, dtype)), ptr)
            return
        slot = self.var(st.target, value.dtype)
        self.b.store(self.s.to_memory(value), slot)

    def loop(self, st: L.For) -> None:
        if st.step is not None:
            step = self.expr_text(st.step)
            if not (isinstance(step.value, ir.Constant) and int(step.value.constant) > 0):
                raise Unsupported("a loop with a step that is not a positive constant")
        start = (
            self.s.cast(self.expr_text(st.start), I64)
            if st.start is not None
            else self.s.const(0, I64)
        )
        stop = self.s.cast(self.expr_text(st.stop), I64)
        step_value = (
            self.s.cast(self.expr_text(st.step), I64).value if st.step else ir.Constant(I64T, 1)
        )
        slot = self.var(st.var, I64)
        b = self.b
        b.store(start.value, slot)
        head = b.append_basic_block(f"{st.var}.head")
        body = b.append_basic_block(f"{st.var}.body")
        done = b.append_basic_block(f"{st.var}.done")
        b.branch(head)
        b.position_at_end(head)
        i = b.load(slot)
        b.cbranch(b.icmp_signed("<", i, stop.value), body, done)
        b.position_at_end(body)
        self.statements(st.body)
        b.store(b.add(b.load(slot), step_value), slot)
        b.branch(head)
        b.position_at_end(done)

    def while_loop(self, st: L.While) -> None:
        b = self.b
        head = b.append_basic_block("while.head")
        body = b.append_basic_block("while.body")
        done = b.append_basic_block("while.done")
        b.branch(head)
        b.position_at_end(head)
        b.cbranch(self.s.truth(self.expr_text(st.cond)), body, done)
        b.position_at_end(body)
        self.statements(st.body)
        b.branch(head)
        b.position_at_end(done)

    def branch(self, st: L.If) -> None:
        b = self.b
        cond = self.s.truth(self.expr_text(st.cond))
        then = b.append_basic_block("then")
        other = b.append_basic_block("else") if st.orelse is not None else None
        done = b.append_basic_block("endif")
        b.cbranch(cond, then, other or done)
        b.position_at_end(then)
        self.statements(st.body)
        b.branch(done)
        if other is not None:
            b.position_at_end(other)
            self.statements(st.orelse)
            b.branch(done)
        b.position_at_end(done)


def _name(value: Typed, name: str) -> None:
    """Gives an op's instruction the op's name (`v3`), so the LLVM IR reads like the loop IR."""
    v = value.value
    if isinstance(v, ir.Instruction) and not v.name:
        v.name = name


class _Env(dict):
    """The names an expression may read: the ops' values, sizes, and the kernel's variables
    (loaded where they are read)."""

    def __init__(self, printer: _Printer):
        super().__init__()
        self.p = printer

    def __contains__(self, name) -> bool:
        return name in self.p.values or name in self.p.vars

    def __getitem__(self, name: str) -> Typed:
        if name in self.p.values:
            return self.p.values[name]
        if name in self.p.vars:
            dtype = self.p.var_types[name]
            return self.p.s.from_memory(self.p.b.load(self.p.vars[name]), dtype)
        raise Unsupported(f"the name {name}")


def print_kernel(kernel: L.Kernel, shape, nch: int, mode: str, declare_vmath) -> NativeKernel:
    """The LLVM module of one CPU kernel of the loop IR (`cpu/lowering.py`, after
    `kernels.pair_math`; not `outline_rows`, a remedy for Numba's code model), for the
    iteration space `shape` in `nch` chunks. `declare_vmath(printer, name, dtype)` declares a
    vmath function in the printer's module. Raises `Unsupported` for what it cannot write."""
    printed = _Printer(kernel, shape, nch, mode, declare_vmath).print()
    key = hashlib.sha256(printed.text.encode()).hexdigest()[:24]
    printed.name = f"tg_{key}"
    printed.text = printed.text.replace(KERNEL, printed.name)
    return printed
