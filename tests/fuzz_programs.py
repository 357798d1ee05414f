"""Random user-level programs for fuzzing tracegrad end to end (checked by tests/fuzz_checks.py).

A generated program is plain Python source over NumPy: a function of a pytree of parameters `p`,
a data array `d` and a static argument `s`, that reads captured values (module globals, a closure
cell, a default argument, Python numbers) and is built from a grammar of supported NumPy calls
(elementwise math, broadcasting, reductions with axis/keepdims, slicing, reshapes, transposes,
concatenate/stack, matmul/einsum, where, maximum, user idioms such as softmax). Every statement
is tried on NumPy while it is generated, so each program runs on plain NumPy with finite values.
`Spec.repro()` writes a program as a runnable script; `shrink` makes a failing one smaller.
"""

from __future__ import annotations

import copy
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracegrad.base.tree import flatten, unflatten

# ----------------------------------------------------------------------------------------------
# The grammar: templates of NumPy calls. Each takes the generator, the names of its operands and
# their sample values, and returns an expression (or None when it does not apply).

# Areas with defects already known (issue 10) and fixed elsewhere: a failure is filed under one of
# these when the check, or an op of the (shrunk) program, belongs to it.
KNOWN_AREAS = {
    "aliasing": "results that share memory",
    "captures": "captured globals / closures / defaults read at trace time",
    "jacobian-aux": "jacobian with has_aux",
    "static-type": "static arguments 2 and 2.0 share one program",
    "log-exp2": "log10 / log2 / exp2 not exact",
    "fmax": "fmax / fmin propagate NaN",
    "std-one": "std over one element",
    "prod-zero": "gradient of prod at zero",
    "int-pow": "integer powers accuracy",
    "stack1": "vstack / hstack of one array",
    "inner": "np.inner",
    "order-F": "order='F' ignored",
}

# op text in a program -> known area (the program is filed there when it fails)
KNOWN_OPS = {
    "np.log10": "log-exp2",
    "np.log2": "log-exp2",
    "np.exp2": "log-exp2",
    "np.fmax": "fmax",
    "np.fmin": "fmax",
    "np.std": "std-one",
    "np.inner": "inner",
    "order='F'": "order-F",
}

