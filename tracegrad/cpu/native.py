"""What compiled code needs to share a program's steps between threads: atomic counters, a
wait that spins and then yields, and OpenBLAS's gemm called by address (runner.py).

Numba has no atomics on the cpu target, so the counters are LLVM's own instructions, written as
intrinsics. A gemm is called through the address of NumPy's bundled `cblas_?gemm` (its ILP64
interface, 64-bit integers), passed in as an integer: the compiled functions that call it hold no
address of this process, so Numba can cache them on disk.
"""

from __future__ import annotations

import ctypes
import functools
import platform

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ..base import blas_threads

# Spins of a wait before it starts giving its core away (sched_yield) on every round: a spin
# round is tens of nanoseconds, so this is a few tens of microseconds of spinning.
SPINS_BEFORE_YIELD = 2000
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def _cell(context, builder, array_type, array, index):
    ary = context.make_array(array_type)(context, builder, array)
    return cgutils.get_item_pointer(context, builder, array_type, ary, [index])


@intrinsic
def fetch_add(typingctx, cells, index, value):
    """cells[index] += value, atomically; the value before the addition."""
    if not (isinstance(cells, types.Array) and cells.dtype == types.int64):
        return None

    def codegen(context, builder, sig, args):
        cells_v, index_v, value_v = args
        ptr = _cell(context, builder, sig.args[0], cells_v, index_v)
        value_v = context.cast(builder, value_v, sig.args[2], types.int64)
        return builder.atomic_rmw("add", ptr, value_v, "seq_cst")

    return types.int64(cells, index, value), codegen


@intrinsic
def load_acquire(typingctx, cells, index):
    """cells[index], read atomically (what other threads wrote before their fetch_add)."""
    if not (isinstance(cells, types.Array) and cells.dtype == types.int64):
        return None

    def codegen(context, builder, sig, args):
        ptr = _cell(context, builder, sig.args[0], *args)
        return builder.load_atomic(ptr, "acquire", 8)

    return types.int64(cells, index), codegen


@intrinsic
def pause(typingctx):
    """The spin-wait hint (x86 `pause`; a no-op elsewhere)."""

    def codegen(context, builder, sig, args):
        if _X86:
            fnty = ir.FunctionType(ir.VoidType(), [])
            builder.call(
                cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse2.pause"), []
            )
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def yield_core(typingctx):
    """sched_yield(): let another runnable thread have this core."""

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.IntType(32), [])
        builder.call(cgutils.get_or_insert_function(builder.module, fnty, "sched_yield"), [])
        return context.get_dummy_value()

    return types.none(), codegen


@njit(nogil=True, cache=True)
def wait_for(cells, index, count):
    """Wait until cells[index] reaches `count`: spin, then yield the core on every round."""
    spins = 0
    while load_acquire(cells, index) < count:
        if spins < SPINS_BEFORE_YIELD:
            spins += 1
            pause()
        else:
            yield_core()


