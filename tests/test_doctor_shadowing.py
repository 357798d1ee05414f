"""A `tracegrad` folder that stands in for the package: a clone of the repository in the folder
Python runs from (imported as an empty namespace package: "module 'tracegrad' has no attribute
'grad'"), a folder on PYTHONPATH, another package of that name. `tracegrad doctor` names it and
says the fix; `python3 -m tracegrad` still runs the installed package from such a folder."""

import os
import subprocess
import sys

import pytest

import tracegrad
from tracegrad import cli
from tracegrad.cli.doctor import shadowing

PACKAGE = os.path.dirname(os.path.abspath(tracegrad.__file__))


def _clone(parent):
    """A folder laid out as a clone of the repository: no __init__.py at its root."""
    root = parent / "tracegrad"
    (root / "tracegrad").mkdir(parents=True)
    (root / "tracegrad" / "__init__.py").write_text("")
    (root / "examples").mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'tracegrad'\n")
    return root


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_a_clone_in_the_current_folder(tmp_path):
    clone = _clone(tmp_path)
    said = shadowing(cwd=str(tmp_path), path=[str(tmp_path)])
    assert said.startswith(f"{clone} stands in for tracegrad")
    assert "(the folder it runs in)" in said and PACKAGE in said
    assert "empty namespace package" in said
    assert "module 'tracegrad' has no attribute 'grad'" in said
    assert f"run Python from inside it (cd {clone})" in said and "or from another folder" in said


def test_a_folder_on_the_import_path(tmp_path):
    lib = tmp_path / "lib"
    (lib / "tracegrad").mkdir(parents=True)
    said = shadowing(cwd=str(tmp_path), path=[str(tmp_path), str(lib)])
    assert said.startswith(f"{lib / 'tracegrad'} stands in for tracegrad")
    assert f"{lib}, on sys.path" in said
    assert f"Take {lib} off PYTHONPATH (or sys.path)" in said


def test_another_package_of_that_name(tmp_path):
    (tmp_path / "tracegrad").mkdir()
    (tmp_path / "tracegrad" / "__init__.py").write_text("")
    said = shadowing(cwd=str(tmp_path), path=[str(tmp_path)])
    assert (
        f"imports that package (the folder it runs in), not the installed one ({PACKAGE})" in said
    )
    assert "Run Python from another folder, or rename that folder." in said


def test_the_package_itself_is_not_reported(tmp_path):
    assert shadowing(cwd=os.path.dirname(PACKAGE), path=[os.path.dirname(PACKAGE)]) is None
    assert shadowing(cwd=str(tmp_path), path=[str(tmp_path)]) is None  # no tracegrad folder


def test_doctor_names_the_folder(tmp_path, monkeypatch, capsys):
    clone = _clone(tmp_path)
    monkeypatch.chdir(tmp_path)
    # as an editable install: the package's own folder is not on sys.path, its finder finds it
    parents = {os.path.dirname(PACKAGE), ""}
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in parents])
    monkeypatch.setattr(cli.doctor, "_smoke_test", lambda name: "a first gradient took 1 ms")
    status = cli.main(["doctor"])
    out = _flat(capsys.readouterr().out)
    assert status == 1
    assert f"import path PROBLEM: {clone} stands in for tracegrad" in out
    assert f"(cd {clone})" in out
    assert "doctor: 1 problem(s) found above" in out


def test_doctor_from_the_package_folder(monkeypatch, capsys):
    monkeypatch.chdir(os.path.dirname(PACKAGE))
    monkeypatch.setattr(cli.doctor, "_smoke_test", lambda name: "a first gradient took 1 ms")
    cli.main(["doctor"])
    out = capsys.readouterr().out
    assert f"`import tracegrad` in a Python started in {os.path.dirname(PACKAGE)} finds this" in out


def _run(cwd, *args):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_command_from_the_folder_above_a_clone(tmp_path):
    clone = _clone(tmp_path)
    probe = _run(tmp_path, "-c", "import tracegrad; print(getattr(tracegrad, '__file__', None))")
    if probe.stdout.strip() != "None":
        pytest.skip("this installation of tracegrad is found ahead of a namespace folder")
    listed = _run(tmp_path, "-m", "tracegrad", "examples")
    assert listed.returncode == 0, listed.stderr
    assert "basics" in listed.stdout
    assert _flat(listed.stderr).startswith(f"tracegrad: warning: {clone} stands in for tracegrad")
    assert f"tracegrad: this command runs {PACKAGE}" in listed.stderr
    doctor = _run(tmp_path, "-m", "tracegrad", "doctor")
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr, doctor.stderr
    assert f"PROBLEM: {clone} stands in for tracegrad" in _flat(doctor.stdout)
    assert doctor.stderr == ""  # doctor says it once, in its report
