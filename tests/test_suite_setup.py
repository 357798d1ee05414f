"""The test suite's own setup: its kernel cache folder, and failures named as they happen."""

import gc
import os
import subprocess
import sys
import textwrap
import warnings

import conftest
import pytest

import tracegrad.base.config as config


def test_kernels_go_to_the_suites_own_folder():
    assert config.cache_dir() == conftest.SUITE_CACHE_DIR
    user_default = os.path.join(os.path.expanduser("~"), ".cache", "tracegrad")
    assert user_default != conftest.SUITE_CACHE_DIR


def test_the_users_cache_folder_is_not_the_suites(tmp_path):
    """A user's TRACEGRAD_CACHE_DIR is replaced for the run; TRACEGRAD_TEST_CACHE_DIR is kept."""
    probe = "import conftest; print(conftest.SUITE_CACHE_DIR)"
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    user = str(tmp_path / "users")
    env = dict(os.environ, TRACEGRAD_CACHE_DIR=user)
    env.pop("TRACEGRAD_TEST_CACHE_DIR", None)
    out = subprocess.run(
        [sys.executable, "-c", probe + "; import os; print(os.environ['TRACEGRAD_CACHE_DIR'])"],
        cwd=here,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[0] == out[1] == os.path.join(root, ".pytest_cache", "tracegrad-cache")
    assert user not in out
    env["TRACEGRAD_TEST_CACHE_DIR"] = str(tmp_path / "chosen")
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=here,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == [str(tmp_path / "chosen")]


@pytest.mark.parametrize("workers", ["0", "1"])
def test_a_failure_is_named_when_it_happens(tmp_path, workers):
    """The failing test's name is printed before the tests after it run, and before the summary:
    in one process and from the xdist controller."""
    here = os.path.abspath(conftest.__file__)
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(f"""
            import importlib.util
            spec = importlib.util.spec_from_file_location("suite_conftest", {here!r})
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            pytest_configure = module.pytest_configure
            pytest_runtest_logreport = module.pytest_runtest_logreport
            pytest_report_header = module.pytest_report_header
        """)
    )
    (tmp_path / "test_sample.py").write_text(
        textwrap.dedent("""
            import time

            def test_first_fails():
                assert 1 + 1 == 3

            def test_then_passes():
                time.sleep(0.2)
        """)
    )
    env = dict(os.environ, TRACEGRAD_TEST_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n",
            workers,
            "-v",
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    named = out.index("FAILED test_sample.py::test_first_fails\n")
    assert named < out.index("short test summary info")
    assert named < out.index("test_then_passes")
    assert f"kernel cache: {tmp_path / 'cache'} (cold" in out


def test_the_header_of_a_warm_run_leaves_nothing_open(tmp_path, monkeypatch):
    """The header looks into the cache folder; a warm folder must not leave a scandir iterator
    open (its ResourceWarning, under warnings-as-errors, fails the first test of the run)."""
    (tmp_path / "kernels").mkdir()
    monkeypatch.setattr(conftest, "SUITE_CACHE_DIR", str(tmp_path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lines = conftest.pytest_report_header(None)
        gc.collect()
    assert any("(warm" in line for line in lines)
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
