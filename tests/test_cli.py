"""The `tracegrad` command: examples, run, ir, doctor, cache; errors as one line and a hint."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import cli
from tracegrad.runtime import backends

ROOT = Path(__file__).resolve().parent.parent


def call(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def model(tmp_path, monkeypatch):
    """A user's file, as `tracegrad ir` would meet it."""
    path = tmp_path / "model.py"
    path.write_text(
        textwrap.dedent("""\
        import numpy as np
        import tracegrad as tg

        def loss(w, x, y):
            pred = np.tanh(x @ w)
            return np.mean((pred - y) ** 2)

        def energy(x):
            return np.sum(x ** 3)

        def power(x, n):
            out = x
            for _ in range(n - 1):
                out = out * x
            return np.sum(out)

        @tg.grad
        def decorated(x):
            return np.sum(np.sin(x))

        def branchy(x):
            if x > 0:
                return x
            return -x

        class Model:
            @staticmethod
            def score(x):
                return np.sum(x * 2.0)

        if __name__ == "__main__":
            raise SystemExit("not when imported")

        def as_number(x):
            return x * float(x)
        """)
    )
    monkeypatch.chdir(tmp_path)
    return path


# ----------------------------------------------------------------------------------------------
# examples, run


def test_examples_lists_every_example_on_one_line_each(capsys):
    status, out, _ = call(capsys, "examples")
    assert status == 0
    for name in cli._examples.names():
        lines = [line for line in out.splitlines() if line.strip().startswith(name + " ")]
        assert len(lines) == 1, name
    assert f"default here: {tg.default_backend_name()}" in out


def test_examples_points_to_the_notebooks(capsys):
    _, out, _ = call(capsys, "examples")
    line = next(line for line in out.splitlines() if line.startswith("notebooks"))
    assert "examples/notebooks/" in line and 'pip install -e ".[notebook]"' in line
    assert "jupyter lab" in line
    assert (ROOT / "examples" / "notebooks").is_dir()


def test_run_basics_prints_the_table(capsys):
    status, out, err = call(capsys, "run", "basics", "--backend", "numpy")
    assert status == 0 and err == ""
    assert out.count(" yes") == 7 and "basics: 7 of 7" in out


def test_run_on_the_default_backend(capsys):
    status, out, _ = call(capsys, "run", "higher-order", "--size", "3")
    assert status == 0
    assert f"backend: {tg.default_backend_name()} (fastest available here)" in out


def test_run_shows_progress_and_a_summary(capsys):
    status, out, _ = call(
        capsys, "run", "linear-regression", "--backend", "numpy", "--size", "50", "--steps", "40"
    )
    assert status == 0
    steps = [line for line in out.splitlines() if line.startswith("  step ")]
    assert len(steps) == 11 and "first step" in steps[0] and "steps/s" in steps[-1]
    summary = [
        line for line in out.splitlines() if line.startswith("linear-regression: 40 steps in")
    ]
    assert len(summary) == 1 and "final loss" in summary[0]


def test_run_quiet_prints_nothing(capsys):
    status, out, err = call(
        capsys, "run", "mlp", "--backend", "numpy", "--size", "20", "--steps", "5", "--quiet"
    )
    assert (status, out, err) == (0, "", "")


