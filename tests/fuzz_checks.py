"""Checks of one random program (tests/fuzz_programs.py) on one backend, failures filed by area.

`check_program` runs a program through tg.jit / value_and_grad / grad / jacobian / hessian /
grad-of-grad and compares with plain NumPy, with central finite differences in float64 (orders 1
to 3) and with the reference interpreter; it also checks that results are fresh arrays, that
inputs are never modified, that captured values changed between calls are seen, that calls from
several threads agree, and that inputs of every layout and dtype give NumPy's answer. Each failed
check is a `Failure` with its area: one of the known defect areas of issue 10, or "new".
"""

from __future__ import annotations

import re
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import tracegrad as tg
from fuzz_programs import KNOWN_OPS, Spec, _map_tree
from tracegrad.base.tree import flatten, unflatten

# ----------------------------------------------------------------------------------------------
# Checking


SKIP = "skip"  # a check that does not apply to this program


@dataclass
class Failure:
    check: str
    backend: str
    area: str  # a KNOWN_AREAS key, or "new"
    message: str

    def __str__(self) -> str:
        return f"[{self.area}] {self.check} on {self.backend}: {self.message}"


CHECK_AREAS = {
    "fresh": "aliasing",
    "fresh-device": "aliasing",
    "mutate": "aliasing",
    "capture-global": "captures",
    "capture-inplace": "captures",
    "capture-number": "captures",
    "capture-closure": "captures",
    "capture-default": "captures",
    "jacobian-aux": "jacobian-aux",
    "static-type": "static-type",
}


DERIVATIVES = {"grad", "grad-aux", "nested", "grad-float32", "jacobian", "hessian", "order3"}


def area_of(check: str, spec: Spec, message: str = "") -> str:
    """The known area a failure belongs to ("new" when none): by its check, else by the ops of
    the program (a NaN derivative of a program with prod is filed under prod-zero)."""
    aliasing_check = CHECK_AREAS.get(check) == "aliasing"
    if check in CHECK_AREAS and not (aliasing_check and message.startswith("raised")):
        return CHECK_AREAS[check]  # (a call that raises is no aliasing: filed by its ops below)
    text = spec.source()
    for op, area in KNOWN_OPS.items():
        if op in text:
            return area
    nan = "nan" in message
    if check in DERIVATIVES and nan and re.search(r"np\.prod|\.prod\(", text):
        return "prod-zero"
    if re.search(r"np\.vstack\(\[\w+\]\)", text):
        return "stack1"
    return "new"


def _scale(x) -> float:
    x = np.asarray(x, dtype=np.float64)
    finite = x[np.isfinite(x)]
    return float(np.max(np.abs(finite), initial=1.0))


def close(got, want, rtol: float, what: str) -> str | None:
    """None when `got` matches `want` (shape, dtype, values), else why not."""
    got_arr, want_arr = np.asarray(got), np.asarray(want)
    if got_arr.shape != want_arr.shape:
        return f"{what}: shape {got_arr.shape} != {want_arr.shape}"
    if got_arr.dtype.newbyteorder("=") != want_arr.dtype.newbyteorder("="):  # byte order aside
        return f"{what}: dtype {got_arr.dtype} != {want_arr.dtype}"
    if got_arr.dtype.kind == "b" or got_arr.dtype.kind in "iu":
        if not np.array_equal(got_arr, want_arr):
            return f"{what}: {got_arr} != {want_arr}"
        return None
    g, w = got_arr.astype(np.float64), want_arr.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        return f"{what}: NaNs differ: got {g.ravel()[:6]}, want {w.ravel()[:6]}"
    ok = np.isnan(w) | (g == w) | (np.abs(g - w) <= rtol * (np.abs(w) + _scale(w)))
    if not np.all(ok):
        i = np.argwhere(~ok)[0]
        idx = tuple(int(k) for k in i)
        return f"{what}: at {idx} got {g[idx]!r}, want {w[idx]!r} (rtol {rtol})"
    return None


