"""benchmarks/cold_compile.py and loops_vs_jax.py, and their child vs_jax_programs.py, at tiny
sizes (`--small`): the tracegrad children run under both cpu compilers and print the fields the
parents read, their values are right, the parents' argument parsing, medians, ratios and tables
work. JAX lives outside the project (/tmp/benchenv, see the scripts' docstrings): its side is
skipped, with the reason, where that interpreter is absent; tracegrad's side always runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")
CHILD = os.path.join(BENCH, "vs_jax_programs.py")


def _load(name: str):
    """A benchmark script as a module (benchmarks/ is no package); sys.path left as it was."""
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


vp = _load("vs_jax_programs")
cold_compile = _load("cold_compile")
loops_vs_jax = _load("loops_vs_jax")


def _need_jax() -> str:
    if not os.path.exists(vp.DEFAULT_JAX):
        pytest.skip(
            f"no JAX interpreter at {vp.DEFAULT_JAX} (python3 -m venv /tmp/benchenv && "
            "/tmp/benchenv/bin/pip install jax numpy); JAX is not a dependency of tracegrad"
        )
    return vp.DEFAULT_JAX


def _child(library: str, program: str, mode: str, env: dict, save=None) -> dict:
    python = sys.executable if library == "tracegrad" else vp.DEFAULT_JAX
    cmd = [python, CHILD, library, program, mode, "--small"] + (["--save", save] if save else [])
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _tracegrad_env(compiler: str) -> dict:
    # the suite's own kernel cache (conftest.py), so a second run of the suite loads the kernels
    return vp.tracegrad_env(compiler, os.environ["TRACEGRAD_CACHE_DIR"])


def _w3_hessian(n: int) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal(n)  # the child's arguments, rng seed 0
    return np.diag(6 * x) + np.eye(n, k=1) + np.eye(n, k=-1)


@pytest.mark.parametrize("compiler", ["llvm", "numba"])
def test_child_first_call_fields_and_values(compiler, tmp_path):
    save = str(tmp_path / "w3.npz")
    out = _child("tracegrad", "W3", "first", _tracegrad_env(compiler), save)
    for key in ("import", "build", "first", "epoch_result"):
        assert isinstance(out[key], float) and out[key] > 0, key
    assert out["library"] == "tracegrad" and out["program"] == "W3" and out["small"] is True
    assert out["compiler"] == compiler
    assert out["versions"]["numba"] and out["versions"]["tracegrad"]
    (hessian,) = vp.load_values(save)
    expected = _w3_hessian(10)
    np.testing.assert_allclose(hessian, expected, rtol=1e-13, atol=1e-13)
    # the fingerprint: sum, sum of magnitudes, size of each array
    (fingerprint,) = out["values"]
    assert fingerprint[2] == 100
    np.testing.assert_allclose(fingerprint[:2], [expected.sum(), abs(expected).sum()])


def _heat_gradient(steps: int = 20, h: float = 1e-6) -> float:
    def simulate(kappa):
        u = np.sin(np.linspace(0, np.pi, 128))
        for _ in range(steps):
            u = u + kappa * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
        return np.sum(u**2)

    return (simulate(0.1 + h) - simulate(0.1 - h)) / (2 * h)


def test_child_steady_state_fields_and_values():
    out = _child("tracegrad", "heat", "steady:3", _tracegrad_env("llvm"))
    assert len(out["calls"]) == 3 and all(t > 0 for t in out["calls"])
    d_kappa, d_u0 = out["values"]
    assert len(d_kappa) == 1 and len(d_u0) == 128
    assert d_kappa[0] == pytest.approx(_heat_gradient(), rel=1e-6)


def test_child_refuses_unknown_program():
    done = subprocess.run(
        [sys.executable, CHILD, "tracegrad", "nope", "first"], capture_output=True, text=True
    )
    assert done.returncode != 0 and "programs: W1" in done.stderr


def test_every_program_takes_small():
    for name, make in vp.PROGRAMS.items():
        assert "small" in make.__code__.co_varnames, name


def test_cold_compile_parent_without_jax(tmp_path):
    out_json = tmp_path / "cold.json"
    argv = ["--programs", "W1", "--repeats", "1", "--small", "--jax-python", str(tmp_path / "x")]
    cold_compile.main(argv + ["--json", str(out_json)])
    raw = json.loads(out_json.read_text())
    assert raw["configs"] == ["tracegrad-llvm", "tracegrad-numba", "tracegrad-llvm-vmath"]
    kinds = {(r["config"], r["kind"]) for r in raw["runs"]}
    compilers = ("tracegrad-llvm", "tracegrad-numba")
    assert kinds == {(c, k) for c in compilers for k in ("cold", "warm")} | {
        ("tracegrad-llvm-vmath", "cold")
    }
    for rec in raw["runs"]:
        assert "error" not in rec, rec
        assert rec["total"] >= rec["first"] > 0 and rec["import"] > 0
        assert rec["compiler"] == rec["config"].split("-")[1]
    cold = raw["summary"]["table"]["W1"]["cold"]["tracegrad-llvm"]
    assert cold["n"] == 1 and cold["first"] > 0
    # without JAX the llvm compiler's values are compared with Numba's
    diff = raw["differences"]["W1"]["tracegrad-llvm"]
    assert diff["against"] == "tracegrad-numba" and diff["max_rel_diff"] < 1e-12
    assert raw["summary"]["ratios"]["W1"]["tracegrad-llvm"]["cold_first"] is None


def test_loops_parent_without_jax(tmp_path):
    argv = ["--programs", "heat", "--repeats", "1", "--calls", "3", "--small", "--compilers"]
    out_json = tmp_path / "loops.json"
    raw = loops_vs_jax.main(
        argv + ["llvm", "--jax-python", str(tmp_path / "x"), "--json", str(out_json)]
    )
    assert json.loads(out_json.read_text())["summary"]["table"] == raw["summary"]["table"]
    (rec,) = raw["runs"]
    assert rec["config"] == "tracegrad-llvm" and rec["median"] >= rec["min"] > 0
    entry = raw["summary"]["table"]["heat"]["tracegrad-llvm"]
    assert entry["rounds"] == 1 and entry["median"] == rec["median"]


def test_jax_children_agree_with_tracegrad(tmp_path):
    _need_jax()
    env = vp.jax_env()
    mine = _child("tracegrad", "heat", "steady:3", _tracegrad_env("llvm"))
    theirs = _child("jax", "heat", "steady:3", env)
    assert vp.max_relative_difference(mine["values"], theirs["values"]) < 1e-12
    save = str(tmp_path / "w3.npz")
    out = _child("jax", "W3", "first", env, save)
    assert out["versions"]["jax"] and out["first"] > 0
    np.testing.assert_allclose(vp.load_values(save)[0], _w3_hessian(10), rtol=1e-13, atol=1e-13)


def test_cold_compile_parent_with_jax(tmp_path):
    jax = _need_jax()
    argv = ["--programs", "W3", "--repeats", "1", "--small", "--compilers", "llvm"]
    raw = cold_compile.main(argv + ["--no-vmath-seed", "--jax-python", jax])
    assert raw["configs"] == ["tracegrad-llvm", "jax"]
    assert raw["summary"]["ratios"]["W3"]["tracegrad-llvm"]["cold_first"] > 0
    assert raw["differences"]["W3"]["tracegrad-llvm"]["against"] == "jax"
    assert raw["differences"]["W3"]["tracegrad-llvm"]["max_rel_diff"] < 1e-12


# ---- the parents' own logic, on made-up runs


def test_parse_args_defaults_and_refusals(capsys):
    args = cold_compile.parse_args([])
    assert args.programs == list(cold_compile.PROGRAMS) and len(args.programs) == 8
    assert args.repeats == 3 and args.compilers == ["llvm", "numba"] and args.json is None
    args = cold_compile.parse_args(["--programs", "W1, scan_rnn", "--compilers", "numba"])
    assert args.programs == ["W1", "scan_rnn"] and args.compilers == ["numba"]
    for bad in (["--programs", "W9"], ["--repeats", "0"], ["--compilers", "gcc"]):
        with pytest.raises(SystemExit):
            cold_compile.parse_args(bad)
    assert "unknown compiler gcc" in capsys.readouterr().err
    args = loops_vs_jax.parse_args(["--calls", "7"])
    assert args.programs == ["heat", "kalman", "leapfrog"] and args.calls == 7
    with pytest.raises(SystemExit):
        loops_vs_jax.parse_args(["--programs", "W1"])


def test_median_ratio_and_difference():
    assert vp.median([3.0, 1.0, 2.0]) == 2.0 and vp.median([4.0, 1.0]) == 2.5
    assert vp.median([]) is None and vp.median([None, 5.0]) == 5.0
    assert vp.ratio(6.0, 2.0) == 3.0 and vp.ratio(None, 2.0) is None and vp.ratio(1.0, 0) is None
    # relative to the largest magnitude of the array: an element near zero does not blow it up
    assert vp.max_relative_difference([[100.0, 1e-20]], [[100.0, 0.0]]) == pytest.approx(1e-22)
    assert vp.max_relative_difference([np.array([1.0, 2.0])], [[1.0, 2.2]]) == pytest.approx(
        0.2 / 2.2
    )
    assert vp.max_relative_difference([[1.0]], [[0.0]]) == float("inf")
    with pytest.raises(ValueError):
        vp.max_relative_difference([[1.0, 2.0]], [[1.0]])
    with pytest.raises(ValueError):
        vp.max_relative_difference([[1.0]], [[1.0], [2.0]])
    assert vp.fmt_seconds(0.0123) == "12.3 ms" and vp.fmt_seconds(2.5) == "2.5 s"
    assert vp.fmt_seconds(4e-5) == "40 µs" and vp.fmt_seconds(None) == "-"
    assert vp.fmt_ratio(15.4) == "15x" and vp.fmt_ratio(1.26) == "1.3x"


def _made_up_cold_runs() -> dict:
    runs = []
    for r, (llvm, numba, jax) in enumerate([(1.0, 10.0, 0.5), (3.0, 14.0, 0.25), (2.0, 12.0, 1.0)]):
        for config, first in (("tracegrad-llvm", llvm), ("tracegrad-numba", numba), ("jax", jax)):
            runs.append(
                {"round": r, "program": "W1", "config": config, "kind": "cold", "import": 0.3}
                | {"first": first, "total": first + 1.0, "load": 1.0}
            )
            if config != "jax":
                runs.append(
                    {"round": r, "program": "W1", "config": config, "kind": "warm"}
                    | {"import": 0.2, "first": 0.1, "total": 0.75, "load": 1.5}
                )
        runs.append(
            {"round": r, "program": "W2", "config": "tracegrad-llvm", "kind": "cold"}
            | {"error": "NotImplementedError: no", "load": 2.0}
        )
    return {
        "machine": {"cpu": "test", "cores": 2, "python": "3", "load": [1.0, 1.0, 1.0]},
        "args": {"repeats": 3, "small": False},
        "configs": ["tracegrad-llvm", "tracegrad-numba", "jax"],
        "runs": runs,
        "failed_to_start": {},
        "differences": {"W1": {"tracegrad-llvm": {"against": "jax", "max_rel_diff": 2e-16}}},
    }


def test_cold_compile_summary_and_tables():
    raw = _made_up_cold_runs()
    summary = cold_compile.summarize(raw)
    cold = summary["table"]["W1"]["cold"]
    assert cold["tracegrad-llvm"]["first"] == 2.0 and cold["jax"]["first"] == 0.5
    assert cold["tracegrad-numba"]["total"] == 13.0 and cold["jax"]["n"] == 3
    ratios = summary["ratios"]["W1"]
    assert ratios["tracegrad-llvm"]["cold_first"] == 4.0
    assert ratios["tracegrad-numba"]["cold_first"] == 24.0
    assert ratios["tracegrad-llvm"]["warm_total"] == 0.5  # 0.75 s against JAX's 1.5 s
    failed = summary["table"]["W2"]["cold"]["tracegrad-llvm"]
    assert failed["n"] == 0 and failed["first"] is None and "NotImplementedError" in failed["error"]
    assert summary["imports"]["jax"] == 0.3 and summary["load"] == [1.0, 2.0]
    text = cold_compile.format_tables(raw, summary)
    assert "| W1 grad, 10^5 | 2 s | 12 s | 500 ms | 4x | 24x | 2.0e-16 | - |" in text
    assert "failed (NotImplementedError: no)" in text
    assert "750 ms" in text and "0.5x" in text


def test_loops_summary_and_tables():
    runs = []
    for r, (llvm, jax) in enumerate([(0.004, 0.001), (0.006, 0.002), (0.005, 0.0015)]):
        runs.append({"round": r, "program": "heat", "config": "tracegrad-llvm", "load": 1.0})
        runs[-1] |= {"median": llvm, "min": llvm / 2}
        runs.append({"round": r, "program": "heat", "config": "jax", "load": 3.0})
        runs[-1] |= {"median": jax, "min": jax / 2}
    raw = {
        "machine": {"cpu": "test", "cores": 2, "python": "3", "load": [2.0, 2.0, 2.0]},
        "args": {"repeats": 3, "calls": 10, "small": False},
        "runs": runs,
        "differences": {"heat": {"tracegrad-llvm": {"against": "jax", "max_rel_diff": 1e-15}}},
    }
    summary = loops_vs_jax.summarize(raw)
    entry = summary["table"]["heat"]["tracegrad-llvm"]
    assert entry == {"error": None, "median": 0.005, "low": 0.004, "high": 0.006, "rounds": 3}
    assert summary["ratios"]["heat"]["tracegrad-llvm"] == pytest.approx(0.005 / 0.0015)
    text = loops_vs_jax.format_tables(raw, summary)
    assert "| 5 ms (4 ms-6 ms) | 1.5 ms (1 ms-2 ms) | 3.3x | 1.0e-15 |" in text
