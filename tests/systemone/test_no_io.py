"""The protocol layer does no I/O: no module of systemone reaches a file, socket,
process, clock or terminal. Reading files and URLs belongs to the CLI (``sr_control/cli``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "systemone"
MODULES = sorted(PACKAGE.rglob("*.py"))
FORBIDDEN_IMPORTS = {
    "asyncio",
    "grpc",
    "http",
    "httpx",
    "io",
    "os",
    "pathlib",
    "requests",
    "shutil",
    "socket",
    "ssl",
    "subprocess",
    "sys",
    "tempfile",
    "threading",
    "time",
    "urllib",
}
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval"}


@pytest.mark.parametrize("module", MODULES, ids=[str(m.relative_to(PACKAGE)) for m in MODULES])
def test_module_does_no_io(module: Path) -> None:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in FORBIDDEN_CALLS, f"{module.name}:{node.lineno} calls {node.func.id}()"
    assert not imported & FORBIDDEN_IMPORTS, f"{module.name} imports {sorted(imported & FORBIDDEN_IMPORTS)}"


def test_every_module_is_checked() -> None:
    assert {m.name for m in MODULES} >= {
        "reading.py",
        "writing.py",
        "listener.py",
        "client.py",
        "jsontext.py",
        "drift.py",
        "generator.py",
    }