def tree_close(got, want, rtol: float, what: str) -> str | None:
    gl, gt = flatten(got)
    wl, wt = flatten(want)
    if gt != wt:
        return f"{what}: structure {gt} != {wt}"
    for i, (g, w) in enumerate(zip(gl, wl, strict=True)):
        why = close(g, w, rtol, f"{what} leaf {i}")
        if why:
            return why
    return None


def to_host(x):
    if isinstance(x, np.ndarray) or np.isscalar(x):
        return x
    if hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    return np.asarray(x)


def host_tree(t):
    leaves, tree = flatten(t)
    return unflatten(tree, [to_host(x) for x in leaves])


def _flat_theta(p):
    leaves, tree = flatten(p)
    shapes = [np.shape(x) for x in leaves]
    theta = np.concatenate([np.ravel(x) for x in leaves]) if leaves else np.zeros(0)

    def unflat(t):
        parts, start = [], 0
        for sh in shapes:
            n = int(np.prod(sh, dtype=np.int64))
            parts.append(t[start : start + n].reshape(sh))
            start += n
        return unflatten(tree, parts)

    return theta, unflat


def finite_diff(fun: Callable[[np.ndarray], Any], theta: np.ndarray, h: float) -> np.ndarray:
    """Central differences of fun (array-valued) w.r.t. theta: shape theta.shape + out.shape."""
    rows = []
    for i in range(theta.size):
        up, down = theta.copy(), theta.copy()
        up[i] += h
        down[i] -= h
        rows.append((np.asarray(fun(up), np.float64) - np.asarray(fun(down), np.float64)) / (2 * h))
    return np.array(rows)


def fd_compare(got: np.ndarray, fun, theta, rtol: float, what: str, stats: dict) -> str | None:
    """`got` (shape theta + out) against central differences at two steps; coordinates where the
    two steps disagree (a kink within reach) are skipped and counted."""
    d1 = finite_diff(fun, theta, 1e-5)
    d2 = finite_diff(fun, theta, 2e-6)
    scale = max(_scale(d1), 1.0)
    reliable = np.abs(d1 - d2) <= 1e-4 * scale
    stats["fd_points"] = stats.get("fd_points", 0) + int(reliable.size)
    stats["fd_skipped"] = stats.get("fd_skipped", 0) + int((~reliable).sum())
    got = np.asarray(got, np.float64).reshape(d1.shape)
    bad = reliable & ~(np.abs(got - d2) <= rtol * scale)
    if np.any(bad):
        i = tuple(int(k) for k in np.argwhere(bad)[0])
        return f"{what}: at {i} got {got[i]!r}, finite differences give {d2[i]!r}"
    return None


def _memory(a):
    """(start, end) of a device array's memory, or its host array (the simulator's), or None."""
    iface = getattr(a, "__cuda_array_interface__", None)
    if iface is not None:
        shape, itemsize = iface["shape"], np.dtype(iface["typestr"]).itemsize
        strides = iface.get("strides") or tuple(
            int(np.prod(shape[i + 1 :], dtype=np.int64)) * itemsize for i in range(len(shape))
        )
        lo = iface["data"][0] + sum(
            min(0, (n - 1) * st) for n, st in zip(shape, strides, strict=True)
        )
        hi = iface["data"][0] + sum(
            max(0, (n - 1) * st) for n, st in zip(shape, strides, strict=True)
        )
        return (lo, hi + itemsize)
    return getattr(a, "_ary", a)


def _shares(a, b) -> bool:
    if np.size(a) == 0 or np.size(b) == 0:
        return False
    a, b = _memory(a), _memory(b)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return a[0] < b[1] and b[0] < a[1]
    return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.shares_memory(a, b)


def _to_device(tree):
    from numba import cuda

    return _map_tree(tree, lambda x: cuda.to_device(np.ascontiguousarray(x)) if np.ndim(x) else x)


LAYOUTS = [
    "C",
    "F",
    "reversed",
    "strided",
    "readonly",
    "float32",
    "int",
    "broadcast",
    "unaligned",
    "big-endian",
]