UNARY = [
    "np.sin({a})",
    "np.cos({a})",
    "np.tanh({a})",
    "np.exp(np.tanh({a}))",
    "np.log1p({a} * {a})",
    "np.sqrt(1.0 + {a} * {a})",
    "np.arctan({a})",
    "{a} ** 2",
    "{a} ** 3",
    "1.0 / (1.0 + {a} * {a})",
    "np.expm1(np.tanh({a}))",
    "np.sinh(np.tanh({a}))",
    "np.cosh(np.tanh({a}))",
    "np.square({a})",
    "-{a}",
    "np.abs({a})",
    "np.log(1.5 + np.sin({a}))",
    "np.arcsin(0.5 * np.tanh({a}))",
    "np.arccos(0.5 * np.tanh({a}))",
    "np.exp2(np.tanh({a}))",
    "np.log10(2.0 + {a} * {a})",
    "np.log2(2.0 + {a} * {a})",
    "np.clip({a}, -0.5, 0.7)",
    "np.power(1.0 + {a} * {a}, 1.5)",
    "np.reciprocal(2.0 + np.cos({a}))",
    "np.tan(0.5 * np.tanh({a}))",
    "np.sign({a}) * {a}",
    "{a} * {k}",
    "{a} + {k}",
    "{k} - {a}",
    "{a} / {k}",
    "np.positive({a})",
    "np.fabs({a})",
    "(1.0 + {a} * {a}) ** 0.5",
    "np.float_power(1.0 + {a} * {a}, 0.5)",
    "np.maximum({a}, 0.0)",
    "np.minimum({a}, 0.25)",
    "np.where({a} > 0.1, {a}, 0.5 * {a})",
    "np.copy({a})",
    "{a}.copy()",
    "np.real({a})",
    "np.tanh({a}) * {a}",
    # idioms of user code: softmax, log-sum-exp, normalisation, shapes used as numbers
    "np.exp({a} - np.max({a}, axis=-1, keepdims=True)) / np.sum(np.exp({a} - np.max({a}, axis=-1, keepdims=True)), axis=-1, keepdims=True)",
    "np.log(np.sum(np.exp({a}), axis=0))",
    "({a} - {a}.mean(axis=-1, keepdims=True)) / np.sqrt({a}.var(axis=-1, keepdims=True) + 1e-5)",
    "{a} - {a}.mean()",
    "{a} / (1.0 + np.linalg.norm({a}))",
    "np.zeros_like({a}) + {a}",
    "np.full_like({a}, 2.0) * {a}",
    "np.ones_like({a}) - {a}",
    "abs({a})",
    "{a}.shape[0] * {a}",
    "{a} * {a}.size",
    "{a}.astype(np.float64)",
    "np.float64(1.5) * {a}",
    "{a}.sum() * {a}",
    "+{a}",
    "np.maximum({a}, 0.0) + np.log1p(np.exp(-np.abs({a})))",
    "1.0 / (1.0 + np.exp(-{a}))",
    "np.einsum('ij->ji', {a})",
    "np.einsum('i->', {a})",
    "np.squeeze(np.expand_dims({a}, 0), 0)",
    "np.mean({a}, axis=0, dtype=np.float64)",
    "np.swapaxes({a}, -1, -2)",
    "{a}[..., None] * {a}[None]",
]
BINARY = [
    "{a} + {b}",
    "{a} - {b}",
    "{a} * {b}",
    "{a} / (1.0 + {b} * {b})",
    "np.maximum({a}, {b})",
    "np.minimum({a}, {b})",
    "np.where({a} > {b}, {a}, 2.0 * {b})",
    "np.fmax({a}, {b})",
    "np.fmin({a}, {b})",
    "np.add({a}, {b})",
    "np.multiply({a}, {b})",
    "np.where(({a} > 0) & ({b} < 0.5), {a} * {b}, {a})",
    "np.arctan({a} - {b})",
    "np.clip({a}, -1.0, {b} * {b} + 0.1)",
    "(1.0 + {a} * {a}) ** {b}",
    "np.power(1.5 + np.sin({a}), {b})",
    "np.where({a} > 0, {b}, 0.0)",
    "{a} * ({b} > 0.2)",
    "np.maximum({a}, {b}) - np.minimum({a}, {b})",
    "np.einsum('ij,ij->i', {a}, {b})",
    "np.einsum('i,i->', {a}, {b})",
    "np.dot({a}, {b})",
    "np.stack([{a}, {b}], axis=-1).sum(axis=-1)",
    "np.clip({a}, a_min=None, a_max={b})",
]
REDUCERS = ["np.sum", "np.mean", "np.max", "np.min", "np.prod", "np.std", "np.var", "np.amax"]
METHODS = ["sum", "mean", "max", "min", "prod"]


def _axis_choice(rng, ndim: int):
    if ndim == 0 or rng.random() < 0.3:
        return None
    if rng.random() < 0.6:
        return int(rng.integers(-ndim, ndim))
    k = int(rng.integers(1, ndim + 1))
    return tuple(int(i) for i in sorted(rng.choice(ndim, size=k, replace=False)))


def _t_reduce(rng, names, samples):
    (a,), (A,) = names[:1], samples[:1]
    axis = _axis_choice(rng, A.ndim)
    keep = bool(rng.random() < 0.3)
    if rng.random() < 0.3:
        meth = METHODS[rng.integers(len(METHODS))]
        return f"{a}.{meth}(axis={axis!r}, keepdims={keep})"
    fn = REDUCERS[rng.integers(len(REDUCERS))]
    extra = ", ddof=1" if fn in ("np.std", "np.var") and rng.random() < 0.2 else ""
    return f"{fn}({a}, axis={axis!r}, keepdims={keep}{extra})"


def _t_norm(rng, names, samples):
    (a,), (A,) = names[:1], samples[:1]
    if A.ndim == 0:
        return None
    axis = None if rng.random() < 0.5 else int(rng.integers(A.ndim))
    return f"np.linalg.norm(1.0 + {a}, axis={axis!r})"


