"""The command line sits on top: it may import the dashboard and the demo, never the other way
round (what both need, the command errors and Context, lives in `tenure._command`)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import tenure

PACKAGE = Path(tenure.__file__).parent


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize(
    ("package", "never"),
    [("web", "tenure.cli"), ("demo", "tenure.cli"), ("", "tenure.cli")],
    ids=["web", "demo", "command"],
)
def test_lower_layers_never_import_the_command_line(package: str, never: str) -> None:
    files = sorted((PACKAGE / package).glob("*.py")) if package else [PACKAGE / "_command.py"]
    assert files
    for path in files:
        bad = {m for m in _imports(path) if m == never or m.startswith(never + ".")}
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


@pytest.mark.parametrize("module", ["tenure.web", "tenure.demo", "tenure._command"])
def test_importing_a_lower_layer_loads_no_command_line(module: str) -> None:
    code = (
        f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith('tenure.cli')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# Each of these took a tenth of a second or more of every command's start (`tenure --help`
# waited 1-2 s): they are imported where they are used.
HEAVY_AT_START = ("pydantic", "jsonschema", "asyncio", "rich.progress", "psycopg", "openai")


@pytest.mark.parametrize("module", ["tenure", "tenure.cli"])
def test_starting_the_command_line_imports_nothing_heavy(module: str) -> None:
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = done.stdout.split()
    assert "tenure.runtime" in loaded
    heavy = [m for m in loaded if m.partition(".")[0] in HEAVY_AT_START or m in HEAVY_AT_START]
    assert not heavy, heavy
