"""Golden files of generated source: a change to code generation shows up as a reviewable diff.

For each workload of tests/golden/workloads.py, the source the cpu backend generates (as
`tg.make_kernels` shows it) and the source the cuda backend generates for its reference device
(the same on every machine: no GPU or compiler is needed) are kept in tests/golden/. What differs
from run to run or machine to machine (the salts of the kernel cache, which hash versions and the
generators' own files, and the module keys made from them) is written as `<salt>` and `<key>`.

A change to code generation that changes the kernels fails here, with the diff. When the change
is meant, regenerate and review the files' diff with the change:

    python3 tests/test_golden.py --update
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
BACKENDS = ("cpu", "cuda")
UPDATE = "python3 tests/test_golden.py --update"

if __name__ == "__main__":  # run as a script: this checkout's tracegrad, the CUDA simulator
    sys.path[:0] = [str(HERE.parent), str(HERE)]
    if not os.path.exists("/proc/driver/nvidia"):
        os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

from golden.workloads import WORKLOADS  # noqa: E402

from tracegrad import passes, vmath  # noqa: E402
from tracegrad.api import make_ir  # noqa: E402

_VOLATILE = (
    (re.compile(r"\bsalt [0-9a-f]{8,}"), "salt <salt>"),
    (re.compile(r"\bk_[0-9a-f]{8,}"), "k_<key>"),
    (re.compile(r"loaded\('[0-9a-f]{8,}'\)"), "loaded('<key>')"),  # a module by its key
    (re.compile(r"# native.py [0-9a-f]{8,}"), "# native.py <hash>"),
)


def generate(name: str, backend: str) -> str:
    """The normalised generated source of workload `name` on `backend`."""
    fun, args = WORKLOADS[name]
    graph, _ = passes.extract_hooks(passes.optimize(make_ir(fun, optimize=False)(*args)))
    previous = vmath._override
    vmath.set_math_mode("vector")  # the default, whatever TRACEGRAD_MATH says here
    try:
        if backend == "cpu":
            from tracegrad import codegen_cpu
            from tracegrad.cpu import program

            threads, program._threads = program._threads, lambda: 2  # whatever the machine has
            try:
                text = codegen_cpu.program_source(graph)
            finally:
                program._threads = threads
        else:
            from tracegrad import codegen_cuda

            text = codegen_cuda.build(graph, codegen_cuda.REFERENCE_CONFIG, load=False).source()
    finally:
        vmath._override = previous
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return text.rstrip("\n") + "\n"


def golden_path(name: str, backend: str) -> Path:
    return GOLDEN / f"{name}.{backend}.txt"


def update() -> None:
    for name in WORKLOADS:
        for backend in BACKENDS:
            path = golden_path(name, backend)
            text = generate(name, backend)
            old = path.read_text() if path.exists() else None
            if text != old:
                path.write_text(text)
                print(
                    f"{'updated' if old is not None else 'wrote'} {path.relative_to(HERE.parent)}"
                )


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit(f"usage: {UPDATE}")
    update()
    sys.exit(0)


import pytest  # noqa: E402


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_generated_source_matches_its_golden_file(name, backend):
    path = golden_path(name, backend)
    assert path.exists(), f"no golden file {path.name}: run {UPDATE}"
    want, got = path.read_text(), generate(name, backend)
    if got != want:
        diff = difflib.unified_diff(
            want.splitlines(), got.splitlines(), f"golden/{path.name}", "generated", lineterm=""
        )
        shown = "\n".join(list(diff)[:120])
        pytest.fail(
            f"the {backend} source of {name} differs from tests/golden/{path.name}; if the change "
            f"is meant, run `{UPDATE}` and review the diff:\n{shown}"
        )


def test_golden_text_holds_nothing_that_changes_between_runs():
    """No hashes, addresses or absolute paths: what is left would differ between two machines."""
    for path in GOLDEN.glob("*.txt"):
        text = path.read_text()
        assert not re.search(r"\b[0-9a-f]{12,}\b", text), path.name
        assert " at 0x" not in text and str(HERE.parent) not in text, path.name
    assert sorted(p.name for p in GOLDEN.glob("*.txt")) == sorted(
        golden_path(n, b).name for n in WORKLOADS for b in BACKENDS
    ), f"golden files without a workload, or missing: run {UPDATE}"


def test_the_normalisation_hides_only_salts_and_keys():
    text = "# salt 0123456789abcdef (versions)\n# module k_0123456789abcdef01234567\nv = 12345678"
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    assert text == "# salt <salt> (versions)\n# module k_<key>\nv = 12345678"
