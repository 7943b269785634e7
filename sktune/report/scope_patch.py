"""SuperKernel scope markers as source edits: where they go in the model file (pure, ``ast``).

A scope maps cleanly onto source when its first and last ops come from lines of the model
file in ONE function, each line belongs to a statement alone on its lines, and the
statements from the first to the last run exactly the scope's ops: no op outside the
scope sits on those lines, no op of the scope sits on another line of that function,
and the ops just before and after the scope cannot have been called from the edge
statements. Then ``super_kernel_scope_begin(name)`` goes before the first statement and
``super_kernel_scope_end(name)`` after the last one, at their indentation. A ``return``
statement that closes a scope becomes ``_sktune_out = ...``, the end markers, ``return
_sktune_out``. Anything else is an ``ExportError`` saying why.
"""

from __future__ import annotations

import ast
import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sktune.errors import ExportError
from sktune.graph.markers import marker_positions
from sktune.plan import Scope

OUT_NAME = "_sktune_out"
APPLY_HINT = "use sktune.apply(model, PLAN, backend=...) instead, which inserts the markers into the captured graph"
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class _Function:
    name: str  # qualified: "RMSNorm.forward", or "module level"
    node: ast.AST | None
    first_line: int
    last_line: int


@dataclass
class _Edits:
    before: dict[int, list[str]] = field(default_factory=dict)  # line → lines inserted above it
    after: dict[int, list[str]] = field(default_factory=dict)  # line → lines inserted below it
    returns: dict[int, int] = field(default_factory=dict)  # first → last line of a closing `return`