@intrinsic
def _call_gemm(typingctx, address, scalar, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """cblas_?gemm(RowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) through the
    function at `address`; a, b, c are data addresses and `scalar` an array of the element type."""
    if not isinstance(scalar, types.Array) or scalar.dtype not in (types.float64, types.float32):
        return None
    sig = types.none(address, scalar, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)

    def codegen(context, builder, sig, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        real = ir.DoubleType() if sig.args[1].dtype == types.float64 else ir.FloatType()
        ptr = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(
            ir.VoidType(),
            [i32, i32, i32, i64, i64, i64, real, ptr, i64, ptr, i64, real, ptr, i64],
        )
        (
            address_v,
            _,
            ta_v,
            tb_v,
            m_v,
            n_v,
            k_v,
            alpha_v,
            a_v,
            lda_v,
            b_v,
            ldb_v,
            beta_v,
            c_v,
            ldc_v,
        ) = args
        fn = builder.inttoptr(address_v, fnty.as_pointer())

        def i(v, t):
            return context.cast(builder, v, t, types.int64)

        def f(v, t):
            return context.cast(builder, v, t, sig.args[1].dtype)

        def p(v):
            return builder.inttoptr(v, ptr)

        ty = sig.args
        builder.call(
            fn,
            [
                ir.Constant(i32, 101),  # CblasRowMajor
                builder.trunc(i(ta_v, ty[2]), i32),
                builder.trunc(i(tb_v, ty[3]), i32),
                i(m_v, ty[4]),
                i(n_v, ty[5]),
                i(k_v, ty[6]),
                f(alpha_v, ty[7]),
                p(a_v),
                i(lda_v, ty[9]),
                p(b_v),
                i(ldb_v, ty[11]),
                f(beta_v, ty[12]),
                p(c_v),
                i(ldc_v, ty[14]),
            ],
        )
        return context.get_dummy_value()

    return sig, codegen


def layout(rows: int, cols: int, s0: int, s1: int, item: int) -> tuple[int, int]:
    """How row-major cblas reads a rows x cols matrix of strides (s0, s1) bytes in place:
    (111, lda) as it is, (112, lda) as the transpose of a row-major matrix, or (0, 0) when it
    cannot (the matrix must be copied first). Plain Python, also compiled (`_layout`)."""
    if s0 % item != 0 or s1 % item != 0:
        return 0, 0
    r0 = s0 // item if rows > 1 else max(cols, 1)
    r1 = s1 // item if cols > 1 else 1
    if r1 == 1 and r0 >= max(cols, 1):
        return 111, r0
    t0 = s0 // item if rows > 1 else 1
    t1 = s1 // item if cols > 1 else max(rows, 1)
    if t0 == 1 and t1 >= max(rows, 1):
        return 112, t1
    return 0, 0


_layout = njit(nogil=True, cache=True)(layout)


@njit(nogil=True, cache=True)
def _operand(x):
    """(transpose flag, leading dimension, x or a contiguous copy) of a 2-D operand for a
    row-major cblas call. The runner checks its operands' layouts before a call (runner.py),
    so the copy is only a safeguard."""
    flag, ld = _layout(x.shape[0], x.shape[1], x.strides[0], x.strides[1], x.itemsize)
    if flag != 0:
        return flag, ld, x
    y = np.ascontiguousarray(x)
    return 111, max(x.shape[1], 1), y


@njit(nogil=True, cache=True)
def gemm(address, a, b, out, accumulate):
    """out = a @ b (or out += a @ b when `accumulate`) for 2-D float arrays of one dtype,
    `out` with unit stride along its rows, through cblas_?gemm at `address`."""
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0:
        if not accumulate:
            out[:, :] = 0
        return
    ta, lda, a2 = _operand(a)
    tb, ldb, b2 = _operand(b)
    item = out.itemsize
    ldc = out.strides[0] // item if m > 1 else max(n, 1)
    direct = (n == 1 or out.strides[1] == item) and out.strides[0] % item == 0 and ldc >= n
    c = out if direct else np.empty((m, n), out.dtype)  # a result cblas cannot write in place
    if not direct:
        ldc = max(n, 1)
        if accumulate:
            c[:, :] = out
    beta = 1.0 if accumulate else 0.0
    _call_gemm(
        address,
        c,
        ta,
        tb,
        m,
        n,
        k,
        1.0,
        a2.ctypes.data,
        lda,
        b2.ctypes.data,
        ldb,
        beta,
        c.ctypes.data,
        ldc,
    )
    if not direct:
        out[:, :] = c


@njit(nogil=True, cache=True)
def sum_parts(parts, out):
    """out = parts[0] + parts[1] + ..., added in order (as np.sum(parts, axis=0) does)."""
    out[:, :] = parts[0]
    for c in range(1, parts.shape[0]):
        out += parts[c]


@functools.lru_cache(maxsize=1)
def gemm_addresses() -> tuple[int, int] | None:
    """The addresses of NumPy's bundled OpenBLAS `cblas_dgemm` and `cblas_sgemm` (ILP64), or
    None when NumPy's BLAS is another one."""
    for lib in blas_threads.openblas_libraries(blas_threads.numpy_libs()):
        d = getattr(lib, "scipy_cblas_dgemm64_", None)
        s = getattr(lib, "scipy_cblas_sgemm64_", None)
        if d is not None and s is not None:
            return ctypes.cast(d, ctypes.c_void_p).value, ctypes.cast(s, ctypes.c_void_p).value
    return None
