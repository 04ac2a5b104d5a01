"""The project's import graph: no two modules import each other (directly or around a cycle),
and the arrows between packages point only down the floors DESIGN.md draws.

The graph is read from the source with `ast`, so it counts every import statement, including
those under `if TYPE_CHECKING:` and inside functions: a cycle hidden from the interpreter is
still two modules that cannot be understood one without the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("diskless", "hot_tier", "cold_tier", "metadata", "spark_reader")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module `name` denotes: itself, or the nearest enclosing module."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = module.split(".")
                drop = node.level - 1 if is_package else node.level
                base = ".".join(base_parts[: len(base_parts) - drop])
                prefix = f"{base}.{node.module}" if node.module else base
            else:
                prefix = node.module or ""
            # `from pkg import name` imports pkg.name when that is a module, else pkg itself.
            targets = [f"{prefix}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            resolved = _resolve(target, modules)
            if resolved is not None and resolved != module:
                found.add(resolved)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {module: _imports(module, path, modules) for module, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_the_graph_is_read_from_every_package() -> None:
    graph = _graph()
    assert {module.split(".")[0] for module in graph} == set(PACKAGES)
    # A known arrow, so a parser that finds nothing cannot pass the tests below.
    assert "hot_tier.records.header" in graph["diskless.broker.partition.leader"]
    assert "diskless.broker.partition.leader" in graph["diskless.broker.partition"]


def test_no_module_imports_itself_around_a_cycle() -> None:
    assert _cycles(_graph()) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


# What each floor may import, besides itself (DESIGN.md, "Layout").
ALLOWED = {
    "hot_tier": set(),
    "metadata": set(),
    "cold_tier": {"hot_tier", "metadata"},
    "spark_reader": {"hot_tier", "cold_tier", "metadata", "diskless.wire"},
    "diskless.wire": {"hot_tier"},
    "diskless.client": {"hot_tier", "diskless.wire"},
    "diskless.broker": {"hot_tier", "cold_tier", "metadata", "diskless.wire"},
    "diskless.cli": {"hot_tier", "cold_tier", "metadata", "diskless.wire", "diskless.client", "diskless.broker"},
}


def _floor(module: str) -> str:
    top = module.split(".")[0]
    if top == "diskless":
        parts = module.split(".")
        return ".".join(parts[:2]) if len(parts) > 1 else "diskless"
    return top


def test_arrows_point_only_down_the_floors() -> None:
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in _graph().items()
        for target in targets
        if _floor(target) != _floor(module)
        and _floor(module) in ALLOWED
        and not any(_floor(target) == allowed or _floor(target).startswith(allowed + ".") for allowed in ALLOWED[_floor(module)])
    )
    assert wrong == []