def _t_slice(rng, names, samples):
    (a,), (A,) = names[:1], samples[:1]
    if A.ndim == 0:
        return f"{a}[None]" if rng.random() < 0.5 else f"{a}[...]"
    parts = []
    for d in A.shape:
        r = rng.random()
        if r < 0.3:
            parts.append(":")
        elif r < 0.45 and d > 0:
            parts.append(str(int(rng.integers(-d, d))))
        elif r < 0.55:
            parts.append("::-1")
        elif r < 0.65:
            parts.append("None, :")
        else:
            start = int(rng.integers(0, d + 1))
            step = int(rng.choice([1, 2, -1, -2, 3]))
            parts.append(
                f"{start}::{step}" if step > 0 else f"{start}::{step}" if start else f"::{step}"
            )
    if rng.random() < 0.2:
        return f"{a}[..., {parts[-1]}]"
    return f"{a}[{', '.join(parts)}]"


def _t_reshape(rng, names, samples):
    (a,), (A,) = names[:1], samples[:1]
    r = rng.random()
    if r < 0.2:
        return f"{a}.reshape(-1)" if A.size else f"{a}.reshape({A.size})"
    if r < 0.35:
        return f"np.ravel({a})"
    if r < 0.45:
        return f"{a}.ravel(order='F')" if A.ndim >= 2 else f"{a}.flatten()"
    if r < 0.55:
        return f"np.reshape({a}, {(1, *A.shape)!r})"
    if r < 0.65 and A.ndim >= 2:
        return f"{a}.reshape({(A.shape[0] * A.shape[1], *A.shape[2:])!r})"
    if r < 0.75 and A.ndim >= 1 and A.shape[-1] % 2 == 0 and A.shape[-1]:
        return f"{a}.reshape({(*A.shape[:-1], 2, A.shape[-1] // 2)!r})"
    if r < 0.85:
        return f"np.expand_dims({a}, {int(rng.integers(-A.ndim - 1, A.ndim + 1))})"
    if 1 in A.shape:
        return f"np.squeeze({a})"
    return f"np.reshape({a}, {A.shape!r}, order='F')" if A.ndim >= 2 else None


def _t_transpose(rng, names, samples):
    (a,), (A,) = names[:1], samples[:1]
    if A.ndim < 2:
        return f"{a}.T"
    r = rng.random()
    if r < 0.3:
        return f"{a}.T"
    if r < 0.6:
        perm = tuple(int(i) for i in rng.permutation(A.ndim))
        return f"np.transpose({a}, {perm!r})"
    if r < 0.8:
        return f"np.swapaxes({a}, 0, -1)"
    return f"np.moveaxis({a}, 0, -1)"


def _t_broadcast(rng, names, samples):
    (a,), (A,) = names[:1], samples[:1]
    shape = (int(rng.integers(1, 4)), *A.shape)
    return f"np.broadcast_to({a}, {shape!r})"


def _t_concat(rng, names, samples):
    a, b = names[:2]
    A, B = samples[:2]
    if A.ndim == 0:
        return f"np.stack([{a}, {b}])" if A.shape == B.shape else None
    r = rng.random()
    if r < 0.45:
        axis = int(rng.integers(-A.ndim, A.ndim))
        if B.ndim == A.ndim and all(
            x == y
            for i, (x, y) in enumerate(zip(A.shape, B.shape, strict=True))
            if i != axis % A.ndim
        ):
            return f"np.concatenate([{a}, {b}, {a}], axis={axis})"
        return f"np.concatenate([{a}, 2.0 * {a}], axis={axis})"
    if r < 0.75:
        axis = int(rng.integers(-A.ndim - 1, A.ndim + 1))
        other = b if A.shape == B.shape else f"np.sin({a})"
        return f"np.stack([{a}, {other}], axis={axis})"
    if r < 0.85:
        return f"np.vstack([{a}])" if rng.random() < 0.5 else f"np.hstack([{a}, {a}])"
    return f"np.concatenate([{a}, {a}], axis=None)"


