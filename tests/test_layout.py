"""The package's layout reads in pipeline order: its imports flow one way, down the pipeline.

Every module's imports are read with `ast` (nothing is imported). The rules:

- no import cycle at all: module-level imports, imports inside functions (lazy ones, for
  start-up time) and imports under `if TYPE_CHECKING:` (annotations) are all edges;
- no module imports a module of a later stage of the pipeline (`STAGES`, in order), in any of
  those ways, except the few listed in `UPWARD`, each with its reason;
- a name another module imports is public (no leading underscore), except those listed in
  `PRIVATE_IMPORTS` with their reason;
- at most `MAX_TOP_LEVEL` modules at the package's top level: what supports a stage lives in
  the stage's folder.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tracegrad"

# The stages in pipeline order; a module belongs to the stage of the longest prefix that names
# it (a package's prefix covers its submodules). Modules of one stage may import each other.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    # the ground floor (base/): errors, the TRACEGRAD_* variables, hashes, pytrees, the kernel
    # disk cache, progress, BLAS threads, host kernels; it imports nothing else of tracegrad
    ("base", ("base", "tree_util")),
    ("ir", ("ir",)),
    # the primitive table, and the reference executor that runs its NumPy facet over a graph
    ("primitives", ("primitives", "primitive_table", "interpreter")),
    # tracing: tracers, the dispatch registry and the traced NumPy namespace, linear algebra,
    # user-facing helpers that trace (array constructors, debugging prints), SciPy's functions
    ("trace", ("trace", "tracing", "numpy", "numpy_namespace", "linalg", "scipy")),
    # graph-to-graph transforms: the adjoint, forward mode, batching, loops, custom rules and
    # their user API
    ("autodiff", ("autodiff", "transforms")),
    ("passes", ("passes",)),
    # vectorisable math functions, a library the printers call into (it imports only base)
    ("vmath", ("vmath",)),
    # backend-neutral planning and the loop IR, with the printer base both targets share
    ("fusion", ("fusion",)),
    # the two targets: entry points and their folders, mirrored
    ("codegen", ("codegen_cpu", "codegen_cuda", "cpu", "cuda")),
    # the top floor: backends, the program store, persisted programs, tiered execution
    ("runtime", ("runtime",)),
    # the public API: the transforms and how a call reaches its program
    # (scipy.integrate differentiates the user's func with tg.vjp at run time)
    ("api", ("", "api", "api_transforms", "calls", "checking", "dask", "scipy.integrate")),
    ("cli", ("cli", "examples", "__main__")),
]

# Imports that go up the pipeline, each with why; (importer, imported) as module names.
UPWARD: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = ["tracegrad", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The tracegrad modules an import statement loads (a package's submodule when it names
    one: `from . import ir` loads tracegrad.ir)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        names = [
            f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source for a in node.names
        ]
    found = []
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name.startswith("tracegrad") and name != module:
            found.append(name)
    return found


def imports(module: str, text: str | None = None) -> tuple[set[str], set[str]]:
    """(modules imported at module level, modules imported inside functions or under
    `if TYPE_CHECKING:`), read from the module's file (or from `text`)."""
    tree = ast.parse(MODULES[module].read_text() if text is None else text)
    top: set[str] = set()
    lazy: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                visit(child, True)  # for annotations only: an edge all the same
            for child in node.orelse:
                visit(child, in_function)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            (lazy if in_function else top).update(_targets(module, node))
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return top, lazy


GRAPH = {m: imports(m) for m in MODULES}


def stage(module: str) -> int:
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(STAGES):
        for prefix in prefixes:
            full = f"tracegrad.{prefix}" if prefix else "tracegrad"
            if (module == full or module.startswith(full + ".")) and len(full) > best_len:
                best, best_len = index, len(full)
    if best is None:
        raise AssertionError(f"{module} has no stage: add it (or its package) to STAGES")
    return best


def test_every_module_has_a_stage():
    for module in MODULES:
        stage(module)


def test_no_module_imports_a_later_stage():
    found = []
    for module, (top, lazy) in GRAPH.items():
        for target in sorted(top | lazy):
            if stage(target) > stage(module) and (module, target) not in UPWARD:
                how = "at module level" if target in top else "inside a function"
                found.append(
                    f"{module} ({STAGES[stage(module)][0]}) imports {target} "
                    f"({STAGES[stage(target)][0]}) {how}"
                )
    assert not found, "imports up the pipeline:\n" + "\n".join(found)


