"""The documentation runs: every ```python block in README.md and docs/*.md is executed, in order,
one namespace per file. A ```python block followed directly by an ```output block must print
exactly that output, so listings (IR, tables) cannot drift from the code.

Blocks that must not run use another tag: ```py for PyTorch code shown for comparison, ```shell
for commands, ```text for anything else.

After a deliberate change, regenerate the output blocks and the generated lists with

    python3 tests/test_docs.py --update
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import numpy_namespace  # noqa: F401 (registers the handlers listed below)
from tracegrad.tracing.dispatch import SCIPY_SPECIAL, supported

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
UPDATE_HINT = "regenerate with: python3 tests/test_docs.py --update"

SUPPORTED_START = (
    "<!-- supported-functions:start (generated from tracegrad.tracing.dispatch.supported()) -->"
)
SUPPORTED_END = "<!-- supported-functions:end -->"


@dataclass
class Block:
    tag: str
    code: str
    line: int  # line of the first code line in the file (1-based)
    start: int  # character offsets of the code inside the file text
    end: int
    output: Block | None = None  # the ```output block that follows, if any


def blocks(text: str) -> list[Block]:
    found = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start(2)) + 1
        found.append(Block(m.group(1).strip(), m.group(2), line, m.start(2), m.end(2)))
    for block, following in itertools.pairwise(found):
        between = text[block.end : following.start]
        # only the closing fence, blank lines and the next opening fence in between
        if (
            block.tag == "python"
            and following.tag == "output"
            and between.count("```") == 2
            and not between.replace("```output", "").replace("```", "").strip()
        ):
            block.output = following
    return found


def python_blocks(path: Path) -> list[Block]:
    return [b for b in blocks(path.read_text()) if b.tag == "python"]


def run_blocks(path: Path) -> list[tuple[Block, str]]:
    """Execute the file's python blocks in order; return each block with what it printed.

    Code is compiled with the markdown file's name and line numbers, so tracebacks and the
    `# file:line` comments of IR listings point into the document."""
    namespace: dict = {"__name__": f"docs_{path.stem.replace('-', '_')}"}
    results = []
    for number, block in enumerate(python_blocks(path), 1):
        source = "\n" * (block.line - 1) + block.code
        stdout = io.StringIO()
        try:
            code = compile(source, path.name, "exec", dont_inherit=True)  # as a user runs it
            with contextlib.redirect_stdout(stdout):
                exec(code, namespace)  # running the documentation is the point
        except Exception:  # reported with the file and block
            pytest.fail(
                f"{path.relative_to(ROOT)}: python block {number} (line {block.line}) failed:\n"
                f"{traceback.format_exc()}",
                pytrace=False,
            )
        results.append((block, stdout.getvalue()))
    return results


def normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def supported_section() -> str:
    """The generated Markdown list of supported NumPy names."""
    names = [f"`np.{name}`" for name in supported()]
    special = [f"`scipy.special.{name}`" for name in SCIPY_SPECIAL]
    return "\n".join(
        [
            SUPPORTED_START,
            "",
            ", ".join(names),
            "",
            "With SciPy installed: " + ", ".join(special) + ".",
            "",
            SUPPORTED_END,
        ]
    )


# ----------------------------------------------------------------------------------------------
# The tests


def docs_backend(path: Path) -> str | None:
    """The backend a file's blocks run on: the README on the default one (what a new user gets),
    docs/ on numpy, where compiling each small example would cost more than running it. The
    numbers do not depend on the backend; the backends' own tests make sure of that."""
    return None if path.name == "README.md" else "numpy"


@contextlib.contextmanager
def backend_env(path: Path):
    name, old = docs_backend(path), os.environ.get("TRACEGRAD_BACKEND")
    if name is not None:
        os.environ["TRACEGRAD_BACKEND"] = name
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TRACEGRAD_BACKEND", None)
        else:
            os.environ["TRACEGRAD_BACKEND"] = old


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run_and_print_their_output(path):
    tg.clear_programs()
    with backend_env(path):
        results = run_blocks(path)
    for number, (block, printed) in enumerate(results, 1):
        if block.output is None:
            continue
        expected, actual = normalise(block.output.code), normalise(printed)
        if expected != actual:
            import difflib

            diff = "\n".join(
                difflib.unified_diff(
                    expected.splitlines(),
                    actual.splitlines(),
                    "documented",
                    "printed now",
                    lineterm="",
                )
            )
            pytest.fail(
                f"{path.relative_to(ROOT)}: python block {number} (line {block.line}) printed "
                f"something other than its output block:\n{diff}\n{UPDATE_HINT}",
                pytrace=False,
            )


def test_docs_have_python_blocks():
    for path in DOC_FILES:
        if path.name in ("index.md", "cli.md", "container.md"):  # commands only
            continue
        assert python_blocks(path), f"{path.name} has no executed ```python block"


def test_every_public_name_is_in_the_api_reference():
    api = (ROOT / "docs" / "api.md").read_text()
    missing = [name for name in tg.__all__ if f"`{name}" not in api and f"tg.{name}" not in api]
    assert not missing, f"docs/api.md does not document: {missing}"


def test_supported_numpy_functions_list_is_current():
    api = (ROOT / "docs" / "api.md").read_text()
    assert supported_section() in api, (
        f"docs/api.md: the supported-function list is stale; {UPDATE_HINT}"
    )