def _t_matmul(rng, names, samples):
    a, b = names[:2]
    A, B = samples[:2]
    r = rng.random()
    if A.ndim >= 1 and B.ndim >= 1 and A.shape[-1] == B.shape[-2 if B.ndim >= 2 else 0]:
        try:
            np.matmul(A, B)
        except ValueError:
            pass
        else:
            fn = ["{a} @ {b}", "np.matmul({a}, {b})", "np.dot({a}, {b})"][int(rng.integers(3))]
            if fn.startswith("np.dot") and (A.ndim > 2 or B.ndim > 2):
                fn = "{a} @ {b}"
            return fn.format(a=a, b=b)
    if A.ndim == 2:
        if r < 0.3:
            return f"{a} @ {a}.T"
        if r < 0.6:
            return f"np.einsum('ij,kj->ik', {a}, {a})"
        return f"np.einsum('ij->j', {a})"
    if A.ndim == 1:
        if r < 0.4:
            return f"np.outer({a}, np.cos({a}))"
        if r < 0.7:
            return f"np.dot({a}, {a})"
        return f"np.vdot({a}, np.sin({a}))"
    if A.ndim == 3:
        return f"np.einsum('bij,bkj->bik', {a}, {a})"
    return None


def _t_inner(rng, names, samples):
    (a,), (A,) = names[:1], samples[:1]
    if A.ndim == 1:
        return f"np.inner({a}, np.sin({a}))"
    if A.ndim == 2:
        return f"np.inner({a}, {a})"
    return None


TEMPLATES: list[tuple[float, int, Callable]] = [
    (6.0, 1, lambda rng, n, s: UNARY[rng.integers(len(UNARY))].format(a=n[0], k=n[-1])),
    (5.0, 2, lambda rng, n, s: BINARY[rng.integers(len(BINARY))].format(a=n[0], b=n[1])),
    (3.0, 1, _t_reduce),
    (0.5, 1, _t_norm),
    (2.0, 1, _t_slice),
    (1.5, 1, _t_reshape),
    (1.5, 1, _t_transpose),
    (0.5, 1, _t_broadcast),
    (1.5, 2, _t_concat),
    (2.0, 2, _t_matmul),
    (0.3, 1, _t_inner),
]
_WEIGHTS = np.array([t[0] for t in TEMPLATES]) / sum(t[0] for t in TEMPLATES)


# ----------------------------------------------------------------------------------------------
# Programs


