"""The loop IR: kernels as loop nests, between the fusion plan and the code generators.

A fused loop of the plan says *what* is computed at each point of an iteration space. A target's
lowering pass (`cpu/lowering.py`: chunks of axis 0 shared by threads, partial results per chunk;
`cuda/lowering.py`: grid-stride loops, blocks of threads, trees in shared memory) decides *how*, and
writes it in this IR: a kernel is a list of statements, the same statement types for every target.
A code generator is then a printer of the IR (`render.Printer`) with its own table of renderings
(how an index, a literal, a math call or a reduction step is spelt), overriding only what differs.

Statements
----------
    Let(op)                       bind one of the plan's ops (`Load`, `Compute`, ...) to its id
    LetPair(first, second, arg, call)
                                  two values one call computes (sin and cos of one argument)
    Assign(target, value, update) `target = value` (`target += value` with update "+");
                                  a target is a name or an `Elem`
    For(var, stop, body, start, step)
                                  `for var in range(start, stop, step)` (start None: from 0)
    While(cond, body)             `while cond`
    If(cond, body, orelse)        `if cond`, and `else` when there is an `orelse`
    Note(text)                    a comment on its own line
    Call(function, args, results) a call of another kernel (the steps of a scan call its body's,
                                  a CPU kernel its outlined inner loop); `results`: the names
                                  it assigns from what the call returns
    Shared(name, size, dtype)     a block's array in fast shared memory (GPU)
    Local(name, size, dtype)      a thread's own small array, in registers (GPU)
    Sync()                        every thread of the block waits here (GPU)

Expressions (the right-hand side of an `Assign`)
    str                           a name, or an expression in Python's syntax (index arithmetic,
                                  an array's row or copy), which every target shares: both
                                  compile Python through Numba
    Elem(array, index)            an element of a buffer (or of a kernel-local array, by name);
                                  index entries are the plan's `Index` values or strings
    Identity(op, dtype)           the identity of the monoid `op` in `dtype`
    Combine(op, dtype, a, b, reassociate)
                                  one step of the monoid `op`; `reassociate`: the order of steps
                                  may change (a reduction's, not a running scan's)
    Cast(dtype, value)            a conversion to `dtype`
    Special(name)                 a value the target provides (a thread's index, on a GPU)
    BinOp(left, op, right)        integer arithmetic on any of these

`str(kernel)` prints a kernel in a target-neutral form (see `text`); `tg.make_kernels` shows the
generated source, which the printers write from the same statements.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .steps import Buffer, Compute, Index, Load, Op

# ----------------------------------------------------------------------------------------------
# Expressions


@dataclass(frozen=True)
class Elem:
    array: Buffer | str
    index: tuple[Index | str, ...]


@dataclass(frozen=True)
class Identity:
    op: str
    dtype: np.dtype


@dataclass(frozen=True)
class Combine:
    op: str
    dtype: np.dtype
    a: Expr
    b: Expr
    reassociate: bool = False


@dataclass(frozen=True)
class Cast:
    dtype: np.dtype
    value: Expr


@dataclass(frozen=True)
class Special:
    """A value the target provides: `thread` (this thread's index in the grid), `threads` (the
    grid's size), `lane` (the thread's index in its block), `block_x`, `block_y`, `blocks_x`."""

    name: str


@dataclass(frozen=True)
class BinOp:
    """`left op right` on integers (index arithmetic on values the target provides)."""

    left: Expr
    op: str
    right: Expr


Expr = str | Elem | Identity | Combine | Cast | Special | BinOp

# ----------------------------------------------------------------------------------------------
# Statements


@dataclass
class Let:
    op: Op


@dataclass
class LetPair:
    first: Compute
    second: Compute
    arg: str
    call: str  # the math library's function returning (first, second)
    dtype: np.dtype  # the argument's
    where: Compute  # the one of the two whose place the pair takes (for its comment)


@dataclass
class Assign:
    target: str | Elem
    value: Expr
    note: str | None = None
    update: str | None = None  # "+" or "//": `target += value`, `target //= value`


@dataclass
class For:
    var: str
    stop: str
    body: list[Stmt]
    start: str | None = None
    note: str | None = None
    step: str | None = None


@dataclass
class While:
    cond: str
    body: list[Stmt]
    note: str | None = None


@dataclass
class If:
    cond: str
    body: list[Stmt]
    note: str | None = None
    orelse: list[Stmt] | None = None


@dataclass
class Note:
    text: str


@dataclass
class Call:
    """A call of another kernel (a loop body's kernel, from the loop that runs it), assigning
    what it returns to `results` when there are any."""

    function: str
    args: list[str]
    results: list[str] = field(default_factory=list)


@dataclass
class Shared:
    name: str
    size: int | tuple[int, ...]
    dtype: np.dtype


@dataclass
class Local:
    name: str
    size: int | tuple[int, ...]
    dtype: np.dtype


@dataclass
class Sync:
    pass


Stmt = Let | LetPair | Assign | For | While | If | Note | Call | Shared | Local | Sync


@dataclass
class Kernel:
    """One kernel: its arguments (buffers of the plan, or names of the target's own arguments),
    a docstring, and its statements."""

    name: str
    args: list[Buffer | str]
    body: list[Stmt]
    doc: str | None = None
    info: dict = field(default_factory=dict)  # what the lowering decided (for the generator)

    def __str__(self) -> str:
        return text(self)


# ----------------------------------------------------------------------------------------------
# The ops a kernel needs


def needed(ops: list[Op], values: list[str]) -> list[Op]:
    """The ops that `values` depend on, in program order."""
    by_id = {op.id: op for op in ops}
    need: set[str] = set()
    stack = list(values)
    while stack:
        name = stack.pop()
        op = by_id.get(name)
        if op is None or name in need:
            continue
        need.add(name)
        stack += op_inputs(op)
    return [op for op in ops if op.id in need]


def op_inputs(op: Op) -> list[str]:
    """The names an op reads: other ops' ids and loop variables."""
    args = getattr(op, "args", None)
    if args is not None:
        return list(args)
    if hasattr(op, "cond"):
        return [op.cond, op.then, op.other]
    if isinstance(op, Load):
        return [ix.var for ix in op.index if ix.var is not None]
    base = getattr(op, "base", None)
    if base is not None and base.var is not None:
        return [base.var]
    return []


def walk(body: list[Stmt]):
    """Every statement of `body`, nested ones included, in order."""
    for s in body:
        yield s
        for inner in (getattr(s, "body", None), getattr(s, "orelse", None)):
            if inner is not None:
                yield from walk(inner)


def blocks(body: list[Stmt]):
    """`body` and every statement list nested in it (loop bodies, branches)."""
    yield body
    for s in walk(body):
        for inner in (getattr(s, "body", None), getattr(s, "orelse", None)):
            if inner is not None:
                yield inner


# ----------------------------------------------------------------------------------------------
# The target-neutral text


def _expr(e: Expr) -> str:
    if isinstance(e, str):
        return e
    if isinstance(e, Elem):
        name = e.array if isinstance(e.array, str) else e.array.name
        return f"{name}[{', '.join(str(ix) for ix in e.index)}]"
    if isinstance(e, Identity):
        return f"identity({e.op}, {np.dtype(e.dtype).name})"
    if isinstance(e, Combine):
        how = "any order" if e.reassociate else "in order"
        return f"{e.op}({_expr(e.a)}, {_expr(e.b)})  ({np.dtype(e.dtype).name}, {how})"
    if isinstance(e, Special):
        return f"<{e.name}>"
    if isinstance(e, BinOp):
        return f"{_expr(e.left)} {e.op} {_expr(e.right)}"
    return f"{np.dtype(e.dtype).name}({_expr(e.value)})"


def _op(op: Op) -> str:
    kind = type(op).__name__
    if isinstance(op, Load):
        return f"{op.id} = load {op.buffer.name}[{', '.join(str(ix) for ix in op.index)}]"
    if isinstance(op, Compute):
        return f"{op.id} = {op.node.prim.name}({', '.join(op.args)})"
    fields = {k: v for k, v in vars(op).items() if k not in ("id", "depth")}
    parts = ", ".join(
        f"{k}={v.item() if isinstance(v, np.ndarray) else v}" for k, v in fields.items()
    )
    return f"{op.id} = {kind.lower()}({parts})"


def _lines(body: list[Stmt], indent: int, out: list[str]) -> None:
    pad = "  " * indent
    for s in body:
        if isinstance(s, Let):
            out.append(pad + _op(s.op))
        elif isinstance(s, LetPair):
            out.append(f"{pad}{s.first.id}, {s.second.id} = {s.call}({s.arg})")
        elif isinstance(s, Assign):
            out.append(f"{pad}{_expr(s.target)} {s.update or ''}= {_expr(s.value)}")
        elif isinstance(s, For):
            start = f"{s.start}.." if s.start is not None else "0.."
            step = f" step {s.step}" if s.step is not None else ""
            out.append(f"{pad}for {s.var} in {start}{s.stop}{step}:")
            _lines(s.body, indent + 1, out)
        elif isinstance(s, While):
            out.append(f"{pad}while {s.cond}:")
            _lines(s.body, indent + 1, out)
        elif isinstance(s, If):
            out.append(f"{pad}if {s.cond}:")
            _lines(s.body, indent + 1, out)
            if s.orelse is not None:
                out.append(f"{pad}else:")
                _lines(s.orelse, indent + 1, out)
        elif isinstance(s, Note):
            out.append(f"{pad}# {s.text}")
        elif isinstance(s, Call):
            assigned = f"{', '.join(s.results)} = " if s.results else ""
            out.append(f"{pad}{assigned}call {s.function}({', '.join(s.args)})")
        elif isinstance(s, (Shared, Local)):
            where = "shared" if isinstance(s, Shared) else "local"
            size = [s.size] if isinstance(s.size, int) else list(s.size)
            out.append(f"{pad}{s.name} = {where} {np.dtype(s.dtype).name}{size}")
        elif isinstance(s, Sync):
            out.append(f"{pad}sync")


def text(kernel: Kernel) -> str:
    """The kernel in the IR's own notation: loops, lets, loads, stores and monoid steps."""
    args = ", ".join(a if isinstance(a, str) else repr(a) for a in kernel.args)
    out = [f"kernel {kernel.name}({args}):"]
    if kernel.doc:
        out.append(f"  # {kernel.doc}")
    _lines(kernel.body, 1, out)
    return "\n".join(out)