def test_the_known_upward_imports_still_exist():
    """An entry of UPWARD that no longer happens is removed from the list."""
    for module, target in UPWARD:
        top, lazy = GRAPH[module]
        assert target in top | lazy, f"{module} no longer imports {target}: drop it from UPWARD"


def _cycles() -> list[list[str]]:
    """The strongly connected components of the import graph (every kind of import) with more
    than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v][0] | GRAPH[v][1]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            connect(v)
    return components


def test_no_import_cycle():
    cycles = _cycles()
    assert not cycles, "import cycles (module-level, lazy or type-only):\n" + "\n".join(
        ", ".join(component) for component in cycles
    )


def test_the_checker_sees_imports():
    """The reader of imports finds what it must, so that the tests above can fail."""
    top, _ = GRAPH["tracegrad.autodiff"]
    assert {"tracegrad.ir", "tracegrad.primitives"} <= top
    top, lazy = GRAPH["tracegrad.primitive_table.indexing"]  # the scatter-add's compiled loop
    assert "tracegrad.base.host_kernels" in lazy - top
    top, _ = GRAPH["tracegrad.runtime.tiered"]
    assert "tracegrad.runtime.program" in top
    assert stage("tracegrad.codegen_cpu") > stage("tracegrad.fusion") > stage("tracegrad.ir")
    assert stage("tracegrad.runtime.program") > stage("tracegrad.codegen_cpu")


@pytest.mark.parametrize(
    "package",
    ["base", "calls", "cli", "cpu", "cuda", "fusion", "primitive_table", "runtime", "tracing"]
    + ["transforms"],
)
def test_each_subpackage_says_where_it_stands(package):
    """A subpackage's docstring names its place in the pipeline."""
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text()))
    assert doc, f"tracegrad/{package}/__init__.py has no docstring"
    assert "stage" in doc.lower() or "pipeline" in doc.lower(), (
        f"tracegrad/{package}/__init__.py's docstring does not say where it stands in the pipeline"
    )


# A file is split by idea, not by count: ~500 lines is a prompt to look at it, MAX_LINES the
# hard limit (docs/how-it-works.md lists the layout).
MAX_LINES = 800

# Modules allowed past MAX_LINES, each with why (none today).
LONG_MODULES: dict[str, str] = {}


def test_no_module_is_over_the_hard_limit():
    """A file holds one idea and stays readable: past MAX_LINES, split it by idea."""
    long = {
        module: n
        for module, path in MODULES.items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES and module not in LONG_MODULES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them): {long}"


def test_the_long_modules_exist():
    """An entry of LONG_MODULES whose module is gone is removed from the list."""
    for module in LONG_MODULES:
        assert module in MODULES, f"{module} no longer exists: drop it from LONG_MODULES"


# Private names (a leading underscore) imported from another module, as (importer, name), each with
# why it is not public (none today).
PRIVATE_IMPORTS: dict[tuple[str, str], str] = {}


def _private_imports() -> list[tuple[str, str, str]]:
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and _targets(module, node):
                for alias in node.names:
                    name = alias.name
                    if name.startswith("_") and not name.startswith("__"):
                        found.append((module, name, f"line {node.lineno}"))
    return found


def test_names_other_modules_import_are_public():
    """A name another module uses is public; privacy is a module's own, said once."""
    found = [
        f"{m} imports {n} ({where})"
        for m, n, where in _private_imports()
        if (m, n) not in PRIVATE_IMPORTS
    ]
    assert not found, "private names imported across modules (make them public):\n" + "\n".join(
        found
    )


MAX_TOP_LEVEL = 16


def test_the_top_level_holds_the_entry_points():
    """The package's top level holds the public face and each stage's entry point; what
    supports a stage lives in its folder (base/, tracing/, transforms/, fusion/, cpu/, cuda/...)."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, f"{len(top)} top-level modules: {top}"


def test_the_checker_sees_every_kind_of_import():
    """Type-only and lazy imports are edges; private imports are found (so the tests above can
    fail)."""
    top, lazy = imports(
        "tracegrad.fusion.limits",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..ir import Graph\n",
    )
    assert lazy == {"tracegrad.ir"} and not top
    _, lazy = GRAPH["tracegrad.calls.transformed"]  # derive, loaded on the first miss
    assert "tracegrad.calls.derive" in lazy
    tree = ast.parse("from .ir import _hidden, shown")
    node = tree.body[0]
    assert isinstance(node, ast.ImportFrom)
    assert [a.name for a in node.names if a.name.startswith("_")] == ["_hidden"]
