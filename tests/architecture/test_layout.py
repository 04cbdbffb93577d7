"""The house rules a newcomer relies on: small files and functions, no private name borrowed.

The layer contract itself is checked by ``lint-imports`` (``[tool.importlinter]`` in
pyproject.toml), which the README's test command runs.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*ROOT.joinpath("app").rglob("*.py"), *ROOT.joinpath("worker").rglob("*.py")])
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def test_sources_are_found() -> None:
    assert len(SOURCES) > 50


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_file_is_small(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_FILE_LINES, f"{lines} lines: split it"


def test_no_function_is_longer_than_a_screen() -> None:
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1})"
        for path in SOURCES
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, long


def test_no_private_name_is_imported_across_modules() -> None:
    borrowed = [
        f"{path.relative_to(ROOT)}:{node.lineno} {alias.name} from {node.module}"
        for path in SOURCES
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("app", "worker"))
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert not borrowed, borrowed


def test_the_layout_rule_catches_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))
    source = tmp_path / "long.py"
    source.write_text(f"def f() -> None:\n{body}\n", encoding="utf-8")
    (node,) = _tree(source).body
    assert isinstance(node, ast.FunctionDef)
    assert node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