def relayout(x: np.ndarray, layout: str) -> np.ndarray:
    """The same values in another memory layout (or dtype)."""
    x = np.asarray(x)
    if layout == "F" and x.ndim:  # (np.asfortranarray makes a 0-d array 1-d)
        return np.asfortranarray(x)
    if layout == "reversed" and x.ndim:
        return np.flip(np.flip(x, -1).copy(), -1)
    if layout == "strided" and x.ndim:
        big = np.zeros((*x.shape[:-1], 2 * x.shape[-1]), x.dtype)
        big[..., ::2] = x
        return big[..., ::2]
    if layout == "readonly":
        y = x.copy()
        y.setflags(write=False)
        return y
    if layout == "float32" and x.dtype.kind == "f":
        return x.astype(np.float32)
    if layout == "int" and x.dtype.kind == "f":
        return np.round(3 * x).astype(np.int64)
    if layout == "broadcast" and x.ndim and x.shape[0]:  # stride 0 along the first axis
        return np.broadcast_to(x[:1], x.shape)
    if layout == "unaligned":  # data one byte past an aligned address
        buf = np.zeros(x.nbytes + 1, np.uint8)
        y = np.ndarray(x.shape, x.dtype, buffer=buf, offset=1)
        y[...] = x
        return y
    if layout == "big-endian":
        return x.astype(x.dtype.newbyteorder(">"))
    return x.copy()


