"""Reading a config is one pipeline that a reader follows top to bottom: source text -> marked
document -> migrated to the current format -> validated model. No module of it imports a module
that imports it back, not even from inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import sr_control.config.load

CONFIG = Path(sr_control.config.load.__file__).parent


def _imports(path: Path) -> set[str]:
    """The sr_control.config modules ``path`` imports, anywhere in the file."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "sr_control.config":
                out |= {a.name for a in node.names}
            elif node.module.startswith("sr_control.config."):
                out.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[2] for a in node.names if a.name.startswith("sr_control.config.")}
    return out


def test_no_module_of_the_config_package_imports_itself_back() -> None:
    graph = {p.stem: _imports(p) - {p.stem} for p in CONFIG.glob("*.py")}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join(path + (module,))}"
        if module in done:
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, path + (module,))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())


def test_loading_uses_the_stages_in_order_and_migrating_a_file_uses_loading() -> None:
    assert {"marked", "source"} <= _imports(CONFIG / "load.py")
    assert "migrate" not in _imports(CONFIG / "load.py")
    assert "load" in _imports(CONFIG / "migrate.py")
    assert "load" not in _imports(CONFIG / "source.py") and "load" not in _imports(CONFIG / "marked.py")