def _functions(tree: ast.Module, n_lines: int) -> list[_Function]:
    """Every function with its qualified name, innermost last for any line."""
    found = [_Function("module level", None, 1, n_lines)]

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _FUNCS):
                name = f"{prefix}{child.name}"
                found.append(_Function(name, child, child.lineno, child.end_lineno or child.lineno))
                visit(child, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _function_at(functions: list[_Function], line: int) -> _Function:
    holding = [f for f in functions if f.first_line <= line <= f.last_line]
    return max(holding, key=lambda f: f.first_line)


def _blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists nested directly in ``stmt`` (bodies, else, handlers, cases)."""
    out = []
    for name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            out.append(block)
    for holder in getattr(stmt, "handlers", []) + getattr(stmt, "cases", []):
        out.append(holder.body)
    return out


def _path(body: list[ast.stmt], line: int) -> list[tuple[list[ast.stmt], int]]:
    """(block, index) pairs from ``body`` down to the innermost statement holding ``line``."""
    path: list[tuple[list[ast.stmt], int]] = []
    block: list[ast.stmt] | None = body
    while block is not None:
        index = next((i for i, s in enumerate(block) if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
        if index is None:
            break
        path.append((block, index))
        stmt = block[index]
        block = next((b for b in _blocks(stmt) if b[0].lineno <= line <= (b[-1].end_lineno or b[-1].lineno)), None)
        if isinstance(stmt, _FUNCS + (ast.ClassDef,)):
            break
    return path


def _line_of(source: str, model_file: Path) -> int | None:
    """The line number when ``source`` ("file:line") is a line of the model file."""
    file, _, line = source.rpartition(":")
    if not file or not line.isdigit():
        return None
    try:
        same = Path(file).resolve() == model_file.resolve()
    except OSError:
        same = False
    return int(line) if same else None


def _called_names(stmt: ast.stmt) -> set[str]:
    """Names a statement calls that may run ops elsewhere: ``self.x(...)``, ``f(...)``."""
    names = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Call):
            func = node.func
            # self.a.b(...) → "a"; x.pow(...) → "x"; f(...) → "f"
            while isinstance(func, ast.Attribute) and not (isinstance(func.value, ast.Name)
                                                           and func.value.id == "self"):
                func = func.value
            if isinstance(func, ast.Attribute):
                names.add(func.attr)
            elif isinstance(func, ast.Name):
                names.add(func.id)
    return names


class _Mapper:
    def __init__(self, text: str, model_file: Path, ops: Sequence[dict[str, Any]]) -> None:
        self.lines = text.splitlines(keepends=True)
        self.tree = ast.parse(text)
        self.model_file = model_file
        self.ops = ops
        self.functions = _functions(self.tree, len(self.lines))
        self.op_lines = [_line_of(str(op.get("source") or ""), model_file) for op in ops]

    def describe(self, k: int) -> str:
        op = self.ops[k]
        return f"op {k} ({op.get('target')}, {op.get('source') or 'no source line'})"

    def edge_line(self, scope: Scope, label: str, k: int, edge: str) -> int:
        line = self.op_lines[k]
        if line is None:
            raise ExportError(f"{label} {edge} at {self.describe(k)}, which is not a line of {self.model_file.name}; "
                              f"{APPLY_HINT}")
        return line

    def statements(self, scope: Scope, label: str) -> tuple[_Function, ast.stmt, ast.stmt]:
        """The function and the first/last statements (siblings) the scope's edges fall in."""
        a = self.edge_line(scope, label, scope.first_op, "starts")
        b = self.edge_line(scope, label, scope.last_op, "ends")
        fa, fb = _function_at(self.functions, a), _function_at(self.functions, b)
        if fa is not fb:
            raise ExportError(f"{label} starts in {fa.name} (line {a}) and ends in {fb.name} (line {b}): "
                              f"no single function holds it; {APPLY_HINT}")
        if fa.node is None:
            raise ExportError(f"{label} runs at module level (lines {a}..{b}), not in a function; {APPLY_HINT}")
        body = fa.node.body  # type: ignore[attr-defined]
        pa, pb = _path(body, a), _path(body, b)
        if not pa or not pb:
            raise ExportError(f"{label}: line {a if not pa else b} of {fa.name} is not inside a statement of its body; "
                              f"{APPLY_HINT}")
        depth = 0  # descend while both lines sit in the same statement and the same nested block
        while (depth + 1 < min(len(pa), len(pb)) and pa[depth][1] == pb[depth][1]
               and pa[depth + 1][0] is pb[depth + 1][0]):
            depth += 1
        (block_a, i), (block_b, j) = pa[depth], pb[depth]
        if block_a is not block_b or i > j:
            raise ExportError(f"{label}: line {a} and line {b} of {fa.name} are not in source order within one "
                              f"block; {APPLY_HINT}")
        for stmt_block, index in ((block_a, i), (block_a, j)):
            stmt = stmt_block[index]
            prev_end = stmt_block[index - 1].end_lineno if index > 0 else 0
            nxt = stmt_block[index + 1].lineno if index + 1 < len(stmt_block) else None
            if (prev_end or 0) >= stmt.lineno or (nxt is not None and nxt <= (stmt.end_lineno or stmt.lineno)):
                raise ExportError(f"{label}: line {stmt.lineno} of {fa.name} holds more than one statement; "
                                  f"{APPLY_HINT}")
        last = block_a[j]
        if not isinstance(last, ast.Return) and any(isinstance(n, ast.Return) for n in ast.walk(last)):
            raise ExportError(f"{label}: the statement at line {last.lineno} of {fa.name} may return, so an end "
                              f"marker after it would not run; {APPLY_HINT}")
        return fa, block_a[i], last

    def check_ops(self, scope: Scope, label: str, func: _Function, s1: ast.stmt, s2: ast.stmt) -> None:
        """The statements s1..s2 run exactly the scope's ops (see the module docstring)."""
        lo, hi = s1.lineno, s2.end_lineno or s2.lineno
        span = f"lines {lo}..{hi} of {func.name}"
        for k, line in enumerate(self.op_lines):
            if line is None:
                continue
            inside = scope.first_op <= k <= scope.last_op
            if lo <= line <= hi and not inside:
                raise ExportError(f"{label}: {span} also run {self.describe(k)}, which is outside the scope; "
                                  f"{APPLY_HINT}")
            if inside and func.first_line <= line <= func.last_line and not lo <= line <= hi \
                    and _function_at(self.functions, line) is func:
                raise ExportError(f"{label}: {self.describe(k)} is in the scope but outside {span} "
                                  f"({func.name} runs more than once?); {APPLY_HINT}")
        for k, stmt, side in ((scope.first_op - 1, s1, "before"), (scope.last_op + 1, s2, "after")):
            if 0 <= k < len(self.ops):
                self.check_neighbour(k, stmt, side, label, func)

    def check_neighbour(self, k: int, stmt: ast.stmt, side: str, label: str, func: _Function) -> None:
        """Op ``k`` runs just outside the scope: it must not run inside the edge statement."""
        line = self.op_lines[k]
        if line is not None and _function_at(self.functions, line) is func:
            return  # on its own line of the same function: check_ops placed it outside already
        op = self.ops[k]
        called = _called_names(stmt)
        suspects = set(str(op.get("module") or "").split(".")) | (
            {_function_at(self.functions, line).name.split(".")[-1]} if line is not None else set())
        if line is None or called & suspects:
            raise ExportError(
                f"{label}: {self.describe(k)} runs just {side} the scope and may be called from line "
                f"{stmt.lineno} of {func.name}, where the {'begin' if side == 'before' else 'end'} marker goes; "
                f"{APPLY_HINT}")

    def edits(self, scopes: Sequence[Scope]) -> _Edits:
        placed: dict[Scope, tuple[ast.stmt, ast.stmt]] = {}
        for scope in scopes:
            label = f"scope {scope.name} (ops {scope.first_op}..{scope.last_op})"
            func, s1, s2 = self.statements(scope, label)
            self.check_ops(scope, label, func, s1, s2)
            placed[scope] = (s1, s2)
        out = _Edits()
        # Same-name scopes are disjoint (marker_positions checks), so kind + op + name is one scope.
        by_edge = {**{("begin", s.first_op, s.name): s for s in scopes},
                   **{("end", s.last_op, s.name): s for s in scopes}}
        for marker in marker_positions(scopes):
            s1, s2 = placed[by_edge[(marker.kind, marker.op_index, marker.name)]]
            stmt = s1 if marker.kind == "begin" else s2
            arg = "None" if marker.name is None else json.dumps(marker.name)
            text = f"{self.indent(stmt)}torch.npu.super_kernel_scope_{marker.kind}({arg})\n"
            if marker.kind == "begin":
                out.before.setdefault(stmt.lineno, []).append(text)
            else:
                out.after.setdefault(stmt.end_lineno or stmt.lineno, []).append(text)
                if isinstance(stmt, ast.Return) and stmt.value is not None:
                    out.returns[stmt.lineno] = stmt.end_lineno or stmt.lineno
        return out

    def indent(self, stmt: ast.stmt) -> str:
        line = self.lines[stmt.lineno - 1]
        return line[: len(line) - len(line.lstrip())]

    def render(self, edits: _Edits) -> list[str]:
        out: list[str] = []
        return_ends = {end: first for first, end in edits.returns.items()}
        for number, line in enumerate(self.lines, start=1):
            out += edits.before.get(number, [])
            if number in edits.returns:
                indent = line[: len(line) - len(line.lstrip())]
                line = f"{indent}{OUT_NAME} ={line.lstrip()[len('return'):]}"
            if number in edits.after and not line.endswith("\n"):
                line += "\n"
            out.append(line)
            out += edits.after.get(number, [])
            if number in return_ends:
                first = self.lines[return_ends[number] - 1]
                out.append(f"{first[: len(first) - len(first.lstrip())]}return {OUT_NAME}\n")
        return out


def scope_patch(text: str, model_file: Path, ops: Sequence[dict[str, Any]], scopes: Sequence[Scope],
                display_path: str) -> str:
    """A unified diff (``a/<display_path>``, ``b/<display_path>``) inserting the scopes' markers.

    ``text`` is the model file's content; ``model_file`` is its path as the ops' ``source``
    fields name it ("file:line")."""
    if not scopes:
        raise ExportError("the plan has no scopes, so there are no markers to insert; "
                          "compile with the options of `sktune export --format python`")
    tree = ast.parse(text)
    if not any(isinstance(n, ast.Import) and any(a.name.split(".")[0] == "torch" and a.asname is None for a in n.names)
               for n in tree.body):
        raise ExportError(f"{model_file.name} has no top-level `import torch`, which the markers need; "
                          f"add it, or {APPLY_HINT}")
    mapper = _Mapper(text, model_file, ops)
    new = mapper.render(mapper.edits(scopes))
    old = mapper.lines
    return "".join(difflib.unified_diff(old, new, fromfile=f"a/{display_path}", tofile=f"b/{display_path}"))