@dataclass
class Spec:
    """What a program is built from; `source()` renders it."""

    seed: int
    param_tree: Any  # pytree of shapes (tuples)
    leaf_names: list[str]  # p0, p1... in flatten order
    data_shape: tuple
    data_dtype: str
    static: int
    globals_: dict[str, Any]  # G0, G1 arrays; K0 float, K1 int
    closure: np.ndarray  # C0
    default: np.ndarray  # D0
    stmts: list[tuple[str, str]]  # (name, expression)
    outputs: list[str]  # names returned by f_out (and summed into the loss)
    large: bool = False
    tags: set[str] = field(default_factory=set)

    def used(self) -> list[tuple[str, str]]:
        """Statements the outputs need (dead ones dropped)."""
        need = set(self.outputs)
        kept = []
        for name, expr in reversed(self.stmts):
            if name in need:
                kept.append((name, expr))
                need |= set(re.findall(r"\b[vp]\d+\b", expr))
        return kept[::-1]

    def source(self) -> str:
        body = []
        paths = _paths(self.param_tree)
        used = self.used()
        text = " ".join(e for _, e in used) + " " + " ".join(self.outputs)
        for name, path in zip(self.leaf_names, paths, strict=True):
            if re.search(rf"\b{name}\b", text):
                body.append(f"{name} = p{path}")
        body += [f"{n} = {e}" for n, e in used]
        outs = ", ".join(f"'o{i}': {o}" for i, o in enumerate(self.outputs))
        loss = " + ".join(
            f"np.sum(np.sin(o['o{i}'] + {0.3 * (i + 1):.1f}))" for i in range(len(self.outputs))
        )
        inner = "\n".join(body)
        return (
            "def build(C0):\n"
            "    def f_out(p, d, s, D0=D0):\n"
            + textwrap.indent(inner + f"\nreturn {{{outs}}}\n", " " * 8)
            + "    def f_loss(p, d, s, D0=D0):\n"
            "        o = f_out(p, d, s, D0)\n"
            f"        return {loss}\n"
            "    def set_closure(value):\n"
            "        nonlocal C0\n"
            "        C0 = value\n"
            "    return f_out, f_loss, set_closure\n"
        )

    def namespace(self) -> dict:
        ns = {"np": np, "D0": self.default.copy()}
        for k, v in self.globals_.items():
            ns[k] = v.copy() if isinstance(v, np.ndarray) else v
        return ns

    def instantiate(self):
        """(f_out, f_loss, set_closure, namespace): fresh functions over fresh captured values."""
        ns = self.namespace()
        exec(compile(self.source(), f"<fuzz program {self.seed}>", "exec"), ns)
        f_out, f_loss, set_closure = ns["build"](self.closure.copy())
        return f_out, f_loss, set_closure, ns

    def params(self, rng=None, scale: float = 1.0):
        """Parameter values; in one program in three the 0-d ones are Python floats."""
        rng = rng or np.random.default_rng(self.seed + 1)
        p = _map_shapes(self.param_tree, lambda sh: scale * rng.uniform(-1.0, 1.0, size=sh))
        if self.seed % 3 == 0:
            p = _map_tree(p, lambda x: float(x) if np.ndim(x) == 0 else x)
        return p

    def data(self, rng=None):
        rng = rng or np.random.default_rng(self.seed + 2)
        x = rng.uniform(-1.0, 1.0, size=self.data_shape)
        if self.data_dtype in ("int64", "int32"):
            return rng.integers(-3, 4, size=self.data_shape).astype(self.data_dtype)
        if self.data_dtype == "bool":
            return x > 0
        return x.astype(self.data_dtype)

    def repro(self) -> str:
        g = {k: v for k, v in self.globals_.items()}
        return (
            "import numpy as np\nimport tracegrad as tg\n\n"
            + "".join(f"{k} = {_lit(v)}\n" for k, v in g.items())
            + f"D0 = {_lit(self.default)}\n\n"
            + self.source()
            + f"\n\nf_out, f_loss, set_closure = build({_lit(self.closure)})\n"
            + f"p = {_lit_tree(self.params())}\n"
            + f"d = {_lit(self.data())}\n"
            + f"s = {self.static}\n"
        )


def _lit(v) -> str:
    if isinstance(v, np.ndarray):
        text = np.array2string(v, separator=", ", precision=17, threshold=10**6).replace("\n", "")
        if v.size == 0:
            return f"np.zeros({v.shape!r}, dtype=np.{v.dtype})"
        return f"np.array({text}, dtype=np.{v.dtype})"
    return repr(v)


def _lit_tree(t) -> str:
    if isinstance(t, dict):
        return "{" + ", ".join(f"{k!r}: {_lit_tree(v)}" for k, v in t.items()) + "}"
    if isinstance(t, tuple):
        return "(" + "".join(f"{_lit_tree(v)}, " for v in t) + ")"
    if isinstance(t, list):
        return "[" + ", ".join(_lit_tree(v) for v in t) + "]"
    return _lit(t)


class Shape(tuple):
    """A leaf of a tree of shapes (a plain tuple would read as a tuple node)."""


def _map_shapes(tree, fn):
    if isinstance(tree, Shape):
        return fn(tuple(tree))
    if isinstance(tree, dict):
        return {k: _map_shapes(v, fn) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_map_shapes(v, fn) for v in tree]
    return tuple(_map_shapes(v, fn) for v in tree)


def _paths(tree, prefix="") -> list[str]:
    if isinstance(tree, Shape):
        return [prefix]
    if isinstance(tree, dict):
        return [p for k, v in tree.items() for p in _paths(v, f"{prefix}[{k!r}]")]
    return [p for i, v in enumerate(tree) for p in _paths(v, f"{prefix}[{i}]")]


