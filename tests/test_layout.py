"""The house rules of the source tree, checked: engine/ is a library that never imports
daemon/, modules and classes stay small enough to read, every package says what it is."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .harness import REPO

MAX_MODULE_LINES = 450
MAX_CLASS_LINES = 350
SOURCES = sorted(p for top in ("engine", "daemon") for p in (REPO / top).rglob("*.py"))


def test_the_engine_never_imports_the_daemon() -> None:
    for path in (REPO / "engine").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                assert "daemon" not in name.split("."), f"{path}: imports {name}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_modules_and_classes_stay_small(path: Path) -> None:
    text = path.read_text()
    lines = len(text.splitlines())
    assert lines <= MAX_MODULE_LINES, f"{lines} lines"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            assert size <= MAX_CLASS_LINES, f"class {node.name}: {size} lines"


def test_every_package_says_what_it_holds() -> None:
    for top in ("engine", "daemon", "tools"):
        for init in (REPO / top).rglob("__init__.py"):
            assert ast.get_docstring(ast.parse(init.read_text())), f"{init}: no docstring"
