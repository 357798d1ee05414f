"""Every example runs, in-process and at a small size, and its numbers are right: an example can
never break silently. Most runs use the numpy backend (compiling would dominate at these sizes);
one runs on the default backend, whatever is fastest here."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import examples
from tracegrad.examples import _common
from tracegrad.examples._common import ExampleError, Printer, Progress

ROOT = Path(__file__).resolve().parent.parent


def run(name: str, **kwargs) -> dict:
    kwargs.setdefault("backend", "numpy")
    kwargs.setdefault("quiet", True)
    return examples.load(name).run(**kwargs)


# ----------------------------------------------------------------------------------------------
# Each example's numbers


def test_basics_reproduces_the_tutorial_numbers():
    result = run("basics")
    assert result["passed"] == result["total"] == 7 and result["ok"]
    values = {row["expression"]: row["value"] for row in result["rows"]}
    assert float(values["L = w*x**2"]) == 9.0
    assert tuple(float(v) for v in values["y = w*x + b"]) == (3.0, 2.0, 1.0)
    assert tuple(float(v) for v in values["L = (w*x + b - 5)**2"]) == (12.0, 8.0, 4.0)
    assert float(values["L = relu(x*w)"]) == 2.0
    assert float(values["y = x**3"]) == 6.0
    np.testing.assert_array_equal(values["y = sum(x**3)"], np.diag([12.0, -6.0]))
    assert float(values["L = (x**2 - 4)**2"]) == 0.0


def test_the_header_says_where_the_backend_came_from(capsys, monkeypatch):
    monkeypatch.setenv("TRACEGRAD_BACKEND", "numpy")
    examples.load("basics").run()
    assert "backend: numpy (from TRACEGRAD_BACKEND)" in capsys.readouterr().out
    examples.load("basics").run(backend="numpy")
    assert "backend: numpy\n" in capsys.readouterr().out


def test_basics_on_the_default_backend(capsys):
    result = examples.load("basics").run()
    assert result["backend"] == tg.default_backend_name()
    assert result["ok"]
    out = capsys.readouterr().out
    assert f"backend: {tg.default_backend_name()} (fastest available here)" in out
    assert out.count(" yes") == 7 and " NO" not in out
    assert "basics: 7 of 7 derivatives match the expected values" in out


def test_readme_shows_the_basics_table(capsys):
    run("basics", quiet=False)
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    readme = (ROOT / "README.md").read_text()
    assert len(table) == 9 and all(line in readme for line in table)


def test_linear_regression_fits_the_line():
    result = run("linear-regression", size=200, steps=150)
    assert abs(result["w"] - result["true_w"]) < 0.1
    assert abs(result["b"] - result["true_b"]) < 0.05
    losses = result["losses"]
    assert len(losses) == 150 and losses[-1] < losses[0] / 20
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(losses))  # a convex loss, a small step
    w_ls, _ = result["least_squares"]
    assert abs(result["w"] - w_ls) < 0.05


def test_mlp_learns_the_two_moons():
    result = run("mlp", size=100, steps=150)
    assert result["accuracy"] >= 0.95
    assert result["test_accuracy"] >= 0.9
    assert result["losses"][-1] < result["losses"][0] / 10
    assert set(result["params"]) == {"W1", "b1", "W2", "b2", "W3", "b3"}


def test_two_moons_data():
    points, labels = examples.load("mlp").two_moons(50)
    assert points.shape == (50, 2) and set(np.unique(labels)) == {-1.0, 1.0}
    assert (labels == 1.0).sum() == 25


def test_newton_converges_where_gradient_descent_does_not_yet():
    result = run("newton", size=4, steps=300)
    newton, descent = result["newton"], result["gradient_descent"]
    assert newton["converged"] and newton["iterations"] < 40
    np.testing.assert_allclose(newton["x"], np.ones(4), atol=1e-6)
    assert not descent["converged"] and descent["iterations"] == 300
    assert descent["f"] > newton["f"]


def test_gaussian_process_newton_converges_with_exact_derivatives():
    result = run("gaussian-process", size=12, steps=25)
    assert result["converged"] and len(result["history"]) < 20
    assert result["grad_error"] < 1e-6 and result["hessian_error"] < 1e-6
    assert all(
        b <= a + 1e-12 for a, b in zip(result["history"], result["history"][1:], strict=False)
    )  # descends


def test_lennard_jones_reaches_the_known_minimum():
    result = run("lennard-jones")
    assert result["converged"] and result["pairs"] == 78
    assert abs(result["energy"] - (-44.326801)) < 1e-6
    assert abs(result["derivative"] - result["finite_difference"]) < 1e-5 * abs(
        result["finite_difference"]
    )


def test_ode_sensitivity_rolls_the_loop_and_matches_finite_differences():
    result = run("ode-sensitivity", size=6, steps=300)
    assert result["rolled"]
    assert result["max_relative_error"] < 1e-5
    assert np.all(np.isfinite(result["gq"])) and np.all(np.isfinite(result["gp"]))


def test_embedding_classifier_learns_the_indicative_tokens():
    result = run("embedding-classifier", size=150, steps=60)
    assert result["history"][-1] < 0.6 * result["history"][0]
    assert result["test_accuracy"] > 0.9


def test_newton_both_converge_and_newton_needs_far_fewer_iterations():
    result = run("newton", size=2, steps=20000)
    newton, descent = result["newton"], result["gradient_descent"]
    assert newton["converged"] and descent["converged"]
    assert newton["iterations"] * 100 < descent["iterations"]
    np.testing.assert_allclose(descent["x"], np.ones(2), atol=1e-4)


def test_newton_hessian_matches_the_closed_form():
    module = examples.load("newton")
    x = np.array([0.3, -0.7, 1.1])
    hessian = tg.hessian(module.rosenbrock, backend="numpy")(x)
    expected = np.zeros((3, 3))
    for i in range(2):  # 100 (x[i+1] - x[i]^2)^2 + (1 - x[i])^2
        expected[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        expected[i, i + 1] += -400 * x[i]
        expected[i + 1, i] += -400 * x[i]
        expected[i + 1, i + 1] += 200
    np.testing.assert_allclose(hessian, expected, rtol=1e-12)


def test_higher_order_matches_the_closed_form():
    result = run("higher-order", size=5)
    assert result["max_error"] < 1e-14
    assert result["polynomial_difference"] < 1e-14
    assert result["within_bound"]
    assert len(result["derivatives"]) == 6 and len(result["ir_nodes"]) == 5
    assert np.all(result["taylor_error"] <= result["remainder_bound"] + 1e-15)


def test_custom_gradient_checks():
    result = run("custom-gradient", size=4)
    assert result["ok"]
    assert np.isinf(result["results"]["naive"]["value"])
    for key in ("shifted", "custom"):
        np.testing.assert_allclose(
            result["results"][key]["gradient"], result["reference"][1], rtol=1e-10
        )
    assert result["checks"]["shifted"] == result["checks"]["custom"] == "passed"
    assert result["checks"]["wrong"].startswith("GradientCheckError")


def test_gradient_flow_runs():
    result = run("gradient-flow", size=32, steps=5)
    assert len(result["ratios"]) == 2


# ----------------------------------------------------------------------------------------------
# What every example shares


@pytest.mark.parametrize("name", examples.names())
def test_every_example_has_the_interface(name):
    module = examples.load(name)
    assert name == module.NAME
    assert module.DESCRIPTION and "\n" not in module.DESCRIPTION
    assert callable(module.run)
    # a thin runnable file in examples/ for every example module
    assert (ROOT / "examples" / f"{module.__name__.rsplit('.', 1)[1]}.py").is_file()


SMALL = {
    "linear-regression": {"size": 20, "steps": 20},
    "mlp": {"size": 20, "steps": 20},
    "newton": {"size": 2, "steps": 30},
    "gradient-flow": {"size": 16, "steps": 3},
    "higher-order": {"size": 3},
    "custom-gradient": {"size": 3},
    "gaussian-process": {"size": 6, "steps": 3},
    "lennard-jones": {"steps": 3},
    "embedding-classifier": {"size": 20, "steps": 3},
    "ode-sensitivity": {"size": 4, "steps": 40},
    "distributed-logreg": {"rows": 2000, "workers": 0},
}


@pytest.mark.parametrize("name", examples.names())
def test_quiet_prints_nothing_and_loud_ends_with_a_summary(name, capsys):
    result = run(name, quiet=True, **SMALL.get(name, {}))
    assert isinstance(result, dict) and result["backend"] == "numpy"
    assert capsys.readouterr().out == ""
    run(name, quiet=False, **SMALL.get(name, {}))
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[1] == "backend: numpy"
    assert any(line.startswith((f"{name}: ", "Newton", "gradient descent")) for line in lines), (
        lines
    )


@pytest.mark.parametrize("name", [n for n in examples.names() if not examples.load(n).PLOT])
def test_examples_without_a_plot_refuse_one(name, tmp_path):
    with pytest.raises(ExampleError, match="draws no plot"):
        run(name, plot=tmp_path / "x.png")


def test_bad_sizes_are_refused():
    with pytest.raises(ExampleError, match="--size must be an integer of at least 2"):
        run("linear-regression", size=1)
    with pytest.raises(ExampleError, match="--steps"):
        run("mlp", steps=0)


def test_a_bad_backend_is_a_backend_error():
    with pytest.raises(tg.BackendError, match="unknown backend"):
        run("basics", backend="tpu")


def test_load_suggests_close_names():
    assert examples.load("linear_regression") is examples.load("linear-regression")
    with pytest.raises(KeyError, match="did you mean newton"):
        examples.load("newtn")


# ----------------------------------------------------------------------------------------------
# Plots


@pytest.mark.parametrize("name", [n for n in examples.names() if examples.load(n).PLOT])
def test_plots_are_written(name, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / f"{name}.png"
    run(name, plot=path, **SMALL.get(name, {}))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ExampleError, match="needs matplotlib") as info:
        run("linear-regression", plot=tmp_path / "loss.png")
    assert "pip install matplotlib" in info.value.hint


def test_plot_into_a_missing_folder_fails_before_the_work(tmp_path):
    pytest.importorskip("matplotlib")
    with pytest.raises(ExampleError, match="does not exist"):
        run("newton", plot=tmp_path / "no" / "such" / "plot.png")


# ----------------------------------------------------------------------------------------------
# Progress lines


def test_progress_prints_about_ten_lines_and_a_summary(capsys):
    progress = Progress(Printer(), "demo", 100)
    for i in range(1, 101):
        progress.step(i, 1.0 / i)
    timing = progress.done(extra="fine")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 12  # step 1, steps 10..100, the summary
    assert "first step" in lines[0] and "steps/s" in lines[1]
    assert lines[-1].startswith("demo: 100 steps in ") and lines[-1].endswith(
        "final loss 0.01; fine"
    )
    assert timing["seconds"] >= timing["first_step_seconds"] >= 0


class FakeClock:
    """time.perf_counter for Progress: each step takes the seconds given for it."""

    def __init__(self, durations):
        self.now, self.durations = 0.0, iter(durations)

    def tick(self):
        self.now += next(self.durations)

    def __call__(self):
        return self.now


class Watched:
    """Stands in for a transform: its trace_count is what the test sets."""

    trace_count = 0


def test_progress_times_the_compiling_step_apart_wherever_it_falls(capsys, monkeypatch):
    clock = FakeClock([0.001, 5.0] + [0.001] * 8)
    monkeypatch.setattr(_common.time, "perf_counter", clock)
    watched = Watched()
    progress = Progress(Printer(), "demo", 10, every=5, watch=(watched,))
    for i in range(1, 11):
        clock.tick()
        if i == 2:  # e.g. a hessian first called in the second iteration
            watched.trace_count += 1
        progress.step(i, 1.0)
    timing = progress.done()
    lines = capsys.readouterr().out.splitlines()
    assert "first step: 0.001 s, its programs were already compiled" in lines[0]
    assert "1,000 steps/s (+1 tracing and compiling)" in lines[1]
    assert "1,000 steps/s" in lines[2] and "tracing" not in lines[2]
    assert lines[-1] == (
        "demo: 10 steps in 5.01 s: 1,000 steps/s over the 9 that ran compiled "
        "programs, 1 step with tracing and compiling took 5.000 s; final loss 1"
    )
    assert timing["compiled_steps"] == 1 and timing["steps_per_second"] == pytest.approx(1000)


def test_progress_says_when_nothing_was_compiled(capsys, monkeypatch):
    clock = FakeClock([0.5] * 3)
    monkeypatch.setattr(_common.time, "perf_counter", clock)
    progress = Progress(Printer(), "demo", 3, watch=(Watched(),))
    for i in range(1, 4):
        clock.tick()
        progress.step(i, 2.0)
    progress.done()
    lines = capsys.readouterr().out.splitlines()
    assert "with tracing and compiling" not in lines[0]
    assert lines[-1] == (
        "demo: 3 steps in 1.50 s: 2 steps/s over the 3 that ran compiled "
        "programs, nothing traced or compiled (the programs were cached); "
        "final loss 2"
    )


def test_newton_reports_what_it_measured(capsys):
    tg.clear_programs()  # so that this run traces its programs
    run("newton", size=3, steps=40, quiet=False)
    out = capsys.readouterr().out
    newton, descent = out.split("gradient descent, with tg.value_and_grad:")
    newton_lines = newton.splitlines()
    first = next(line for line in newton_lines if "first iteration" in line)
    summary = next(line for line in newton_lines if line.startswith("Newton's method: "))
    # value_and_grad and hessian both compile in iteration 1; no later iteration compiles
    assert "with tracing and compiling" in first
    assert "1 iteration with tracing and compiling took" in summary
    # gradient descent reuses the compiled value_and_grad: nothing is compiled, and it says so
    descent_lines = descent.splitlines()
    assert any("first iteration" in line and "already compiled" in line for line in descent_lines)
    summary = next(line for line in descent_lines if line.startswith("gradient descent: "))
    assert "nothing traced or compiled" in summary and "with tracing and compiling" not in descent


def test_quiet_printer_prints_nothing(capsys):
    Printer(quiet=True)("hello")
    assert capsys.readouterr().out == ""


def test_resolve_backend_defaults_to_the_fastest():
    assert _common.resolve_backend(None) == tg.default_backend_name()
    assert _common.resolve_backend("numpy") == "numpy"


# ----------------------------------------------------------------------------------------------
# The runnable files


def test_example_file_runs_as_a_script():
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "basics.py"), "--backend", "numpy"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "basics: 7 of 7 derivatives match" in done.stdout
