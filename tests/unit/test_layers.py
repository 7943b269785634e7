"""Dependencies point one way: a module of sktune imports only its own layer or the layers
below it, in the order of docs/architecture.md's module list (function-level imports
included). The one arrow that pointed up, graph → space/plan.py, is why plan.py moved."""

from __future__ import annotations

import ast
from pathlib import Path

SKTUNE = Path(__file__).resolve().parents[2] / "sktune"
LAYERS = ("errors", "child_process", "host_cpu", "plan", "verify", "capabilities", "graph", "space", "measure", "load", "backends",
          "_apply", "pipe", "worker", "tuning", "report", "benchlib", "doctor", "cli")  # bottom first, as the doc lists them


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "sktune" and len(parts) > 1 and parts[1] in LAYERS else None


def upward_imports() -> list[str]:
    found = []
    for path in SKTUNE.rglob("*.py"):
        mine = _layer(".".join(path.relative_to(SKTUNE.parent).with_suffix("").parts))
        if mine is None:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                other = _layer(name)
                if other is not None and LAYERS.index(other) > LAYERS.index(mine):
                    found.append(f"{path.relative_to(SKTUNE.parent)}:{node.lineno} ({mine}) imports {name} ({other})")
    return found


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert upward_imports() == []


def test_every_package_and_top_module_has_a_layer() -> None:
    """A new package must take its place in the order (and in the doc's list)."""
    named = {p.stem if p.is_file() else p.name for p in SKTUNE.iterdir()
             if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and not p.stem.startswith("__"))}
    assert named <= set(LAYERS), sorted(named - set(LAYERS))


def test_the_check_sees_an_upward_import(tmp_path: Path, monkeypatch) -> None:
    """The checker itself can fail: a graph module importing tuning is reported."""
    fake = tmp_path / "sktune"
    (fake / "graph").mkdir(parents=True)
    (fake / "graph" / "bad.py").write_text("def f():\n    from sktune.tuning.loop import tune\n")
    import sys

    monkeypatch.setattr(sys.modules[__name__], "SKTUNE", fake)
    assert upward_imports() == ["sktune/graph/bad.py:2 (graph) imports sktune.tuning.loop (tuning)"]


def test_the_tuner_reaches_the_worker_only_through_the_pipe() -> None:
    """The two processes' code meets at ``pipe/``: tuning/ imports nothing of worker/ but its
    process entry point, and worker/ nothing of tuning/ (the layer order already says so)."""
    reached = set()
    for path in (SKTUNE / "tuning").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sktune.worker"):
                reached.add(node.module)
    assert reached == {"sktune.worker.serve"}


def test_the_commands_that_never_compile_import_no_compiler() -> None:
    """Importing ``torch._inductor`` (and with it Dynamo) costs about 1.5 s: export, report
    and the main process of a run import the backends but never compile or capture, so the
    backends import the compiler only where they compile (backends/fallback_key.py)."""
    import subprocess
    import sys

    modules = ("sktune.backends.inductor", "sktune.backends.npu", "sktune.tuning.loop", "sktune.tuning.summary",
               "sktune.report.export", "sktune.report.html", "sktune.cli.app")
    code = (f"import sys\nfor m in {modules!r}: __import__(m)\n"
            "print(sorted(m for m in sys.modules if m.startswith(('torch._inductor', 'torch._dynamo'))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