@dataclass
class Runner:
    """Runs the checks of one program on one backend; collects failures and counts."""

    spec: Spec
    backend: str
    orders: tuple[int, ...] = (1, 2, 3)
    checks: set[str] | None = None  # None: all
    failures: list[Failure] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    reference: dict | None = None  # the numpy backend's results, shared across backends

    def want(self, name: str) -> bool:
        return self.checks is None or name in self.checks

    def fail(self, check: str, message: str) -> None:
        self.failures.append(
            Failure(check, self.backend, area_of(check, self.spec, message), message)
        )

    def guard(self, check: str, fn: Callable[[], str | None]) -> None:
        if not self.want(check):
            return
        try:
            why = fn()
        except Exception as exc:
            tb = traceback.format_exc(limit=-3)
            why = f"raised {type(exc).__name__}: {exc}\n{tb}"
        if why is SKIP:
            return
        self.stats[check] = self.stats.get(check, 0) + 1
        if why:
            self.fail(check, why)

    # ---- the checks
    def run(self) -> list[Failure]:
        spec = self.spec
        f_out, f_loss, set_closure, ns = spec.instantiate()
        self.f_out, self.f_loss, self.ns, self.set_closure = f_out, f_loss, ns, set_closure
        p, d, s = spec.params(), spec.data(), spec.static
        rtol = 1e-9
        b = self.backend
        jit = tg.jit(f_out, static_argnums=(2,), backend=b)
        self.jit = jit

        def values():
            got = host_tree(jit(p, d, s))
            return tree_close(got, f_out(p, d, s), rtol, "jit value")

        self.guard("value", values)
        if self.reference is not None and "jit" in self.reference:
            self.guard(
                "vs-interpreter",
                lambda: tree_close(
                    host_tree(jit(p, d, s)), self.reference["jit"], 1e-11, "jit vs interpreter"
                ),
            )
        self.guard("fresh", lambda: self._fresh(jit, p, d, s))
        vg = tg.value_and_grad(self.f_loss, static_argnums=(2,), backend=b)
        self.guard("fresh", lambda: self._fresh(vg, p, d, s))
        self.guard("mutate", lambda: self._mutate(jit, p, d, s))
        self.guard("inputs", lambda: self._inputs_unchanged(jit, p, d, s))
        self.guard("static", lambda: self._static(jit, p, d))
        self.guard("static-type", lambda: self._static_type(p, d))
        if not spec.large:
            self.guard("threads", lambda: self._threads(jit, d, s))
            self.guard("threads-cold", lambda: self._threads_cold(d, s))
            for layout in LAYOUTS:
                self.guard(
                    f"layout-{layout}", lambda layout=layout: self._layout(jit, p, d, s, layout)
                )
        if b == "cuda":
            self.guard("layout-device", lambda: self._device(jit, p, d, s))
            self.guard("fresh-device", lambda: self._fresh(jit, *_to_device((p, d)), s))
        self.guard("capture-global", lambda: self._capture("global"))
        self.guard("capture-inplace", lambda: self._capture("inplace"))
        self.guard("capture-number", lambda: self._capture("number"))
        self.guard("capture-closure", lambda: self._capture("closure"))
        self.guard("capture-default", lambda: self._capture("default"))
        if 1 in self.orders:
            self.guard("grad", lambda: self._grad(p, d, s))
            self.guard("grad-aux", lambda: self._grad_aux(p, d, s))
            self.guard("nested", lambda: self._nested(p, d, s))
            self.guard("grad-float32", lambda: self._grad_float32(p, d, s))
            if not spec.large:
                self.guard("jacobian", lambda: self._jacobian(p, d, s))
                self.guard("jacobian-aux", lambda: self._jacobian_aux(p, d, s))
        if not spec.large:
            if 2 in self.orders:
                self.guard("hessian", lambda: self._hessian(p, d, s))
            if 3 in self.orders:
                self.guard("order3", lambda: self._order3(p, d, s))
        return self.failures

    def _fresh(self, fn, *args):
        r1 = fn(*args)
        r2 = fn(*args)
        l1, l2 = flatten(r1)[0], flatten(r2)[0]
        ins = flatten(args)[0]
        for i, a in enumerate(l1):
            for j, other in enumerate(l1[:i]):
                if _shares(a, other) or (
                    a is other and not isinstance(a, (int, float, np.generic))
                ):
                    return f"results {j} and {i} share memory"
            for x in ins:
                if _shares(a, x):
                    return f"result {i} shares memory with an input"
            for j, other in enumerate(l2):
                if _shares(a, other) or (
                    a is other and not isinstance(a, (int, float, np.generic))
                ):
                    return f"result {i} of one call shares memory with result {j} of the next call"
            if isinstance(a, np.ndarray) and not a.flags.writeable:
                return f"result {i} is read-only"
        return None

    def _mutate(self, fn, *args):
        first = host_tree(fn(*args))
        want = [np.copy(x) for x in flatten(first)[0]]
        got = flatten(fn(*args))[0]
        for x in got:
            if isinstance(x, np.ndarray) and x.flags.writeable:
                x[...] = 12345
        for x in flatten(first)[0]:
            if isinstance(x, np.ndarray) and x.flags.writeable:
                x[...] = -777
        again = [to_host(x) for x in flatten(fn(*args))[0]]
        for i, (a, w) in enumerate(zip(again, want, strict=True)):
            why = close(a, w, 0.0, f"result {i} after the caller changed earlier results")
            if why:
                return why
        return None

    def _inputs_unchanged(self, fn, p, d, s):
        pc, dc = host_tree(p), np.copy(d)
        pc = unflatten(flatten(p)[1], [np.copy(x) for x in flatten(p)[0]])
        fn(p, d, s)
        if self.want("grad"):
            tg.grad(self.f_loss, static_argnums=(2,), backend=self.backend)(p, d, s)
        for a, b in zip(flatten(p)[0], flatten(pc)[0], strict=True):
            if not np.array_equal(a, b, equal_nan=True):
                return "a parameter was modified"
        if not np.array_equal(d, dc):
            return "the data argument was modified"
        return None

    def _static(self, jit, p, d):
        for s2 in (1, 2, 3):
            try:
                want = self.f_out(p, d, s2)
            except Exception:
                continue  # NumPy refuses this program with this static value
            why = tree_close(host_tree(jit(p, d, s2)), want, 1e-9, f"static s={s2}")
            if why:
                return why
        return None

    def _static_type(self, p, d):
        if not re.search(r"\bs\b", " ".join(e for _, e in self.spec.used())):
            return SKIP
        jit = tg.jit(self.f_out, static_argnums=(2,), backend=self.backend)
        pi = _map_tree(p, lambda x: np.round(3 * x).astype(np.int64))
        for s2 in (2, 2.0):
            try:
                want = self.f_out(pi, d, s2)
            except Exception:
                continue
            why = tree_close(host_tree(jit(pi, d, s2)), want, 1e-9, f"int params, static {s2!r}")
            if why:
                return why
        return None

    def _threads(self, jit, d, s):
        inputs = [self.spec.params(np.random.default_rng(100 + k), 1.0) for k in range(4)]
        wants = [self.f_out(x, d, s) for x in inputs]
        jit(inputs[0], d, s)  # compiled once before the threads start
        errors: list[str] = []

        def work(k):
            try:
                for _ in range(3):
                    why = tree_close(host_tree(jit(inputs[k], d, s)), wants[k], 1e-9, f"thread {k}")
                    if why:
                        errors.append(why)
                        return
            except Exception as exc:
                errors.append(f"thread {k} raised {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return errors[0] if errors else None

    def _threads_cold(self, d, s):
        """Threads that call a new transform at once: they trace and compile concurrently (some
        with float32 inputs, so two programs are built at the same time)."""
        f_out, f_loss = self.f_out, self.f_loss
        jit = tg.jit(f_out, static_argnums=(2,), backend=self.backend)
        vg = tg.value_and_grad(f_loss, static_argnums=(2,), backend=self.backend)
        inputs = [self.spec.params(np.random.default_rng(200 + k), 1.0) for k in range(4)]
        inputs[3] = _map_tree(inputs[3], lambda x: np.asarray(x, np.float32))
        errors: list[str] = []
        barrier = threading.Barrier(4)

        def work(k):
            try:
                barrier.wait()
                x = inputs[k]
                with np.errstate(all="ignore"):
                    want, want_v = f_out(x, d, s), f_loss(x, d, s)
                rtol = 2e-4 if k == 3 else 1e-9
                why = tree_close(host_tree(jit(x, d, s)), want, rtol, f"thread {k} jit") or close(
                    to_host(vg(x, d, s)[0]), want_v, rtol, f"thread {k} value_and_grad"
                )
                if why:
                    errors.append(why)
            except Exception as exc:
                errors.append(f"thread {k} raised {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return errors[0] if errors else None

    def _layout(self, jit, p, d, s, layout):
        pl = _map_tree(p, lambda x: relayout(x, layout))
        dl = relayout(d, layout) if layout not in ("int",) else relayout(d, "C")
        copies = [np.copy(x) for x in flatten(pl)[0]]
        try:
            with np.errstate(all="ignore"):
                want = self.f_out(pl, dl, s)
        except Exception:
            return SKIP  # NumPy itself refuses this input (e.g. integer ** negative)
        wl = flatten(want)[0]
        if any(np.asarray(w).dtype.kind == "f" and not np.all(np.isfinite(w)) for w in wl):
            return SKIP
        got = host_tree(jit(pl, dl, s))
        rtol = 2e-4 if layout == "float32" else 1e-9
        why = tree_close(got, want, rtol, f"{layout} inputs")
        if why:
            return why
        for a, c in zip(flatten(pl)[0], copies, strict=True):
            if not np.array_equal(a, c):
                return f"{layout} input modified"
        return None

    def _device(self, jit, p, d, s):
        """Device arrays in (C order, transposed, sliced views): device arrays out, NumPy's
        values, the inputs unchanged."""
        for layout in ("C", "F", "strided"):
            pl = _map_tree(p, lambda x, layout=layout: relayout(x, layout))
            dp, dd = _to_device((pl, d))
            try:
                want = self.f_out(pl, d, s)
            except Exception:
                continue  # NumPy refuses these inputs too
            got = jit(dp, dd, s)
            if any(isinstance(x, np.ndarray) for x in flatten(got)[0]):
                return f"{layout} device inputs gave host results"
            why = tree_close(host_tree(got), want, 1e-9, f"{layout} device inputs")
            if why:
                return why
            if tree_close(host_tree(dp), pl, 0.0, "inputs"):
                return f"{layout} device inputs modified"
        return None

    def _capture(self, kind: str):
        spec, ns = self.spec, self.ns
        text = " ".join(e for _, e in spec.used())
        name = {"global": "G0", "inplace": "G1", "number": "K0", "closure": "C0", "default": "D0"}[
            kind
        ]
        if not re.search(rf"\b{name}\b", text):
            return SKIP
        f_out, f_loss, set_closure, ns = spec.instantiate()
        p, d, s = spec.params(), spec.data(), spec.static
        jit = tg.jit(f_out, static_argnums=(2,), backend=self.backend)
        vg = tg.value_and_grad(f_loss, static_argnums=(2,), backend=self.backend)
        jit(p, d, s)
        vg(p, d, s)
        if kind == "global":
            ns["G0"] = ns["G0"] * -1.5 + 0.25
        elif kind == "inplace":
            ns["G1"][...] = ns["G1"] * -1.5 + 0.25
        elif kind == "number":
            ns["K0"] = ns["K0"] + 0.75
        elif kind == "closure":
            set_closure(spec.closure * -1.5 + 0.25)
        else:
            f_out.__defaults__[0][...] = f_out.__defaults__[0] * -1.5 + 0.25
        why = tree_close(host_tree(jit(p, d, s)), f_out(p, d, s), 1e-9, f"after changing {name}")
        if why:
            return why
        v, g = vg(p, d, s)
        why = close(to_host(v), f_loss(p, d, s), 1e-9, f"loss after changing {name}")
        if why:
            return why
        if spec.large:  # a fresh transform of a fresh function, instead of finite differences
            fresh = spec.instantiate()
            ns2 = fresh[3]
            for key in ("G0", "G1", "K0"):
                ns2[key] = ns[key]
            fresh[2](
                set_closure.__closure__[0].cell_contents if kind == "closure" else spec.closure
            )
            fresh[0].__defaults__[0][...] = f_out.__defaults__[0]
            want = host_tree(tg.grad(fresh[1], static_argnums=(2,), backend="numpy")(p, d, s))
            return tree_close(host_tree(g), want, 1e-9, f"gradient after changing {name}")
        theta, unflat = _flat_theta(p)
        return fd_compare(
            _flat_theta(host_tree(g))[0],
            lambda t: f_loss(unflat(t), d, s),
            theta,
            1e-5,
            f"gradient after changing {name}",
            self.stats,
        )

    def _grad(self, p, d, s):
        b = self.backend
        vg = tg.value_and_grad(self.f_loss, static_argnums=(2,), backend=b)
        v, g = host_tree(vg(p, d, s))
        why = close(v, self.f_loss(p, d, s), 1e-9, "value_and_grad value")
        if why:
            return why
        g2 = host_tree(tg.grad(self.f_loss, static_argnums=(2,), backend=b)(p, d, s))
        why = tree_close(g2, g, 1e-12, "grad vs value_and_grad")
        if why:
            return why
        if flatten(g)[1] != flatten(p)[1]:
            return f"gradient structure {flatten(g)[1]} != parameters {flatten(p)[1]}"
        if self.reference is not None and "grad" in self.reference:
            why = tree_close(g, self.reference["grad"], 1e-9, "grad vs interpreter")
            if why:
                return why
        if b == "numpy" and self.reference is not None:
            self.reference["grad"] = g
        theta, unflat = _flat_theta(p)
        if self.spec.large:
            return None
        why = fd_compare(
            _flat_theta(g)[0],
            lambda t: self.f_loss(unflat(t), d, s),
            theta,
            1e-5,
            "gradient",
            self.stats,
        )
        if why or d.dtype != np.float64:
            return why
        gd = host_tree(
            tg.grad(self.f_loss, argnums=(0, 1), static_argnums=(2,), backend=b)(p, d, s)
        )
        why = tree_close(gd[0], g, 1e-12, "grad argnums=(0, 1) [0]")
        if why:
            return why
        return fd_compare(
            np.asarray(gd[1]).ravel(),
            lambda t: self.f_loss(p, t.reshape(d.shape), s),
            d.ravel().copy(),
            1e-5,
            "gradient w.r.t. the data",
            self.stats,
        )

    def _grad_float32(self, p, d, s):
        """float32 parameters: float32 gradients, close to the float64 ones."""
        p32 = _map_tree(p, lambda x: np.asarray(x, np.float32))
        with np.errstate(all="ignore"):
            v32 = self.f_loss(p32, d, s)
        if np.asarray(v32).dtype != np.float32 or not np.isfinite(v32):
            return SKIP  # the program promotes to float64 (a captured array, float64 data)
        g = host_tree(tg.grad(self.f_loss, static_argnums=(2,), backend=self.backend)(p32, d, s))
        want = host_tree(tg.grad(self.f_loss, static_argnums=(2,), backend="numpy")(p, d, s))
        for i, (a, w) in enumerate(zip(flatten(g)[0], flatten(want)[0], strict=True)):
            if np.asarray(a).dtype != np.float32:
                return f"float32 gradient leaf {i} has dtype {np.asarray(a).dtype}"
            why = close(np.asarray(a, np.float64), w, 2e-3, f"float32 gradient leaf {i}")
            if why:
                return why
        return None

    def _nested(self, p, d, s):
        """Transforms compose: grad of a function that calls a jitted function, jit of grad."""
        b, f_out = self.backend, self.f_out
        inner = tg.jit(f_out, static_argnums=(2,), backend=b)

        def loss_through_jit(p, d, s):
            o = inner(p, d, s)
            return sum(np.sum(np.sin(o[k] + 0.3 * (i + 1))) for i, k in enumerate(o))

        want = host_tree(tg.grad(self.f_loss, static_argnums=(2,), backend=b)(p, d, s))
        got = host_tree(tg.grad(loss_through_jit, static_argnums=(2,), backend=b)(p, d, s))
        why = tree_close(got, want, 1e-10, "grad of a function calling jit")
        if why:
            return why
        jg = tg.jit(tg.grad(self.f_loss, static_argnums=(2,)), static_argnums=(2,), backend=b)
        return tree_close(host_tree(jg(p, d, s)), want, 1e-10, "jit of grad")

    def _grad_aux(self, p, d, s):
        f_loss, f_out = self.f_loss, self.f_out

        def with_aux(p, d, s):
            return f_loss(p, d, s), f_out(p, d, s)

        (v, aux), g = host_tree(
            tg.value_and_grad(with_aux, static_argnums=(2,), has_aux=True, backend=self.backend)(
                p, d, s
            )
        )
        why = close(v, f_loss(p, d, s), 1e-9, "value with has_aux") or tree_close(
            aux, f_out(p, d, s), 1e-9, "aux"
        )
        if why:
            return why
        g2 = host_tree(tg.grad(self.f_loss, static_argnums=(2,), backend=self.backend)(p, d, s))
        return tree_close(g, g2, 1e-12, "gradient with has_aux")

    def _jacobian(self, p, d, s):
        theta, unflat = _flat_theta(p)
        if theta.size > 40:
            return SKIP
        jac = host_tree(tg.jacobian(self.f_out, static_argnums=(2,), backend=self.backend)(p, d, s))
        outs = self.f_out(p, d, s)
        for key, out in outs.items():
            out = np.asarray(out)
            jl = flatten(jac[key])[0]
            if flatten(jac[key])[1] != flatten(p)[1]:
                return f"jacobian[{key}] structure {flatten(jac[key])[1]} != {flatten(p)[1]}"
            leaves = flatten(p)[0]
            rows = np.concatenate(
                [np.reshape(j, (out.size, np.size(x))) for j, x in zip(jl, leaves, strict=True)],
                axis=1,
            )
            for j, leaf in zip(jl, leaves, strict=True):
                if np.shape(j) != np.shape(out) + np.shape(leaf):
                    return f"jacobian[{key}] leaf shape {np.shape(j)} != {np.shape(out) + np.shape(leaf)}"
            why = fd_compare(
                rows.T,
                lambda t, key=key: np.ravel(self.f_out(unflat(t), d, s)[key]),
                theta,
                1e-5,
                f"jacobian[{key}]",
                self.stats,
            )
            if why:
                return why
        return None

    def _jacobian_aux(self, p, d, s):
        f_out = self.f_out
        first = next(iter(f_out(p, d, s)))

        def with_aux(p, d, s):
            o = f_out(p, d, s)
            return o[first], o

        jac, aux = host_tree(
            tg.jacobian(with_aux, static_argnums=(2,), has_aux=True, backend=self.backend)(p, d, s)
        )
        why = tree_close(aux, f_out(p, d, s), 1e-9, "jacobian aux")
        if why:
            return why
        plain = host_tree(
            tg.jacobian(
                lambda p, d, s: f_out(p, d, s)[first], static_argnums=(2,), backend=self.backend
            )(p, d, s)
        )
        return tree_close(jac, plain, 1e-12, "jacobian with has_aux")

    def _phi(self, p, d, s):
        theta, unflat = _flat_theta(p)
        f_loss = self.f_loss
        return theta, (lambda t: f_loss(unflat(t), d, s))

    def _hessian(self, p, d, s):
        theta, phi = self._phi(p, d, s)
        if theta.size > 40 or theta.size == 0:
            return SKIP
        b = self.backend
        H = to_host(tg.hessian(phi, backend=b)(theta))
        if np.shape(H) != (theta.size, theta.size):
            return f"hessian shape {np.shape(H)}"
        ref = self.reference
        if ref is not None and "hessian" in ref:
            why = close(H, ref["hessian"], 1e-9, "hessian vs interpreter")
            if why:
                return why
        grad_np = tg.grad(phi, backend="numpy")
        why = fd_compare(H, grad_np, theta, 1e-5, "hessian", self.stats)
        if why:
            return why
        v = np.random.default_rng(self.spec.seed + 3).uniform(-1, 1, theta.size)
        hv = to_host(tg.grad(lambda t: np.sum(tg.grad(phi)(t) * v), backend=b)(theta))
        why = close(hv, H @ v, 1e-8, "grad of grad (H v)")
        if why:
            return why
        if b == "numpy" and ref is not None:
            ref["hessian"] = H
        return None

    def _order3(self, p, d, s):
        theta, phi = self._phi(p, d, s)
        if theta.size > 24 or theta.size == 0:
            return SKIP
        b = self.backend
        v = np.random.default_rng(self.spec.seed + 4).uniform(-1, 1, theta.size)

        def q(t):  # v' H(t) v, through grad of grad
            return np.sum(tg.grad(lambda u: np.sum(tg.grad(phi)(u) * v))(t) * v)

        t3 = to_host(tg.grad(q, backend=b)(theta))
        hess_np = tg.hessian(phi, backend="numpy")
        why = fd_compare(
            t3, lambda t: v @ hess_np(t) @ v, theta, 1e-5, "third derivative", self.stats
        )
        if why:
            return why
        if theta.size <= 6:
            T = to_host(tg.jacobian(tg.hessian(phi), backend=b)(theta))
            return close(np.einsum("ijk,j,k->i", T, v, v), t3, 1e-8, "jacobian(hessian) vs grad^3")
        return None


def check_program(
    spec: Spec, backends: list[str], orders=(1, 2, 3), checks=None
) -> tuple[list[Failure], dict]:
    """All checks of one program on each backend (numpy first: it is the reference)."""
    failures: list[Failure] = []
    stats: dict = {}
    reference: dict = {}
    try:
        f_out = spec.instantiate()[0]
        reference["jit"] = host_tree(
            tg.jit(f_out, static_argnums=(2,), backend="numpy")(
                spec.params(), spec.data(), spec.static
            )
        )
    except Exception:
        reference = {}
    order = sorted(backends, key=lambda b: b != "numpy")
    for b in order:
        runner = Runner(spec, b, tuple(orders), checks, reference=reference)
        failures += runner.run()
        for k, v in runner.stats.items():
            stats[k] = stats.get(k, 0) + v
    return failures, stats
