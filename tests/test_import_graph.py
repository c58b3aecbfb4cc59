"""No import circles (the style rule), and every public module imports first.

The graph counts what an import statement runs: ``from a.b.c import x`` runs the packages
``a`` and ``a.b`` (their ``__init__``) before ``a.b.c``, unless the importing module is
inside them, where they are already being initialised. That is how ``kbtpsim.errors``
(importing ``kbtpsim.wire.constants``, so ``kbtpsim/wire/__init__.py``, which imported
``kbtpsim.errors`` back) failed when it was the first import of a program.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _modules() -> dict[str, Path]:
    out = {}
    for path in (ROOT / "kbtpsim").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imported(node: ast.stmt, mods: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                for a in node.names]
    return []


def import_graph() -> nx.DiGraph:
    """Module -> what its module-level imports run (TYPE_CHECKING blocks left out)."""
    mods = _modules()
    graph = nx.DiGraph()
    for name, path in mods.items():
        graph.add_node(name)
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            for target in _imported(node, mods):
                while target and target not in mods:  # an attribute of a module
                    target = target.rpartition(".")[0]
                if not target.startswith("kbtpsim") or target == name:
                    continue
                graph.add_edge(name, target)
                parts = target.split(".")
                for i in range(1, len(parts)):
                    package = ".".join(parts[:i])
                    if package != name and not name.startswith(package + "."):
                        graph.add_edge(name, package)
    return graph


def test_no_import_circles() -> None:
    graph = import_graph()
    assert len(graph) > 150  # the walk found the package
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert circles == []


def test_an_import_runs_the_packages_above_it() -> None:
    graph = import_graph()
    # kbtpsim.errors imports kbtpsim.wire.errors, so runs kbtpsim/wire/__init__.py first
    assert graph.has_edge("kbtpsim.errors", "kbtpsim.wire")
    # inside the package, the package is already being initialised: no edge
    assert not graph.has_edge("kbtpsim.wire.codec", "kbtpsim.wire")


@pytest.mark.parametrize("module", ["kbtpsim.errors", "kbtpsim.run.oracle", "kbtpsim.wire",
                                    "kbtpsim.target", "kbtpsim.nic", "kbtpsim.chains"])
def test_imports_first(module: str) -> None:
    proc = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
