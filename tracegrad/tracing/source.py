"""The user's line: where a traced operation was written, for the IR's comments and for errors
(`at_source`: the suffix a handler's error message ends with)."""

from __future__ import annotations

import ast
import linecache
import os
import sys
import types
from typing import Any

import numpy as np

from .. import ir
from ..base.errors import at

# frames in tracegrad and NumPy are not the user's
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__))


def user_frame():
    """The innermost stack frame outside tracegrad and NumPy: the user's line."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith((_PACKAGE_DIR, _NUMPY_DIR)):
            return frame
        frame = frame.f_back
    return None


_basenames: dict[str, str] = {}


def user_source() -> str | None:
    frame = user_frame()
    if frame is None:
        return None
    filename = frame.f_code.co_filename
    name = _basenames.get(filename)
    if name is None:
        name = _basenames[filename] = os.path.basename(filename)
    return f"{name}:{frame.f_lineno}"


def _user_ast() -> ast.Module | None:
    """The user's current line, parsed (None when there is none, or it is not a whole statement)."""
    frame = user_frame()
    if frame is None:
        return None
    try:
        return ast.parse(linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip())
    except SyntaxError:
        return None


def _stores_into_subscript_next(frame) -> bool | None:
    """From the bytecode: whether the instruction the user's frame is running (an in-place
    operator) is followed by a store into a subscript, as `y[i] += v` is; None when the
    bytecode cannot tell."""
    import dis  # looked up on first use: rare, and `import tracegrad` does not need it

    try:
        instructions = list(dis.get_instructions(frame.f_code))
    except Exception:
        return None
    at = next((k for k, ins in enumerate(instructions) if ins.offset == frame.f_lasti), None)
    if at is None:
        return None
    for ins in instructions[at + 1 :]:
        if ins.opname in ("SWAP", "ROT_TWO", "ROT_THREE", "ROT_FOUR", "COPY", "CACHE"):
            continue
        return ins.opname == "STORE_SUBSCR"
    return False


_NOTHING = object()


def subscripted_value() -> Any:
    """The object the user's current instruction indexes (`X` in `X[i, j]`), when that
    instruction reads a subscript and `X` is written plainly: a name, an attribute of one (read
    from the object's own dictionary: no property runs), a constant-key item of those. None
    otherwise. Found from the instruction's position in the source (the exact subscript, also on
    a line with several, or an expression over several lines)."""
    import dis  # looked up on first use: only an error path asks

    frame = user_frame()
    if frame is None:
        return None
    try:
        ins = next(i for i in dis.get_instructions(frame.f_code) if i.offset == frame.f_lasti)
    except Exception:
        return None
    if ins.opname != "BINARY_SUBSCR" and not (ins.opname == "BINARY_OP" and ins.argrepr == "[]"):
        return None
    pos = ins.positions
    if pos is None or None in (pos.lineno, pos.end_lineno, pos.col_offset, pos.end_col_offset):
        return None
    filename = frame.f_code.co_filename
    lines = [linecache.getline(filename, n).encode() for n in range(pos.lineno, pos.end_lineno + 1)]
    if len(lines) == 1:
        text = lines[0][pos.col_offset : pos.end_col_offset]
    else:  # positions count UTF-8 bytes
        text = b"".join([lines[0][pos.col_offset :], *lines[1:-1], lines[-1][: pos.end_col_offset]])
    try:
        node = ast.parse(b"(" + text + b")", mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Subscript):
        return None
    value = _plain_value(node.value, frame)
    return None if value is _NOTHING else value


def _plain_value(node: ast.AST, frame) -> Any:
    """The value of a plainly written expression in `frame`, without running user code."""
    if isinstance(node, ast.Name):
        for namespace in (frame.f_locals, frame.f_globals, frame.f_builtins):
            if node.id in namespace:
                return namespace[node.id]
        return _NOTHING
    if isinstance(node, ast.Attribute):
        owner = _plain_value(node.value, frame)
        own = getattr(owner, "__dict__", None)
        if isinstance(own, (dict, types.MappingProxyType)):
            return own.get(node.attr, _NOTHING)
        return _NOTHING
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        owner = _plain_value(node.value, frame)
        if type(owner) in (dict, list, tuple):
            try:
                return owner[node.slice.value]
            except (KeyError, IndexError, TypeError):
                return _NOTHING
    return _NOTHING


def reads_for_an_augmented_subscript() -> bool:
    """Whether the subscript the user's frame is reading (`y[m]`) is the read of `y[m] op= v`:
    the container and the index were copied just before, for the store that follows."""
    import dis

    frame = user_frame()
    if frame is None:
        return False
    try:
        instructions = list(dis.get_instructions(frame.f_code))
    except Exception:
        return False
    at = next((k for k, ins in enumerate(instructions) if ins.offset == frame.f_lasti), None)
    if at is None or at < 2 or instructions[at].opname != "BINARY_SUBSCR":
        return False
    before = [(ins.opname, ins.arg) for ins in instructions[at - 2 : at]]
    return before == [("COPY", 2), ("COPY", 2)] or before[-1][0] == "DUP_TOP_TWO"


def augments_a_subscript() -> bool:
    """Whether the in-place operator the user's frame is running writes its result back into a
    subscript (`y[1:3] += v`), from the bytecode (also on a line of several statements), else
    from the line's text."""
    frame = user_frame()
    if frame is not None:
        stores = _stores_into_subscript_next(frame)
        if stores is not None:
            return stores
    return writes_into_subscript()


def writes_into_subscript() -> bool:
    """Whether the user's current line assigns to a subscript (`y[i] = ...`, `y[i] += ...`)."""
    tree = _user_ast()
    statement = tree.body[0] if tree is not None and tree.body else None
    if not isinstance(statement, (ast.Assign, ast.AugAssign)):
        return False
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    return any(isinstance(t, ast.Subscript) for t in targets)


def line_has(node_type: type) -> bool:
    """Whether the user's current line contains a node of this kind (a subscript...)."""
    tree = _user_ast()
    return tree is not None and any(isinstance(n, node_type) for n in ast.walk(tree))


def line_calls(names: tuple[str, ...]) -> bool:
    """Whether the user's current line calls a function with one of these names (np.array...)."""
    tree = _user_ast()
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Call):
            f = node.func
            if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)) in names:
                return True
    return False


def line_list_argument() -> str | None:
    """The function the user's current line gives a list or tuple of computed values (not only
    constants): `np.exp` for `np.exp([a, b * b])`; None when there is none."""
    tree = _user_ast()
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Call):
            for arg in (*node.args, *(k.value for k in node.keywords)):
                if isinstance(arg, (ast.List, ast.Tuple)) and not all(
                    isinstance(e, ast.Constant) for e in arg.elts
                ):
                    return ast.unparse(node.func)
    return None


def user_line() -> str:
    frame = user_frame()
    if frame is None:
        return ""
    code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    return f"\n  at {where}" + (f": {code}" if code else "")


def at_source() -> str:
    """' (at file.py:12)': the user's line of the operation being traced (the source location
    set where a handler is called), which a handler's error message ends with; '' if unknown."""
    return at(ir.current_source())
