"""Did a change to code generation change any kernel? The generated source of a corpus of
programs, for this checkout and for a git revision, compared text by text.

    python3 benchmarks/compare_generated_source.py --before cd477c3
    python3 benchmarks/compare_generated_source.py --before HEAD~3 --programs 50

Not a benchmark: a check for refactorings of the fusion planner, the loop IR, its lowerings or
the printers that mean to change nothing. For each program it writes, with nothing compiled, what
`tg.make_kernels` shows on the cpu backend and on the cuda backend's reference device (under
Numba's CUDA simulator, no GPU needed): the golden workloads of tests/golden/workloads.py; scans,
sums over one to three axes, sin and cos of one argument, float32; matrix products with and
without split-K and with transposed operands; and `--programs` random programs of
tests/fuzz_programs.py (their outputs and their gradients). The salts and module keys (and a runner's
keys of its kernel modules and of its native helpers), which hash the generators' own files, are
masked. It prints how many texts differ and the first diff.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CORPUS = r"""
import json, re, sys
import numpy as np
import tracegrad as tg
from tracegrad import passes, vmath
from tracegrad.api import make_ir
import fuzz_programs as fp
from golden.workloads import WORKLOADS

VOLATILE = (
    (re.compile(r"\bsalt [0-9a-f]{8,}"), "salt <salt>"),
    (re.compile(r"\bk_[0-9a-f]{8,}"), "k_<key>"),
    # a runner's kernel modules by key, and the hash of the native helpers it was written against
    (re.compile(r"_cache\.loaded\('[0-9a-f]{8,}'\)"), "_cache.loaded('<key>')"),
    (re.compile(r"# native\.py [0-9a-f]{8,}"), "# native.py <hash>"),
)


def sources(fun, args, static_argnums=()):
    graph = make_ir(fun, static_argnums=static_argnums, optimize=False)(*args)
    graph, _ = passes.extract_hooks(passes.optimize(graph))
    vmath.set_math_mode("vector")
    from tracegrad import codegen_cpu, codegen_cuda

    out = {}
    for backend in ("cpu", "cuda"):
        try:
            if backend == "cpu":
                text = codegen_cpu.program_source(graph)
            else:
                config = codegen_cuda.REFERENCE_CONFIG
                text = codegen_cuda.build(graph, config, load=False).source()
        except Exception as exc:
            text = f"ERROR {type(exc).__name__}: {str(exc)[:200]}"
        for pattern, replacement in VOLATILE:
            text = pattern.sub(replacement, text)
        out[backend] = text
    return out


def scans(x):
    return np.sum(np.cumsum(x, axis=1) ** 2) + np.sum(np.cumsum(x * x, axis=0))


def scan_loop(x):
    def body(c, xi):
        c = np.tanh(c * 0.9 + xi)
        return c, c.sum()

    c, ys = tg.scan(body, np.zeros(x.shape[1]), x)
    return np.sum(ys) + np.sum(c)


def element_loop(x):
    y = np.zeros_like(x)
    for i in range(6):
        y[i] = x[i] * x[(i + 1) % 6]
    return np.sum(y**2)


def three_axes(x):
    return np.sum(np.exp(x), axis=(0, 2)).sum() + np.max(x, axis=1).sum() + np.prod(x[0], axis=0).sum()


def sin_cos(x):
    return np.sum(np.sin(x) * np.cos(x) + np.where(x > 0, x, 0.1 * x))


def product(a, b):
    return np.sum(np.tanh(a @ b) ** 2)


def batched(a, b):
    return np.sum(np.sin(np.matmul(a, b)))


corpus = {name: sources(fun, args) for name, (fun, args) in WORKLOADS.items()}
x = np.linspace(-1, 1, 24).reshape(4, 6)
cases = [
    ("scans", scans, (x,)), ("scan_loop", scan_loop, (x,)), ("element_loop", element_loop, (np.linspace(0, 1, 6),)),
    ("three_axes", three_axes, (np.linspace(-1, 1, 60).reshape(3, 4, 5),)), ("sin_cos", sin_cos, (x,)),
    ("sin_cos_f32", sin_cos, (x.astype(np.float32),)),
    ("split_k", product, (np.ones((8, 700)) * 0.01, np.ones((700, 8)))),
    ("product", product, (np.ones((40, 30)), np.ones((30, 50)))),
    ("batched", batched, (np.ones((3, 5, 300)), np.ones((3, 300, 4)))),
]
for name, fun, args in cases:
    for transform in (tg.jit, tg.grad, tg.hessian):
        if transform is tg.hessian and name in ("scan_loop", "split_k", "batched"):
            continue
        corpus[f"{name}-{transform.__name__}"] = sources(transform(fun), args)
for seed in range(int(sys.argv[2])):
    spec = fp.generate(seed)
    f_out, f_loss, _, _ = spec.instantiate()
    p, d = spec.params(), spec.data()
    corpus[f"random{seed}-out"] = sources(f_out, (p, d, spec.static), static_argnums=(2,))
    loss = tg.grad(f_loss, static_argnums=(2,))
    corpus[f"random{seed}-grad"] = sources(loss, (p, d, spec.static))
with open(sys.argv[1], "w") as f:
    json.dump(corpus, f)
"""


def generate(script: str, root: str, tests: str, out: str, programs: int) -> dict:
    """The corpus's texts made by the tracegrad package under `root` (one script for both
    checkouts: its name is in the kernels' comments)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=f"{root}{os.pathsep}{tests}")
    subprocess.run(
        [sys.executable, "-W", "ignore", script, out, str(programs)], env=env, check=True, cwd=root
    )
    with open(out) as f:
        return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="the git revision to compare with")
    parser.add_argument("--programs", type=int, default=200, help="random programs (default 200)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = os.path.join(tmp, "before")
        os.makedirs(old)
        archive = subprocess.run(
            ["git", "archive", args.before, "tracegrad"], cwd=ROOT, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", old], input=archive.stdout, check=True)
        tests = os.path.join(ROOT, "tests")  # the same corpus for both: this checkout's tests
        script = os.path.join(tmp, "corpus.py")
        with open(script, "w") as f:
            f.write(CORPUS)
        before = generate(script, old, tests, os.path.join(tmp, "before.json"), args.programs)
        after = generate(script, ROOT, tests, os.path.join(tmp, "after.json"), args.programs)
    texts = [(name, backend) for name in before for backend in before[name]]
    differ = [(n, b) for n, b in texts if before[n][b] != after.get(n, {}).get(b)]
    errors = sum(text.startswith("ERROR") for n in after for text in after[n].values())
    print(f"{len(texts)} texts ({len(before)} programs x cpu, cuda): {len(differ)} differ")
    print(f"{errors} texts are errors in this checkout (a program a backend does not take)")
    if differ:
        name, backend = differ[0]
        diff = difflib.unified_diff(
            before[name][backend].splitlines(True),
            after.get(name, {}).get(backend, "").splitlines(True),
            f"{args.before}: {name} ({backend})",
            f"this checkout: {name} ({backend})",
        )
        sys.stdout.writelines(list(diff)[:80])
        sys.exit(1)


if __name__ == "__main__":
    main()
