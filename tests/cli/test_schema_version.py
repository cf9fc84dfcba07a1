"""The real executable refuses a database whose schema is newer than it knows: one line, exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..store.test_schema_version import bump_schema, known
from .conftest import Cli, one_line_error


@pytest.mark.parametrize(
    "command",
    [["init"], ["runs"], ["enqueue", "--prompt", "p"], ["worker", "--burst"], ["reap"]],
)
def test_a_newer_schema_is_refused_by_every_command(
    db_url: str, tmp_path: Path, command: list[str]
) -> None:
    cli = Cli(tmp_path, db_url)
    assert cli("init").code == 0
    newer = known(db_url) + 1
    bump_schema(db_url, newer)
    result = cli(*command)
    assert result.code == 1, result.err
    assert one_line_error(result) == (
        f"tenure: database schema is version {newer}; "
        f"this tenure knows up to {known(db_url)}: upgrade tenure"
    )
    assert cli("runs", "--json").code == 1  # still refused: the refusal changed nothing
