"""The packages' floors, read from the source: ``systemone`` (the protocol, no I/O) stands on
nothing of ours, ``sr_base`` (what a server process sets up: logging, workers) on ``systemone``
alone, ``sr_runtime`` on those two and never on ``sr_control``, and no module
imports itself back through others. Imports under ``if TYPE_CHECKING:`` are left out (they never
run); imports inside functions count, since they run on the first call and hide a circle."""

from __future__ import annotations

import ast
import graphlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("systemone", "sr_base", "sr_control", "sr_runtime")
# What each package may import of ours, besides itself.
FLOORS = {
    "systemone": set(),
    "sr_base": {"systemone"},
    "sr_control": {"systemone", "sr_base"},
    "sr_runtime": {"systemone", "sr_base"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def _under_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, but not the bodies of ``if TYPE_CHECKING:`` blocks (their ``else`` runs)."""
    for child in ast.iter_child_nodes(tree):
        yield child
        if isinstance(child, ast.If) and _under_type_checking(child):
            for other in child.orelse:
                yield other
                yield from _nodes(other)
        else:
            yield from _nodes(child)


def _imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """Every module of ours that ``module`` runs an import of (a name imported from a package
    that is a submodule of it counts as that submodule)."""
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield sub if sub in MODULES else target


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        ours = {t for t in _imports(tree, module, path.name == "__init__.py") if t.split(".")[0] in PACKAGES}
        graph[module] = {t for t in ours if t in MODULES and t != module}
    return graph


GRAPH = _graph()


def test_the_walk_finds_every_package_and_its_imports() -> None:
    # A walk that read nothing would pass the tests below: hold it to what is known to be there.
    assert {m.split(".")[0] for m in MODULES} == set(PACKAGES)
    assert "systemone.replies" in GRAPH["sr_runtime.request"]
    assert "systemone" in {t.split(".")[0] for t in GRAPH["sr_control.extproc.forward"]}


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_its_floors(package: str) -> None:
    allowed = FLOORS[package] | {package}
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if module.split(".")[0] == package
        for target in targets
        if target.split(".")[0] not in allowed
    )
    assert wrong == []


def test_no_module_imports_itself_back() -> None:
    # A package's __init__ is an ordinary node: `from pkg import name` is an edge to it.
    try:
        tuple(graphlib.TopologicalSorter(GRAPH).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"an import circle: {' -> '.join(exc.args[1])}")
