"""LLVM's optimisation pipeline ends on every kernel, in a time a user would not notice.

benchmarks/hunt.py found a program (random program seed 777148, order 2 on the cpu backend)
whose Hessian never finished compiling: LLVM's loop interleaving ran without end on one kernel,
a two-element loop of tanh, exp2 and sincos whose inputs were all size-1 broadcasts. Its
kernel's LLVM IR is kept as tests/fixtures/llvm_slow_interleave.ll. Each check runs in a
child process with a time limit, so a pipeline that hangs again fails the test instead of
hanging the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "fixtures", "llvm_slow_interleave.ll")

# Well above the 0.1-0.3 s these take and below the minutes a regression takes.
LIMIT_S = 90


def _run_child(code: str) -> str:
    env = dict(os.environ, TRACEGRAD_TIERED="0", TRACEGRAD_CACHE_DIR="off")
    env["PYTHONPATH"] = os.pathsep.join([HERE, env.get("PYTHONPATH", "")])
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=env,
            capture_output=True,
            text=True,
            timeout=LIMIT_S,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still compiling after {LIMIT_S} s: LLVM's pipeline hangs") from None
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_kernel_that_hung_the_loop_interleaver_compiles():
    out = _run_child(
        f"""
        from tracegrad.cpu.llvm import engine
        with open({FIXTURE!r}) as f:
            data = engine.compile_object(f.read())
        print(len(data))
        """
    )
    assert int(out.strip().splitlines()[-1]) > 0


def test_the_program_whose_hessian_hung_compiles_and_passes_its_checks():
    out = _run_child(
        """
        import fuzz_checks, fuzz_programs
        failures, counts = fuzz_checks.check_program(
            fuzz_programs.generate(777148), ["cpu"], (1, 2, 3), None
        )
        print(len(failures), counts["hessian"], counts["order3"])
        """
    )
    assert out.strip().splitlines()[-1] == "0 1 1"


def test_modules_with_math_functions_are_optimised_without_interleaving(monkeypatch):
    # The choice that keeps the pipeline finite, pinned: interleaving stays for the other
    # modules (plain arithmetic), where LLVM takes it.
    from tracegrad.cpu.llvm import engine

    seen = []
    llvm = engine._llvm()
    real = llvm.create_pass_builder

    def spy(tm, options):
        seen.append(options.loop_interleaving)
        return real(tm, options)

    monkeypatch.setattr(llvm, "create_pass_builder", spy)
    with open(FIXTURE) as f:
        engine.optimised_module(f.read())
    plain = textwrap.dedent(
        """
        define void @add(double* %a, i64 %n) {
        entry:
          ret void
        }
        """
    )
    engine.optimised_module(plain)
    assert seen == [False, True]
