"""Each transition's guard (the WHERE clause of its statement) says the same on both dialects.

The two `queries.sql` files are written by hand, once per database; a guard column added to
one and forgotten in the other would make a race lose on one store only. Spelling differs
(`:token` and `%(token)s`, `json_extract(b.value, '$.token')` and `b.token`, table aliases,
casts), so what is compared is what a guard is made of: the run columns it reads, the string
values it compares them with, and the parameters it names.
"""

from __future__ import annotations

import re

import pytest

from tenure.store import _sql

# The columns of tenure_runs a guard may read.
GUARD_COLUMNS = {
    "id",
    "status",
    "claimed_by",
    "lease_token",
    "lease_expires",
    "pending_effect",
    "requeue_count",
    "request",
    "available_at",
    "termination_reason",
    "wait_deadline",
    "queue",
}
_WHERE = re.compile(r"\bWHERE\b(.*?)(?=\bRETURNING\b|\bORDER BY\b|\bLIMIT\b|$)", re.S | re.I)
_PARAM = re.compile(r":(\w+)|%\((\w+)\)s|'\$\.(\w+)'|\bb\.(\w+)")
_CAST = re.compile(r"::\w+(\[\])?")
_LITERAL = re.compile(r"'([a-z_]+)'")
_WORD = re.compile(r"\b([a-z_]+)\b")
# Names that are parameters on one dialect and columns of the batch record on the other.
_BATCH_FIELDS = {"owner", "token", "fence"}
# Parameters one dialect's statement has on purpose: PostgreSQL's step commits on its own,
# and its nonce tells a retry of a step that committed unseen (the lease guard is the same).
_ONE_DIALECT = {"record_step": {"nonce"}}


def _guard(sql: str) -> tuple[set[str], set[str], set[str]]:
    """(columns, string values, parameters) of every WHERE clause of one statement."""
    clauses = _CAST.sub("", " ".join(m.group(1) for m in _WHERE.finditer(sql)))
    params = {next(g for g in m.groups() if g) for m in _PARAM.finditer(clauses)}
    without_params = _PARAM.sub(" ", clauses)
    literals = set(_LITERAL.findall(without_params)) - {"running_", "queued_"}
    words = set(_WORD.findall(_LITERAL.sub(" ", without_params)))
    columns = (words & GUARD_COLUMNS) - params
    return columns, literals, params - {"value"}


def _transitions() -> list[str]:
    sqlite, postgres = _sql.queries("sqlite"), _sql.queries("postgres")
    return sorted(
        name
        for name in set(sqlite) & set(postgres)
        if re.match(r"\s*(UPDATE|WITH|DELETE)", sqlite[name], re.I)
    )


def test_there_are_transitions_to_compare() -> None:
    names = _transitions()
    for expected in ("claim", "record_step", "mark_fence", "settle_batch", "requeue_stale"):
        assert expected in names


@pytest.mark.parametrize("name", _transitions())
def test_a_transitions_guard_is_the_same_on_both_dialects(name: str) -> None:
    lite = _guard(_sql.queries("sqlite")[name])
    pg = _guard(_sql.queries("postgres")[name])
    assert lite[0] == pg[0], f"{name}: guard columns differ"
    assert lite[1] == pg[1], f"{name}: compared values differ"
    extra = _ONE_DIALECT.get(name, set())
    assert lite[2] - _BATCH_FIELDS == pg[2] - _BATCH_FIELDS - extra, (
        f"{name}: guard parameters differ"
    )


def test_the_comparison_sees_a_missing_guard() -> None:
    """The check can fail: drop one condition from a guard and it differs."""
    sql = _sql.queries("postgres")["requeue_stale"]
    weakened = sql.replace("AND pending_effect = %(fence)s", "")
    assert weakened != sql
    assert _guard(weakened) != _guard(_sql.queries("sqlite")["requeue_stale"])