def _random_shape(rng, dims, allow_empty: bool) -> Shape:
    rank = int(rng.choice([0, 1, 1, 2, 2, 2, 3] if max(dims) < 100 else [0, 1, 1, 2, 2]))
    shape = [int(rng.choice(dims)) for _ in range(rank)]
    if rank and rng.random() < 0.2:
        shape[int(rng.integers(rank))] = 1
    if allow_empty and rank and rng.random() < 0.15:
        shape[int(rng.integers(rank))] = 0
    return Shape(shape)


def _random_tree(rng, dims, allow_empty: bool, depth: int = 0):
    kind = rng.choice(["dict", "tuple", "list", "leaf"]) if depth < 2 else "leaf"
    if kind == "leaf" and depth == 0:
        kind = "dict"
    if kind == "leaf":
        return _random_shape(rng, dims, allow_empty)
    n = int(rng.integers(1, 4))
    children = [_random_tree(rng, dims, allow_empty, depth + 1) for _ in range(n)]
    if kind == "dict":
        return {k: c for k, c in zip(["w", "b", "scale", "layer"][:n], children, strict=True)}
    return tuple(children) if kind == "tuple" else children


def generate(
    seed: int,
    n_stmts: int | None = None,
    large: bool = False,
    allow_empty: bool = True,
    known: bool = True,
    captures: bool = False,
    duplicate: bool = False,
) -> Spec:
    """A random program; `known=False` leaves out the ops of the known-defect areas;
    `captures=True` makes its last output read every captured value; `duplicate=True` makes it
    return one value twice and compute one expression twice."""
    rng = np.random.default_rng(seed)
    dims = [1, 2, 3, 4] if not large else [300, 400, 1]
    if large:
        allow_empty = False
    tree = _random_tree(rng, dims, allow_empty)
    leaves = []
    _map_shapes(tree, leaves.append)
    leaf_names = [f"p{i}" for i in range(len(leaves))]
    data_shape = tuple(int(d) for d in _random_shape(rng, dims, False))
    data_dtype = str(rng.choice(["float64", "float64", "float32", "int64", "int32", "bool"]))
    static = int(rng.integers(1, 4))
    g0 = rng.uniform(-1, 1, size=_random_shape(rng, dims, False))
    g1 = rng.uniform(-1, 1, size=_random_shape(rng, dims, False))
    globals_ = {
        "G0": g0,
        "G1": g1,
        "K0": float(np.round(rng.uniform(0.5, 2.0), 3)),
        "K1": int(rng.integers(1, 4)),
    }
    closure = rng.uniform(-1, 1, size=_random_shape(rng, dims, False))
    default = rng.uniform(-1, 1, size=_random_shape(rng, dims, False))

    spec = Spec(
        seed,
        tree,
        leaf_names,
        data_shape,
        data_dtype,
        static,
        globals_,
        closure,
        default,
        [],
        [],
        large,
    )
    ns = spec.namespace()
    ns["C0"] = closure
    p = spec.params()
    flat, _ = flatten(p)
    sample = dict(zip(leaf_names, flat, strict=True))
    sample["d"] = spec.data()
    sample["s"] = static
    env = {**ns, **sample}
    pool = list(leaf_names)
    # captured and data values enter through statements, so that they can be shrunk away
    entries = [
        "d * 0.5 + {a}",
        "{a} * G0",
        "{a} - G1",
        "{a} * K0 + K1",
        "{a} + C0",
        "{a} * D0",
        "{a} * s",
        "np.sin({a}) if s > 1 else {a}",
        "{a} ** s",
    ]
    n = n_stmts if n_stmts is not None else int(rng.integers(2, 12))
    stmts: list[tuple[str, str]] = []
    attempts = 0
    while len(stmts) < n and attempts < 20 * n:
        attempts += 1
        names = [pool[int(min(len(pool) - 1, abs(rng.normal(len(pool) - 1, 3))))] for _ in range(2)]
        if rng.random() < 0.2:
            expr = entries[int(rng.integers(len(entries)))].format(a=names[0])
        else:
            k = int(rng.choice(len(TEMPLATES), p=_WEIGHTS))
            if TEMPLATES[k][1] == 1 and rng.random() < 0.1:
                names[-1] = ["K0", "K1", "2.5", "s"][int(rng.integers(4))]
            samples = [None if env.get(x) is None else np.asarray(env[x]) for x in names]
            expr = TEMPLATES[k][2](rng, names, samples)
        if expr is None or (not known and any(op in expr for op in KNOWN_OPS)):
            continue
        if large and (
            "@" in expr
            or "einsum" in expr
            or "outer" in expr
            or "inner" in expr
            or "dot" in expr
            or "stack" in expr
            or "concatenate" in expr
        ):
            continue
        value = _try(expr, env)
        if value is None:
            continue
        name = f"v{len(stmts)}"
        env[name] = value
        stmts.append((name, expr))
        pool.append(name)
    if not stmts:
        stmts.append(("v0", f"np.sin({leaf_names[0]})"))
        env["v0"] = np.sin(env[leaf_names[0]])
    if captures:
        last = stmts[-1][0]
        expr = f"{last} * (np.sum(G0) + np.mean(G1) * K0 + K1 + np.sum(C0) + np.sum(D0 * D0))"
        env[f"v{len(stmts)}"] = _try(expr, env)
        stmts.append((f"v{len(stmts)}", expr))
    k_out = int(rng.integers(1, 4))
    outputs = list(
        dict.fromkeys(
            [stmts[-1][0]] + [stmts[int(rng.integers(len(stmts)))][0] for _ in range(k_out - 1)]
        )
    )
    if duplicate or rng.random() < 0.15:
        # one value returned twice, and an expression computed twice (merged by the simplifier)
        name, expr = stmts[int(rng.integers(len(stmts)))]
        stmts.append((f"v{len(stmts)}", expr))
        outputs += [name, stmts[-1][0], outputs[0]]
    spec.stmts, spec.outputs = stmts, outputs
    return spec


