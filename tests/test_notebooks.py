"""The notebooks in examples/notebooks run from top to bottom in a real Jupyter kernel (nbclient +
ipykernel), on the default backend, without an error; and they are committed without outputs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "examples" / "notebooks").glob("*.ipynb"))

nbformat = pytest.importorskip("nbformat", reason="the test extra installs nbformat")


def read(path: Path):
    return nbformat.read(path, as_version=4)


def outputs(notebook, kind: str | None = None) -> list:
    found = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    return [o for o in found if kind is None or o.output_type == kind]


def test_there_are_the_three_notebooks():
    names = [p.name for p in NOTEBOOKS]
    assert len(names) >= 3
    for topic in ("tutorial", "newton", "mlp"):
        assert any(topic in name for name in names), f"no {topic} notebook in {names}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebooks_have_no_outputs(path):
    notebook = read(path)
    nbformat.validate(notebook)
    for i, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, (
                f"{path.name}: cell {i} holds outputs; strip them (Jupyter: Edit > Clear Outputs "
                "of All Cells, or `jupyter nbconvert --clear-output --inplace`)"
            )
    assert "widgets" not in notebook.metadata


# What each notebook must show when it has run, besides running without an error.
EXPECTED = {
    "tutorial": ("text/html", "7 of 7 agree", "dL/dy = 4.0"),  # the graph's table, the basics
    "newton": ("image/png",),  # the convergence plot
    "mlp": ("image/png", "step 300", "training accuracy"),  # progress and the loss curve
}


def shown(notebook) -> str:
    """Every stream text and every mime type of a run notebook, in one string."""
    parts = []
    for output in outputs(notebook):
        if output.output_type == "stream":
            parts.append(output.text)
        elif "data" in output:
            parts.extend(output.data)
    return "\n".join(parts)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_a_jupyter_kernel(path):
    pytest.importorskip("ipykernel", reason="the test extra installs ipykernel")
    nbclient = pytest.importorskip("nbclient", reason="the test extra installs nbclient")
    notebook = read(path)
    env = {k: v for k, v in os.environ.items() if k != "TRACEGRAD_BACKEND"}  # the default backend
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    client = nbclient.NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute(env=env)  # raises CellExecutionError, naming the cell, on any error
    assert not outputs(notebook, "error")
    complaints = [
        o.text
        for o in outputs(notebook, "stream")
        if o.name == "stderr" and ("Warning" in o.text or "Error" in o.text)
    ]
    assert not complaints, f"{path.name} printed warnings or errors: {complaints}"
    text = shown(notebook)
    topic = next(t for t in EXPECTED if t in path.name)
    for expected in EXPECTED[topic]:
        assert expected in text, f"{path.name} did not show {expected!r}"
