"""spark_reader's modules import each other without cycles, counting the imports inside
functions too (a lazy import still ties two modules together), and `import spark_reader`
loads neither asyncio nor the broker (DESIGN.md, package table)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "spark_reader"


def imported_siblings(path: Path) -> set[str]:
    """The spark_reader modules that `path` imports anywhere in its body."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                base = node.module
            elif node.level == 0 and node.module and node.module.startswith("spark_reader."):
                base = node.module.removeprefix("spark_reader.")
            else:
                continue
            if base is None:  # from . import a, b
                names.update(alias.name for alias in node.names)
            else:
                names.add(base.split(".")[0])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[1] for a in node.names if a.name.startswith("spark_reader."))
    return names


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for other in sorted(graph.get(module, ())):
            if state.get(other) == 1:
                return path[path.index(other):] + [other]
            if other not in state and (cycle := visit(other)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_spark_reader_modules_import_each_other_without_cycles() -> None:
    modules = {path.stem: path for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    graph = {name: imported_siblings(path) & modules.keys() for name, path in modules.items()}
    assert graph["stream"] >= {"tasks"} and "source" not in graph["stream"]
    assert find_cycle(graph) is None


def test_importing_spark_reader_loads_no_asyncio_and_no_broker() -> None:
    code = (
        "import sys, spark_reader, spark_reader.source, spark_reader.stream, spark_reader.read;"
        "print(sorted(m for m in sys.modules if m == 'asyncio' or m.startswith('diskless')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent)
    assert out.stdout.strip() == "[]"
