"""The vmath functions as LLVM IR definitions (tracegrad/cpu/llvm/vmath_ir.py).

Every function of vmath's tables, in both precisions, is linked into a small caller, optimised
at O3 and compiled with llvmlite for this CPU, and called on edge values and random ones: its
bits must be those of the Numba function itself (any nan matches any nan). A few are called
from a loop, which LLVM vectorises. Then: two outputs link into one module and into one
execution engine; the disk cache is read without importing Numba and written again when
damaged; a function that calls Numba's runtime is refused.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap

import llvmlite.binding as llvm
import numpy as np
import pytest

from tracegrad import vmath as vm
from tracegrad.cpu.llvm import vmath_ir

F64, F32 = np.float64, np.float32
TABLES = {"unary": vm.FUNCTIONS, "binary": vm.BINARY, "helper": vm.HELPERS}
NAMES = [name for table in TABLES.values() for name in table]
CASES = [(name, dt) for name in NAMES for dt in (F64, F32)]
IDS = [f"{name}-{np.dtype(dt).name}" for name, dt in CASES]
LLVM_T = {F64: "double", F32: "float"}
C_T = {F64: ctypes.c_double, F32: ctypes.c_float}
ITYPE = {F64: np.int64, F32: np.int32}


# --- compiling through llvmlite, as the engine does ----------------------------------------------


@functools.cache
def target_machine():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    features = llvm.get_host_cpu_features().flatten()
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=features, opt=3)


_ENGINES = []  # the execution engines stay alive: their functions are called through ctypes


def optimised(caller: str, *defs: str):
    """The module of `caller` with the definition texts `defs` linked in, optimised at O3."""
    tm = target_machine()
    mod = llvm.parse_assembly(caller)
    for text in defs:
        mod.link_in(llvm.parse_assembly(text))
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(mod, pb)
    return mod


def engine(*mods):
    ee = llvm.create_mcjit_compiler(mods[0], target_machine())
    for mod in mods[1:]:
        ee.add_module(mod)
    ee.finalize_object()
    _ENGINES.append(ee)
    return ee


def arity(name: str) -> tuple[int, int]:
    """(arguments, results) of vmath's `name`, from its C type."""
    fnty = vmath_ir.function_type(name, np.dtype(F64))
    if isinstance(fnty.return_type, type(fnty.args[0])):
        return len(fnty.args), 1
    return len(fnty.args) - 2, 2


def scalar_caller(name: str, dt) -> str:
    t, sym = LLVM_T[dt], vmath_ir.symbol(name, np.dtype(dt))
    nargs, nres = arity(name)
    params = ", ".join(f"{t} %a{k}" for k in range(nargs))
    if nres == 1:
        return (
            f"declare {t} @{sym}({', '.join([t] * nargs)})\n"
            f"define {t} @call({params}) {{\n  %r = call {t} @{sym}({params})\n  ret {t} %r\n}}\n"
        )
    return (
        f"declare void @{sym}({t}, ptr, ptr)\n"
        f"define void @call({params}, ptr %o0, ptr %o1) {{\n"
        f"  call void @{sym}({params}, ptr %o0, ptr %o1)\n  ret void\n}}\n"
    )


def loop_caller(name: str, dt) -> str:
    """`loop(x, y, out0, out1, n)`: out0[i] (and out1[i]) = name(x[i] (, y[i])) for i < n."""
    t, sym = LLVM_T[dt], vmath_ir.symbol(name, np.dtype(dt))
    nargs, nres = arity(name)
    args = ", ".join(f"{t} %v{k}" for k in range(nargs))
    loads = [
        f"  %p{k} = getelementptr inbounds {t}, ptr %in{k}, i64 %i\n  %v{k} = load {t}, ptr %p{k}"
        for k in range(nargs)
    ]
    if nres == 1:
        decl = f"declare {t} @{sym}({', '.join([t] * nargs)})"
        body = [
            f"  %r = call {t} @{sym}({args})",
            f"  %q0 = getelementptr inbounds {t}, ptr %out0, i64 %i",
            f"  store {t} %r, ptr %q0",
        ]
    else:
        decl = f"declare void @{sym}({t}, ptr, ptr)"
        body = [
            f"  %q0 = getelementptr inbounds {t}, ptr %out0, i64 %i",
            f"  %q1 = getelementptr inbounds {t}, ptr %out1, i64 %i",
            f"  call void @{sym}({args}, ptr %q0, ptr %q1)",
        ]
    return "\n".join(
        [
            decl,
            "define void @loop(ptr noalias %in0, ptr noalias %in1, ptr noalias %out0,"
            " ptr noalias %out1, i64 %n) {",
            "entry:",
            "  %empty = icmp sle i64 %n, 0",
            "  br i1 %empty, label %done, label %body",
            "body:",
            "  %i = phi i64 [0, %entry], [%next, %body]",
            *loads,
            *body,
            "  %next = add nuw nsw i64 %i, 1",
            "  %more = icmp slt i64 %next, %n",
            "  br i1 %more, label %body, label %done",
            "done:",
            "  ret void",
            "}",
            "",
        ]
    )