def test_run_help_says_what_size_and_steps_mean(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["run", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "newton: --size: dimensions (10)" in out


@pytest.mark.parametrize(
    ("argv", "message", "hint"),
    [
        (["run", "basic"], "no example called 'basic'; did you mean basics?", "tracegrad examples"),
        (
            ["run", "basics", "--steps", "3"],
            "the basics example takes no --steps",
            "leave out --steps",
        ),
        (
            ["run", "mlp", "--backend", "tpu"],
            "unknown backend 'tpu'; choose one of numpy, cpu, cuda",
            "tracegrad doctor",
        ),
        (["run", "mlp", "--size", "0"], "--size must be an integer of at least 4", ""),
        (["run", "newton", "--steps", "-1"], "--steps must be an integer of at least 1", ""),
        (
            ["run", "basics", "--plot", "x.png"],
            "the basics example draws no plot",
            "leave out --plot",
        ),
        (["run", "newton", "--plot", "no/such/folder/x.png"], "folder", ""),
    ],
)
def test_run_usage_errors_exit_2_with_one_line_and_a_hint(capsys, argv, message, hint):
    status, out, err = call(capsys, *argv)
    assert status == 2 and out == ""
    lines = err.splitlines()
    assert lines[0].startswith("tracegrad: error: ") and message in lines[0]
    assert "Traceback" not in err
    if hint:
        assert lines[-1].startswith("  hint: ") and hint in lines[-1]


def test_debug_shows_the_exception_instead(capsys):
    with pytest.raises(cli.UsageError, match="unknown backend"):
        cli.main(["run", "mlp", "--backend", "tpu", "--debug"])
    with pytest.raises(cli.UsageError, match="unknown backend"):
        cli.main(["--debug", "run", "mlp", "--backend", "tpu"])


def test_an_unusable_backend_is_a_failure_not_a_usage_error(capsys, monkeypatch):
    monkeypatch.setattr(backends.NumpyBackend, "available", lambda self: (False, "switched off"))
    monkeypatch.setattr(backends, "_resolved", {})
    status, _, err = call(capsys, "run", "basics", "--backend", "numpy")
    assert status == 1 and "BackendError" in err and "switched off" in err


def test_an_example_whose_checks_fail_exits_1(capsys, monkeypatch):
    module = cli._examples.load("basics")
    monkeypatch.setattr(module, "agrees", lambda expected, computed: False)
    status, out, _ = call(capsys, "run", "basics", "--backend", "numpy")
    assert status == 1 and " NO" in out


def test_plot_without_matplotlib_is_one_line_and_a_hint(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    status, _, err = call(capsys, "run", "newton", "--plot", "newton.png")
    assert status == 1
    assert err.splitlines()[0] == (
        "tracegrad: error: --plot needs matplotlib, an optional dependency that is not installed"
    )
    assert "python3 -m pip install matplotlib" in err


def test_no_command_prints_help(capsys):
    status, out, _ = call(capsys)
    assert status == 2 and "run" in out and "doctor" in out


def test_version(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out.strip() == f"tracegrad {tg.__version__}"


# ----------------------------------------------------------------------------------------------
# ir


def test_ir_prints_the_traced_and_the_adjoint_graph(capsys, model):
    status, out, err = call(
        capsys, "ir", "model.py:loss", "--args", "f64[3],f64[5,3],f64[5]", "--grad"
    )
    assert status == 0, err
    headers = [line for line in out.splitlines() if line.startswith("# ")]
    assert headers == [
        "# loss(f64[3], f64[5,3], f64[5]): the traced IR (optimised)",
        "# grad of loss with respect to w: the adjoint IR (optimised)",
    ]
    assert out.count("graph(%0:f64[3], %1:f64[5,3], %2:f64[5]) {") == 2
    assert "tanh" in out and "matmul" in out and "# model.py:5" in out and "grad model.py:" in out
    # the printed graphs are make_ir's
    args = [np.ones(3), np.ones((5, 3)), np.ones(5)]
    loss, _ = cli.load_function("model.py:loss")
    assert str(tg.make_ir(tg.grad(loss))(*args)) in out


def test_ir_hessian(capsys, model):
    status, out, _ = call(capsys, "ir", "model.py:energy", "--args", "[2]", "--hessian")
    assert status == 0
    assert "# hessian of energy with respect to x (optimised)" in out
    last_graph = out.split("# hessian")[1]
    assert "f64[2,2]" in last_graph


def test_ir_static_arguments_and_argnums(capsys, model):
    status, out, _ = call(
        capsys, "ir", "model.py:power", "--args", "f32[2],static:3", "--grad", "--argnums", "0"
    )
    assert status == 0
    assert "# power(f32[2], static 3): the traced IR (optimised)" in out
    assert "f32[2]" in out and "f64" not in out


def test_ir_of_a_decorated_and_a_dotted_function(capsys, model):
    assert call(capsys, "ir", "model.py:decorated", "--args", "f64[2]")[1].count("cos") == 1
    status, out, _ = call(capsys, "ir", "model.py:Model.score", "--args", "f64[2]", "--no-optimize")
    assert status == 0 and "as traced, unoptimised" in out


def test_ir_of_a_module_on_the_path(capsys):
    status, out, _ = call(capsys, "ir", "tracegrad.examples.newton:rosenbrock", "--args", "f64[3]")
    assert status == 0 and "slice" in out


@pytest.mark.parametrize(
    ("argv", "message", "status"),
    [
        (
            ["ir", "model.py:as_number", "--args", "2.0"],
            "TracingError: float() of a traced value would be a Python number",
            1,
        ),
        (["ir", "model.py:loss", "--args", "f64[3],f64[4,3],f64[5]"], "ShapeError", 1),
        (["ir", "model.py:los", "--args", "2.0"], "model.py has no 'los'", 2),
        (
            ["ir", "model.py:loss", "--args", "f64[3]"],
            "does not take the 1 argument(s) that --args gives",
            2,
        ),
        (["ir", "model.py:loss", "--args", "q[3],f64[2],f64[2]"], "unknown dtype 'q'", 2),
        (
            ["ir", "model.py:loss", "--args", "f64[3,f64[2],f64[2]"],
            "cannot read the --args item",
            2,
        ),
        (
            ["ir", "model.py:energy", "--args", "f64[2]", "--grad", "--argnums", "3"],
            "--argnums 3 is out of range",
            2,
        ),
        (
            ["ir", "model.py:energy", "--args", "f64[2]", "--grad", "--argnums", "x"],
            "--argnums takes whole numbers",
            2,
        ),
        (
            ["ir", "model.py:energy", "--args", "f64[2]", "--grad", "--argnums", "0,0"],
            "--argnums names an argument twice",
            2,
        ),
        (
            ["ir", "model.py:energy", "--args", "f64[2]", "--kernels", "--backend", "tpu"],
            "unknown backend 'tpu'",
            2,
        ),
        (["ir", "nofile.py:f"], "no such file: nofile.py", 2),
        (["ir", "model.py"], "expected FILE.py:FUNCTION", 2),
        (["ir", "no_such_module_here:f"], "cannot import module 'no_such_module_here'", 2),
    ],
)
def test_ir_errors(capsys, model, argv, message, status):
    """Mistakes in the command line exit with 2; a function that cannot be traced with 1."""
    code, out, err = call(capsys, *argv)
    assert code == status and out == ""
    assert err.startswith("tracegrad: error: ") and message in err.splitlines()[0]
    assert "Traceback" not in err


def test_ir_tracing_error_names_the_line_and_the_fix(capsys, model):
    _, _, err = call(capsys, "ir", "model.py:as_number", "--args", "2.0")
    assert "model.py:35: return x * float(x)" in err and "Keep it an array" in err


def test_ir_of_a_python_branch_shows_its_guard(capsys, model, monkeypatch):
    """The IR is of the branch taken for --args, with the guard and its line; with guards off,
    the branch is refused at its line with the np.where form."""
    status, out, _ = call(capsys, "ir", "model.py:branchy", "--args", "2.0")
    assert status == 0 and "guard" in out and "== True" in out and "model.py:22" in out
    monkeypatch.setenv("TRACEGRAD_GUARDS", "0")
    _, _, err = call(capsys, "ir", "model.py:branchy", "--args", "2.0")
    assert "model.py:22: if x > 0:" in err and "np.where" in err


def test_ir_kernels(capsys, model):
    status, out, err = call(
        capsys, "ir", "model.py:energy", "--args", "f64[4]", "--grad", "--kernels"
    )
    if hasattr(tg, "make_kernels"):
        assert status == 0, err
        assert "# generated kernels" in out
        assert out.split("# generated kernels", 1)[1].strip()
    else:
        assert status == 1 and out == ""
        assert "no fused backend" in err and "hint: leave out --kernels" in err


def test_ir_kernels_with_a_stand_in_generator(capsys, model, monkeypatch):
    seen = {}

    def make_kernels(fun, backend=None):
        seen["backend"] = backend
        return lambda *args: f"# kernel source for {len(args)} arguments"

    monkeypatch.setattr(tg, "make_kernels", make_kernels, raising=False)
    status, out, _ = call(
        capsys, "ir", "model.py:energy", "--args", "f64[4]", "--kernels", "--backend", "cpu"
    )
    assert status == 0 and out.rstrip().endswith("# kernel source for 1 arguments")
    assert seen["backend"] == "cpu"


def test_parse_args_spec():
    values, static = cli.parse_args_spec(
        "f64[3], f32[2,4], [5], f64[], i32[2], bool[1], 2.0, 3, static:(1, 2), static:'tanh', f16"
    )
    assert static == (8, 9)
    kinds = [(np.asarray(v).shape, np.asarray(v).dtype) for v in values[:6]]
    assert kinds == [
        ((3,), np.float64),
        ((2, 4), np.float32),
        ((5,), np.float64),
        ((), np.float64),
        ((2,), np.int32),
        ((1,), np.bool_),
    ]
    assert values[6:10] == [2.0, 3.0, (1, 2), "tanh"]
    assert values[10].dtype == np.float16 and values[10].shape == ()
    assert np.all((values[0] >= 0.5) & (values[0] < 1.5))
    assert cli.parse_args_spec("") == ([], ())


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("f64[3", "no closing ]"),
        ("x64[3]", "unknown dtype"),
        ("f64[a]", "whole numbers"),
        ("f64[-1]", "negative"),
        ("hello", "neither an array type"),
        ("f64[2],,f64[2]", "empty"),
        ("static:oops(", "not a Python literal"),
        ("True", "neither"),
    ],
)
def test_parse_args_spec_errors(spec, why):
    with pytest.raises(cli.CLIError, match="cannot read the --args item") as info:
        cli.parse_args_spec(spec)
    assert why in str(info.value) and "f64[3]" in info.value.hint


def test_ir_help_documents_the_args_syntax(capsys):
    with pytest.raises(SystemExit):
        cli.main(["ir", "--help"])
    out = capsys.readouterr().out
    assert "static:3" in out and "f32[2,4]" in out


# ----------------------------------------------------------------------------------------------
# doctor, cache


def test_doctor(capsys):
    status, out, _ = call(capsys, "doctor")
    assert status == 0, out
    for section in ("versions", "backends (default: ", "CUDA devices", "disk cache", "environment"):
        assert section in out
    assert f"NumPy      {np.__version__}" in out
    assert "numpy  usable; a first gradient took" in out
    for name, why in tg.available_backends().items():
        assert (f"{name:<6} not usable: {why}" in out) if why else (f"{name:<6} usable" in out)
    if not hasattr(tg, "cache_info"):
        assert "not available in this build" in out
    assert "doctor: everything works" in out


def test_doctor_never_crashes(capsys, monkeypatch):
    def boom(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(cli.doctor, "_list_cuda_devices", boom)
    monkeypatch.setattr(tg, "available_backends", boom)
    monkeypatch.setattr(tg, "cache_info", boom, raising=False)
    status, out, _ = call(capsys, "doctor")
    assert status == 1
    assert "none: RuntimeError: boom" in out
    assert "backends: could not list them: RuntimeError: boom" in out
    assert "could not read it: RuntimeError: boom" in out
    assert "doctor: 2 problem(s) found above" in out


def test_doctor_reports_a_broken_backend(capsys, monkeypatch):
    monkeypatch.setattr(cli.doctor, "_smoke_test", lambda name: "FAILED: RuntimeError: broken")
    status, out, _ = call(capsys, "doctor")
    assert status == 1 and "FAILED: RuntimeError: broken" in out


def test_cuda_devices_never_raises():
    devices, why = cli.doctor.cuda_devices()
    assert isinstance(devices, list) and (devices or why)


def test_cuda_devices_are_listed(monkeypatch):
    cuda = pytest.importorskip("numba.cuda")
    monkeypatch.delenv(
        "NUMBA_ENABLE_CUDASIM", raising=False
    )  # conftest sets it on GPU-less machines

    class Device:
        def __init__(self, id, name, cc):
            self.id, self.compute_capability = id, cc
            if name is not None:
                self.name = name

    monkeypatch.setattr(
        cuda, "gpus", [Device(0, b"NVIDIA H200", (9, 0)), Device(1, None, ())], raising=False
    )
    devices, why = cli.doctor.cuda_devices()
    assert devices == ["0: NVIDIA H200, compute capability 9.0", "1: unnamed device"] and why == ""
    monkeypatch.setattr(cuda, "gpus", [], raising=False)
    assert cli.doctor.cuda_devices() == ([], "numba.cuda found no device")


def test_doctor_shows_the_cache(capsys, monkeypatch):
    monkeypatch.setattr(
        tg,
        "cache_info",
        lambda: {"directory": "/tmp/tg", "entries": 3, "bytes": 2048},
        raising=False,
    )
    status, out, _ = call(capsys, "doctor")
    assert status == 0
    assert "/tmp/tg" in out and "2.0 KiB (2,048 bytes)" in out


def test_cache_without_a_disk_cache(capsys, monkeypatch):
    monkeypatch.delattr(tg, "cache_info", raising=False)
    monkeypatch.delattr(tg, "clear_cache", raising=False)
    for action in ("info", "clear"):
        status, out, err = call(capsys, "cache", action)
        assert status == 1 and out == ""
        assert "the disk cache is not available in this build" in err and "hint:" in err


def test_cache_info_and_clear(capsys, monkeypatch):
    cleared = []
    monkeypatch.setattr(
        tg, "cache_info", lambda: {"directory": "/tmp/tg", "bytes": 10}, raising=False
    )
    monkeypatch.setattr(tg, "clear_cache", lambda: cleared.append(1), raising=False)
    status, out, _ = call(capsys, "cache", "info")
    assert status == 0 and "directory  /tmp/tg" in out and "10 B" in out
    status, out, _ = call(capsys, "cache", "clear")
    assert status == 0 and out.strip() == "cache cleared" and cleared == [1]


def test_cache_with_the_real_disk_cache(capsys):
    if not (hasattr(tg, "cache_info") and hasattr(tg, "clear_cache")):
        pytest.skip("this build has no disk cache")
    status, out, _ = call(capsys, "cache", "info")
    assert status == 0 and out.strip()


@pytest.fixture
def fresh_disk_cache(tmp_path, monkeypatch):
    """An empty disk cache folder, and a function whose kernels no earlier test compiled."""
    cache = pytest.importorskip("tracegrad.base.cache")
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path / "tgcache"))
    # Numba's kernel modules, which the listing describes from their source (the native
    # kernels' entries: tests/test_llvm_kernels.py)
    monkeypatch.setenv("TRACEGRAD_CPU_COMPILER", "numba")
    scale = 1.0 + int.from_bytes(tmp_path.name.encode()[-4:], "little") / 2**40  # unique source
    return cache, lambda x: np.sum(np.sin(x) * scale)


def test_cache_info_shows_what_is_on_disk_not_process_counters(capsys, fresh_disk_cache):
    cache, fun = fresh_disk_cache
    status, out, _ = call(capsys, "cache", "info")
    assert status == 0 and "entries" in out and "0 B" in out
    tg.grad(fun, backend="cpu")(np.ones(4))
    status, out, _ = call(capsys, "cache", "info")
    on_disk = cache.info()
    assert on_disk.entries >= 1
    assert f"entries    {on_disk.entries}\n" in out and f"({on_disk.bytes:,} bytes)" in out
    assert "loaded" not in out and "programs" not in out and "limit" in out
    # the Python API keeps the counters of its own process
    assert tg.cache_info().loaded >= 1 and tg.cache_info().programs >= 1


def test_cache_list_shows_each_entry(capsys, fresh_disk_cache):
    cache, fun = fresh_disk_cache
    status, out, _ = call(capsys, "cache", "list")
    assert status == 0 and "0 entries" in out and "(empty)" in out
    tg.grad(fun, backend="cpu")(np.ones((3, 4)))
    status, out, _ = call(capsys, "cache", "list")
    assert status == 0
    directory = Path(cache.kernels_dir())
    modules = sorted(p.name[2:-3] for p in directory.glob("k_*.py"))
    assert modules and f"{len(modules)} entr" in out
    rows = [line for line in out.splitlines() if line.startswith("  ") and "cpu" in line]
    assert sorted(row.split()[0] for row in rows) == sorted(m[:12] for m in modules)
    # every kernel of a 2-d argument's gradient is compiled for 2-d float64 arrays
    assert all("f64 2-d" in row and "fused kernel" in row for row in rows)


def test_cache_list_counts_a_kernel_not_the_row_loops_it_calls(capsys, fresh_disk_cache):
    # the value_and_grad of a scalar loss of a vector: a kernel with partial results, whose loop
    # over a chunk's rows is a function of its own (`_row0`)
    cache, _ = fresh_disk_cache
    loss = lambda x: np.sum(np.sin(x) * np.exp(-x * x))
    tg.value_and_grad(loss, backend="cpu")(np.linspace(-1.0, 1.0, 9))
    (module,) = Path(cache.kernels_dir()).glob("k_*.py")
    assert "def _row0(" in module.read_text()
    status, out, _ = call(capsys, "cache", "list")
    (row,) = [line for line in out.splitlines() if line.startswith("  ") and "cpu" in line]
    assert status == 0 and "1 fused kernel" in row and "(f64 1-d, f64 1-d, f64 0-d)" in row


def test_cache_list_describes_a_cuda_program(capsys, fresh_disk_cache):
    if tg.available_backends().get("cuda"):
        pytest.skip(f"the cuda backend is not usable here: {tg.available_backends()['cuda']}")
    _, fun = fresh_disk_cache
    tg.grad(fun, backend="cuda")(np.ones(5))
    status, out, _ = call(capsys, "cache", "list")
    rows = [
        line for line in out.splitlines() if line.startswith("  ") and line.split()[1] == "cuda"
    ]
    assert status == 0 and len(rows) == 1
    assert "a graph of" in rows[0] and "loop[5]" in rows[0] and "from test_cli.py:" in rows[0]


def test_cache_list_with_the_cache_off(capsys, monkeypatch):
    pytest.importorskip("tracegrad.base.cache")
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", "off")
    status, out, _ = call(capsys, "cache", "list")
    assert status == 0 and "the disk cache is off" in out


# ----------------------------------------------------------------------------------------------
# Exit status 2 for a usage mistake, in every subcommand


def exit_status(capsys, *argv: str) -> int:
    try:
        status = cli.main(list(argv))
    except SystemExit as exc:  # argparse's own errors
        status = exc.code
    capsys.readouterr()
    return status


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["no-such-command"],
        ["examples", "--bogus"],
        ["run"],
        ["run", "mlp", "--size", "0"],
        ["run", "mlp", "--steps", "many"],
        ["ir"],
        ["ir", "nofile.py:f"],
        ["ir", "tracegrad.examples.newton:rosenbrock", "--args", "f64[3"],
        ["doctor", "--bogus"],
        ["cache"],
        ["cache", "show"],
    ],
    ids=lambda argv: " ".join(argv) or "(nothing)",
)
def test_usage_mistakes_exit_2_in_every_subcommand(capsys, argv):
    assert exit_status(capsys, *argv) == 2


def test_usage_exit_status_from_the_shell():
    done = subprocess.run(
        [sys.executable, "-m", "tracegrad", "run", "mlp", "--size", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("tracegrad: error: --size must be an integer of at least 4")


def test_cli_doc_states_the_exit_statuses():
    text = (ROOT / "docs" / "cli.md").read_text()
    assert "2 for a usage mistake" in text and "tracegrad cache list" in text


# ----------------------------------------------------------------------------------------------
# The entry points


def test_python_m_tracegrad():
    done = subprocess.run(
        [sys.executable, "-m", "tracegrad", "examples"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "basics" in done.stdout and "newton" in done.stdout


def test_console_script():
    script = shutil.which("tracegrad")
    if script is None:
        pytest.skip("the tracegrad console script is not installed (pip install -e .)")
    done = subprocess.run([script, "run", "nope"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2  # a usage mistake
    assert done.stderr.startswith("tracegrad: error: no example called 'nope'")


def test_a_reader_that_goes_away_stops_the_command_quietly():
    # `tracegrad examples | head -1`: the pipe is closed before the listing is written
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracegrad", "examples"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 141, stderr  # 128 + SIGPIPE, as a shell reports it
    assert stderr == ""
