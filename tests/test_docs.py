"""Every Python block of README.md and docs/*.md runs as written.

The blocks of one page run in order in one namespace, in a fresh directory, as a reader
pasting them one after the other would run them. A block preceded by `<!-- not-run -->` is
shown only (it serves forever, or needs a machine the tests do not have); keep those few.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = "<!-- not-run -->"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# What the pages assume a reader has set; no block talks to a real endpoint.
ENVIRONMENT = {
    "OPENAI_API_KEY": "sk-docs-test",
    "TENURE_API_TOKEN": "a-docs-test-token-0123456789",
}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    code: str
    run: bool


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _BLOCK.finditer(text):
        before = text[: match.start()].rstrip()
        line = text.count("\n", 0, match.start()) + 2
        found.append(Block(page, line, match.group(1), not before.endswith(NOT_RUN)))
    return found


@pytest.fixture
def reader_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TENURE_DATABASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    yield tmp_path


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_python_block_runs_as_written(page: Path, reader_directory: Path) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    closers = []
    try:
        for block in blocks(page):
            if not block.run:
                compile(block.code, f"{page.name}:{block.line}", "exec")  # still valid Python
                continue
            code = compile(block.code, f"{page.name}:{block.line}", "exec")
            try:
                exec(code, namespace)
            except Exception as exc:
                raise AssertionError(f"{page.name}, block at line {block.line}: {exc!r}") from exc
            rt = namespace.get("rt")
            if rt is not None and rt not in closers:
                closers.append(rt)
        # A tool that fails (a name the page never defined) is fed to the model as an error
        # result and the run still completes: the journal shows it.
        # (A page that names a PostgreSQL server the tests do not have is not read back.)
        for rt in [r for r in closers if r.database_url.startswith("sqlite")]:  # type: ignore[attr-defined]
            for run in rt.runs(limit=1000):  # type: ignore[attr-defined]
                for event in rt.events(run.id):  # type: ignore[attr-defined]
                    error = event.payload.get("error") if event.kind == "tool" else None
                    assert not error, f"{page.name}: tool {event.payload.get('name')}: {error}"
    finally:
        for rt in closers:
            rt.close()  # type: ignore[attr-defined]


def test_not_run_blocks_stay_few() -> None:
    skipped = [b for page in PAGES for b in blocks(page) if not b.run]
    total = sum(len(blocks(page)) for page in PAGES)
    assert total >= 10
    # A server forever (web.md), a user's own project (crashtest.md), an MCP server (mcp.md).
    assert len(skipped) <= 3, [(b.page.name, b.line) for b in skipped]


def test_the_extractor_sees_a_not_run_mark() -> None:
    page = ROOT / "docs" / "web.md"
    marked = [b for b in blocks(page) if not b.run]
    assert marked and all("rt.work(" in b.code for b in marked)


# -- the docs stand on their own, and point to everything ------------------------------------


def _commands() -> list[str]:
    """The subcommands `tenure --help` lists, from the real executable's parser."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "tenure", "--help"], capture_output=True, text=True, check=True
    )
    block = done.stdout.split("COMMAND\n", 2)[-1].split("\noptions:")[0]
    return [m.group(1) for m in re.finditer(r"^    (\w+)\s", block, re.M)]


def test_the_readme_command_table_names_every_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = [line for line in readme.splitlines() if line.startswith("| `tenure ")]
    commands = _commands()
    assert len(commands) > 15, commands
    missing = [c for c in commands if not any(f"`tenure {c}" in row for row in table)]
    assert missing == [], f"README's command table lacks {missing}"


def test_the_readme_links_every_doc_and_the_examples_readme_every_example() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    unlinked = [
        p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"(docs/{p.name}" not in readme
    ]
    assert unlinked == [], f"README links none of {unlinked}"
    examples = (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
    unlisted = [
        p.name for p in sorted((ROOT / "examples").glob("*.py")) if f"`{p.name}`" not in examples
    ]
    assert unlisted == [], f"examples/README.md lists none of {unlisted}"


def test_no_page_points_to_a_specification_that_is_not_shipped() -> None:
    pages = [*PAGES, ROOT / "examples" / "README.md"]
    citing = [p.name for p in pages if re.search(r"SPEC ?§", p.read_text(encoding="utf-8"))]
    assert citing == [], f"{citing} cite sections of a specification readers do not have"