def _try(expr: str, env: dict):
    try:
        with np.errstate(all="raise"):
            value = eval(expr, env)  # the program is made of these expressions
    except Exception:
        return None
    array = np.asarray(value)
    if array.dtype != np.float64:
        return None
    if array.size and (not np.all(np.isfinite(array)) or np.max(np.abs(array)) > 1e4):
        return None
    if array.size > 2_000_000 or array.ndim > 4:
        return None
    return value  # as NumPy gave it (a Python float stays one: it has no .T)


def _map_tree(t, fn):
    leaves, tree = flatten(t)
    return unflatten(tree, [fn(x) for x in leaves])


def shrink(spec: Spec, still_fails: Callable[[Spec], bool], budget: int = 60) -> Spec:
    """A smaller program that still fails: drop outputs, bypass statements by an operand."""
    best = copy.deepcopy(spec)
    best.stmts = best.used()
    tries = 0
    progress = True
    while progress and tries < budget:
        progress = False
        candidates = []
        if len(best.outputs) > 1:
            for o in best.outputs:
                c = copy.deepcopy(best)
                c.outputs = [x for x in best.outputs if x != o]
                candidates.append(c)
        for i, (name, expr) in enumerate(best.stmts):
            for operand in dict.fromkeys(re.findall(r"\b[vp]\d+\b", expr)):
                c = copy.deepcopy(best)
                c.stmts = [(n, re.sub(rf"\b{name}\b", operand, e)) for n, e in best.stmts[i + 1 :]]
                c.stmts = best.stmts[:i] + c.stmts
                c.outputs = list(dict.fromkeys(operand if o == name else o for o in best.outputs))
                if any(o.startswith("p") for o in c.outputs):
                    continue
                c.stmts = c.used()
                candidates.append(c)
        for c in candidates:
            tries += 1
            if tries > budget:
                break
            try:
                ok = still_fails(c)
            except Exception:
                ok = False
            if ok:
                best = c
                progress = True
                break
    return best