def test_relative_links_resolve():
    link = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")
    for path in DOC_FILES:
        for target, _ in link.findall(path.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            assert (path.parent / target).exists(), (
                f"{path.relative_to(ROOT)} links to missing {target}"
            )


def test_readme_quick_start_is_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert (
        "```shell\n"
        "python3 -m pip install -e . && python3 -m tracegrad run basics\n"
        'python3 -m pip install -e ".[test]" && python3 -m pytest\n'
        "```"
    ) in readme


def test_ci_runs_what_the_readme_says():
    """.ci/run installs the test extra, checks formatting and lints with the README's commands,
    then runs the suite."""
    readme = (ROOT / "README.md").read_text()
    style = "python3 -m ruff format --check tracegrad tests benchmarks"
    lint = "python3 -m ruff check tracegrad tests benchmarks"
    assert f"`{style}`" in readme and f"`{lint}`" in readme
    steps = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.startswith("python3 ")
    ]
    assert steps == ['python3 -m pip install -e ".[test]"', style, lint, "python3 -m pytest"]


def shell_commands(path: Path) -> list[str]:
    """The tracegrad command lines of a file's ```shell blocks, comments removed."""
    found = []
    for block in blocks(path.read_text()):
        if block.tag != "shell":
            continue
        for line in block.code.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith(("python3 -m tracegrad ", "tracegrad ")):
                found.append(line)
    return found


# `run newton` takes a while at its default size; tests/test_examples.py runs it at a small one.
SLOW_COMMANDS = ("python3 -m tracegrad run newton",)


def readme_commands() -> list[str]:
    return [c for c in shell_commands(ROOT / "README.md") if not c.startswith(SLOW_COMMANDS)]


@pytest.mark.parametrize("command", readme_commands())
def test_readme_commands_run(command):
    """The README's commands work from a clone, as a new user types them."""
    argv = shlex.split(command)
    argv = [sys.executable, "-m", "tracegrad", *argv[argv.index("tracegrad") + 1 :]]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    assert done.stdout.strip()


def test_the_readme_ir_command_is_run_on_the_shipped_file():
    commands = [c for c in readme_commands() if " ir " in c]
    assert commands and all("examples/model.py:" in c for c in commands)


def test_every_documented_ir_command_runs_on_the_shipped_file(capsys):
    from tracegrad import cli

    commands = [
        c for path in DOC_FILES for c in shell_commands(path) if " ir examples/model.py" in c
    ]
    assert len(commands) >= 4  # README, getting started, three in docs/cli.md
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for command in commands:
            argv = shlex.split(command)
            status = cli.main(argv[argv.index("ir") :])
            out = capsys.readouterr().out
            assert status == 0 and out.startswith("# "), command
    finally:
        os.chdir(cwd)


def test_readme_names_every_environment_variable():
    from tracegrad.base import config

    readme = (ROOT / "README.md").read_text()
    for variable in config.VARIABLES:
        assert f"`{variable.name}" in readme, variable.name


def test_block_parser_pairs_output_blocks():
    text = (
        "x\n```python\nprint(1)\n```\n\n```output\n1\n```\n```py\nno\n```\n```python\npass\n```\n"
    )
    found = blocks(text)
    assert [b.tag for b in found] == ["python", "output", "py", "python"]
    assert found[0].output is found[1] and found[3].output is None
    assert found[0].line == 3


# ----------------------------------------------------------------------------------------------
# What a notebook shows: make_ir(...) as an HTML table, and Graphviz source


def _sample_graph():
    def f(x, w):
        h = np.tanh(x @ w)
        return np.sum(np.where(h > 0, h, 0.1 * h))

    return tg.make_ir(tg.grad(f, argnums=1))(np.ones((4, 3)), np.ones(3))


def test_graph_renders_as_an_html_table():
    graph = _sample_graph()
    page = graph._repr_html_()
    assert page.startswith("<table") and page.endswith("</table>")
    rows = page.count("<tr>")
    assert rows == 1 + len(graph.inputs) + len(graph.nodes) + 1  # header, inputs, nodes, return
    for node in graph.nodes:
        assert f"<td>{node.prim.name}" in page
    assert "test_docs.py:" in page  # the source line of each node
    assert "<f64" not in page  # parameters like <f64[4,3] array> are escaped


def test_graph_exports_graphviz_source():
    graph = _sample_graph()
    dot = graph.to_dot()
    lines = dot.splitlines()
    assert lines[0] == "digraph tracegrad {" and lines[-1] == "}"
    edges = [line for line in lines if "->" in line]
    assert len(edges) == sum(len(n.inputs) for n in graph.nodes) + len(graph.outputs)
    assert dot.count("[label=") == len(graph.inputs) + len(graph.nodes) + len(graph.outputs)
    dot_program = shutil.which("dot")
    if dot_program:  # Graphviz itself, where installed, must accept it
        done = subprocess.run([dot_program, "-Tsvg"], input=dot, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


# ----------------------------------------------------------------------------------------------
# Regenerating


def update() -> None:
    """Rewrite every output block with what its code prints now, and the generated lists."""
    for path in DOC_FILES:
        text = path.read_text()
        if SUPPORTED_START in text:
            head, rest = text.split(SUPPORTED_START, 1)
            _, tail = rest.split(SUPPORTED_END, 1)
            text = head + supported_section() + tail
            path.write_text(text)
        if not python_blocks(path):
            continue
        tg.clear_programs()
        with backend_env(path):
            results = run_blocks(path)
        replacements = [
            (block.output.start, block.output.end, printed.strip("\n") + "\n")
            for block, printed in results
            if block.output is not None
        ]
        for start, end, new in sorted(replacements, reverse=True):
            text = text[:start] + new + text[end:]
        path.write_text(text)
        print(f"updated {path.relative_to(ROOT)} ({len(replacements)} output blocks)")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit(f"usage: python3 {os.path.relpath(__file__)} --update")
    update()
