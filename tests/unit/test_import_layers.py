"""Import layering that keeps the exception tree, the classifier and the providers apart.

`_errors` knows only the enumerations, so `_classify` can import it without a cycle; a
provider knows the provider contract (`providers._base`), never the agent's tool internals.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "tenure"


def tenure_imports(module: str) -> set[str]:
    tree = ast.parse((SRC / f"{module}.py").read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tenure"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tenure"))
    return found


def test_the_exception_tree_imports_only_the_enumerations() -> None:
    assert tenure_imports("_errors") == {"tenure._types"}


def test_the_classifier_is_not_imported_back_by_the_exception_tree() -> None:
    assert "tenure._errors" in tenure_imports("_classify")
    assert "tenure._classify" not in tenure_imports("_errors")


@pytest.mark.parametrize("provider", ["openai", "anthropic", "_http", "_base"])
def test_providers_do_not_reach_into_the_agent(provider: str) -> None:
    imported = tenure_imports(f"providers/{provider}")
    assert not {m for m in imported if m.startswith("tenure.agent")}
