"""How values read to a person: durations, and database URLs without their password."""

from __future__ import annotations

import pytest

from tenure._text import span, without_password


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/app", "postgresql://app:***@db:5432/app"),
        (
            "postgresql://app:p%40ss@db/app?sslmode=require",
            "postgresql://app:***@db/app?sslmode=require",
        ),
        (
            "postgres://app@db/app?password=s3cret&sslmode=require",
            "postgres://app@db/app?password=***&sslmode=require",
        ),
        ("host=db dbname=app user=app password=s3cret", "host=db dbname=app user=app password=***"),
        ("host=db password = 'se cret' dbname=app", "host=db password = *** dbname=app"),
        ("postgresql://app@db/app", "postgresql://app@db/app"),
        ("sqlite:///var/lib/tenure.db", "sqlite:///var/lib/tenure.db"),
    ],
)
def test_a_database_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert without_password(url) == shown
    assert "s3cret" not in without_password(url) and "cret'" not in without_password(url)


def test_a_span_reads_in_its_two_largest_units() -> None:
    assert [span(s) for s in (45, 200, 7500, 273600)] == ["45s", "3m 20s", "2h 5m", "3d 4h"]