# --- inputs and the reference --------------------------------------------------------------------


def edge_values(dt) -> np.ndarray:
    fi = np.finfo(dt)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan]
    tiny = [fi.smallest_subnormal, fi.tiny, fi.eps, 1e-8, 1e-30]
    finite = [1.0, 0.5, 0.999, 1.5, 2.0, 3.0, 10.0, np.pi, np.pi / 2, 88.7, 103.0, 700.0, 745.2]
    huge = [1e10, 1e30, float(fi.max)]
    mags = np.array(tiny + finite + huge, dtype=F64)
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(special), mags, -mags]).astype(dt)


def random_values(dt, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    hi = 300 if dt == F64 else 36
    mags = 10.0 ** rng.uniform(-hi, hi, n)
    parts = [rng.uniform(-10, 10, n), mags * rng.choice([-1, 1], n), rng.uniform(-1, 1, n)]
    return np.concatenate(parts).astype(dt)


def inputs(name: str, dt, n: int = 200) -> list[np.ndarray]:
    """The arguments: edge values and random ones (every pair of edge values, for two)."""
    nargs, _ = arity(name)
    edges = edge_values(dt)
    if nargs == 1:
        return [np.concatenate([edges, random_values(dt, n, 0)])]
    a, b = np.meshgrid(edges, edges)
    return [
        np.concatenate([a.ravel(), random_values(dt, n, 1)]),
        np.concatenate([b.ravel(), random_values(dt, n, 2)]),
    ]


def numba_results(name: str, dt, args: list[np.ndarray]) -> list[np.ndarray]:
    """vmath's function called element by element, through its Numba dispatcher."""
    fn = vm.get(name, dt)
    _, nres = arity(name)
    outs = [np.empty(args[0].size, dt) for _ in range(nres)]
    for i in range(args[0].size):
        r = fn(*(a[i] for a in args))
        for k, v in enumerate(r if nres == 2 else (r,)):
            outs[k][i] = v
    return outs


def assert_same_bits(got: np.ndarray, want: np.ndarray, args: list[np.ndarray], label: str):
    it = ITYPE[got.dtype.type]
    same = (got.view(it) == want.view(it)) | (np.isnan(got) & np.isnan(want))
    bad = np.flatnonzero(~same)
    where = [(tuple(a[i] for a in args), got[i], want[i]) for i in bad[:5]]
    assert not bad.size, f"{label}: {bad.size} results differ (args, llvmlite, Numba): {where}"


# --- every function, both precisions -------------------------------------------------------------


def test_the_table_is_covered():
    """Each name of vmath's tables has a symbol, and its C type has the arity of the Python
    function (two results for the pair helpers)."""
    for name in NAMES:
        fn = vm.get(name, F64)
        nparams = len(inspect.signature(fn.py_func).parameters)
        assert arity(name) == (nparams, 2 if name in vm.HELPERS else 1)
        assert vmath_ir.symbol(name, np.dtype(F32)) == f"tg_vm_{name}_f32"
    assert arity("hypot") == (2, 1) and arity("sincos") == (1, 2)
    fnty = vmath_ir.function_type("sincos", np.dtype(F32))
    assert str(fnty) == "void (float, float*, float*)"


@pytest.mark.parametrize("name,dt", CASES, ids=IDS)
def test_scalar_call_matches_numba(name, dt):
    sym = vmath_ir.symbol(name, np.dtype(dt))
    text = vmath_ir.definitions([sym])
    assert "define linkonce_odr " in text and "alwaysinline" in text
    mod = optimised(scalar_caller(name, dt), text)
    assert f"@{sym}" not in str(mod)  # inlined, and its definition dropped
    ee = engine(mod)
    nargs, nres = arity(name)
    ct = C_T[dt]
    args = inputs(name, dt)
    want = numba_results(name, dt, args)
    outs = [np.empty(args[0].size, dt) for _ in range(nres)]
    if nres == 1:
        fn = ctypes.CFUNCTYPE(ct, *[ct] * nargs)(ee.get_function_address("call"))
        for i in range(args[0].size):
            outs[0][i] = fn(*(a[i] for a in args))
    else:
        fn = ctypes.CFUNCTYPE(None, ct, ctypes.POINTER(ct), ctypes.POINTER(ct))(
            ee.get_function_address("call")
        )
        r0, r1 = ct(), ct()
        for i in range(args[0].size):
            fn(args[0][i], ctypes.byref(r0), ctypes.byref(r1))
            outs[0][i], outs[1][i] = r0.value, r1.value
    for k in range(nres):
        assert_same_bits(outs[k], want[k], args, f"{sym} result {k}")


LOOPS = [("exp", F64), ("log", F32), ("sin", F32), ("sincos", F64), ("hypot", F32), ("tanh", F64)]


@pytest.mark.parametrize("name,dt", LOOPS, ids=[f"{n}-{np.dtype(d).name}" for n, d in LOOPS])
def test_vectorised_loop_matches_numba(name, dt):
    """Called from a loop, the function is inlined and the loop vectorised (packed vector
    types in the optimised IR), with the same bits as the scalar Numba function."""
    sym = vmath_ir.symbol(name, np.dtype(dt))
    mod = optimised(loop_caller(name, dt), vmath_ir.definitions([sym]))
    ir_text = str(mod)
    assert f"@{sym}" not in ir_text
    assert re.search(rf"<\d+ x {LLVM_T[dt]}>", ir_text), "the loop was not vectorised"
    ee = engine(mod)
    args = inputs(name, dt, n=700)
    n = args[0].size
    nargs, nres = arity(name)
    ins = [args[k] if k < nargs else np.zeros(n, dt) for k in range(2)]
    outs = [np.empty(n, dt) for _ in range(2)]
    ptr = ctypes.c_void_p
    fn = ctypes.CFUNCTYPE(None, ptr, ptr, ptr, ptr, ctypes.c_int64)(ee.get_function_address("loop"))
    fn(*(a.ctypes.data for a in ins + outs), n)
    want = numba_results(name, dt, args)
    for k in range(nres):
        assert_same_bits(outs[k], want[k], args, f"{sym} in a loop, result {k}")


# --- linking -------------------------------------------------------------------------------------


def test_two_outputs_link_into_one_module_and_one_engine():
    """Outputs that define the same symbol link into one module (linkonce_odr: one copy
    kept), and two kernels linked with the same definitions live in one execution engine."""
    exp, sin, sincos = (vmath_ir.symbol(n, np.dtype(F64)) for n in ("exp", "sin", "sincos"))
    first, second = vmath_ir.definitions([exp, sincos]), vmath_ir.definitions([sin, exp])
    assert vmath_ir.definitions([sincos, exp, exp]) == first
    for text in (first, second):
        mod = llvm.parse_assembly(text)
        defined = sorted(f.name for f in mod.functions if not f.is_declaration)
        assert all(f.name.startswith("llvm.") for f in mod.functions if f.is_declaration)
        assert all(g.linkage.name in ("internal", "private") for g in mod.global_variables)
        assert all(mod.get_function(s).linkage.name == "linkonce_odr" for s in defined)
    caller = textwrap.dedent(
        f"""
        declare double @{exp}(double)
        declare double @{sin}(double)
        declare void @{sincos}(double, ptr, ptr)
        define double @{{name}}(double %x) {{{{
          %s = alloca double
          %c = alloca double
          call void @{sincos}(double %x, ptr %s, ptr %c)
          %cv = load double, ptr %c
          %e = call double @{exp}(double %x)
          %si = call double @{sin}(double %x)
          %t = fadd double %e, %si
          %r = fadd double %t, %cv
          ret double %r
        }}}}
        """
    )
    mods = [optimised(caller.format(name=name), first, second) for name in ("k1", "k2")]
    ee = engine(*mods)
    x = 0.75
    want = vm.exp_f64(x) + vm.sin_f64(x) + vm.sincos_f64(x)[1]
    for name in ("k1", "k2"):
        fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(ee.get_function_address(name))
        assert fn(x) == want
    # one output linked into the other directly
    merged = llvm.parse_assembly(first)
    merged.link_in(llvm.parse_assembly(second))
    merged.verify()


# --- the disk cache ------------------------------------------------------------------------------

_SCRIPT = """
import json, os, sys
from tracegrad.cpu.llvm import vmath_ir
syms = sys.argv[1].split(",")
text = vmath_ir.definitions(syms)
types = [str(vmath_ir.function_type(*vmath_ir._split(s))) for s in syms]
print(json.dumps({"text": text, "types": types, "version": vmath_ir.version(),
                  "numba": "numba" in sys.modules}))
"""


def run_fresh(cache: str, syms: list[str]) -> dict:
    """`definitions(syms)` in a new process whose cache folder is `cache`."""
    env = {**os.environ, "TRACEGRAD_CACHE_DIR": cache}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, ",".join(syms)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return {**json.loads(out.stdout), "stderr": out.stderr}


def test_disk_cache_hit_needs_no_numba_and_damaged_files_are_rewritten(tmp_path):
    syms = ["tg_vm_exp_f64", "tg_vm_sincos_f32"]
    cold = run_fresh(str(tmp_path), syms)
    assert cold["numba"]  # compiled
    assert cold["text"] == vmath_ir.definitions(syms)
    assert cold["version"] == vmath_ir.version()
    folder = tmp_path / "vmath_ir"
    files = {s: folder / f"{s}-{vmath_ir.version()}.ll" for s in syms}
    good = {s: f.read_bytes() for s, f in files.items()}
    assert sorted(os.listdir(folder)) == sorted(f.name for f in files.values())

    warm = run_fresh(str(tmp_path), syms)
    assert not warm["numba"]
    assert (warm["text"], warm["types"]) == (cold["text"], cold["types"])

    # truncated: the checksum in its header does not match
    files["tg_vm_exp_f64"].write_bytes(good["tg_vm_exp_f64"][:-100])
    # a body that does not parse, under a header whose checksum matches it
    header, _, _ = good["tg_vm_sincos_f32"].decode().partition("\n")
    body = "this is not LLVM IR\n"
    sha = vmath_ir._checksum(body)
    files["tg_vm_sincos_f32"].write_text(re.sub(r"sha=\w+", f"sha={sha}", header) + "\n" + body)
    repaired = run_fresh(str(tmp_path), syms)
    assert repaired["text"] == cold["text"]
    assert "damaged" in repaired["stderr"] and "does not parse" in repaired["stderr"]
    assert {s: f.read_bytes() for s, f in files.items()} == good


def test_version_is_stable():
    v = vmath_ir.version()
    assert v == vmath_ir.version() and re.fullmatch(r"[0-9a-f]{16}", v)


def test_cache_off_keeps_no_file(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", "off")
    assert vmath_ir._path("tg_vm_exp_f64") is None


def test_bad_symbols_are_refused():
    with pytest.raises(ValueError, match="not a vmath symbol"):
        vmath_ir.definitions(["exp_f64"])
    with pytest.raises(KeyError):
        vmath_ir.definitions(["tg_vm_nosuchfunction_f64"])
    with pytest.raises(TypeError):
        vmath_ir.symbol("exp", np.dtype(np.int64))


def test_a_function_calling_numbas_runtime_is_refused(monkeypatch, tmp_path):
    from numba import njit

    @njit
    def allocating(x):
        return np.zeros(3)[0] + x

    real_get = vm.get
    monkeypatch.setattr(
        vm, "get", lambda name, dt: allocating if name == "alloc" else real_get(name, dt)
    )
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path))
    with pytest.raises(RuntimeError, match="NRT_"):
        vmath_ir.definitions(["tg_vm_alloc_f64"])
    assert not list((tmp_path / "vmath_ir").iterdir())
