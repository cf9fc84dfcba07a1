"""Each transition's guard (the WHERE clause of its statement) says the same on both dialects.

The two `queries.sql` files are written by hand, once per database; a guard column added to
one and forgotten in the other would make a race lose on one store only. Spelling differs
(`:token` and `%(token)s`, `json_extract(b.value, '$.token')` and `b.token`, table aliases,
casts), so what is compared is what a guard is made of: the run columns it reads, the string
values it compares them with, the parameters it names, and how it compares a time with the
database's clock (`lease_expires >= {now}` is a live lease, `lease_expires < {now}` a stale
one: the same column, opposite meanings).

Every write made under a lease is also checked, on each dialect, to refuse a lease that has
expired by the database's clock (SPEC §15), reaper or no reaper.
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
    "fence_probe",
    "fence_call",
    "requeue_count",
    "request",
    "available_at",
    "termination_reason",
    "wait_deadline",
    "queue",
    "deadline_token",
}
# A clause ends where a statement's next part begins: a row lock (PostgreSQL's statements
# that end a run lock its parent first, in a CTE before the UPDATE) is one.
_WHERE = re.compile(
    r"\bWHERE\b(.*?)(?=\bRETURNING\b|\bORDER BY\b|\bLIMIT\b|\bFOR UPDATE\b|$)", re.S | re.I
)
_PARAM = re.compile(r":(\w+)|%\((\w+)\)s|'\$\.(\w+)'|\bb\.(\w+)")
_CAST = re.compile(r"::\w+(\[\])?")
_LITERAL = re.compile(r"'([a-z_]+)'")
_WORD = re.compile(r"\b([a-z_]+)\b")
# A time compared with the database's clock: `{now}` on both dialects; PostgreSQL's claim
# reads the statement's start instead and its capacity statements read the clock once as `t`.
# (Not `=`: that is an assignment a clause's end may take in, never a guard.)
_TIMED = re.compile(r"\b(\w+)\s*(<=|>=|<>|<|>)\s*(?:\{now\}|statement_timestamp\(\)|\bt\.now\b)")
# Names that are parameters on one dialect and columns of the batch record on the other.
_BATCH_FIELDS = {"owner", "token", "fence"}
# Parameters one dialect's statement has on purpose: PostgreSQL's step commits on its own,
# and its nonce tells a retry of a step that committed unseen (the lease guard is the same).
_ONE_DIALECT = {"record_step": {"nonce"}}


def _guard(sql: str) -> tuple[set[str], set[str], set[str], set[tuple[str, str]]]:
    """(columns, string values, parameters, comparisons with the clock) of every WHERE
    clause of one statement."""
    clauses = _CAST.sub("", " ".join(m.group(1) for m in _WHERE.finditer(sql)))
    timed = {(m.group(1), m.group(2)) for m in _TIMED.finditer(clauses)}
    params = {next(g for g in m.groups() if g) for m in _PARAM.finditer(clauses)}
    without_params = _PARAM.sub(" ", clauses)
    literals = set(_LITERAL.findall(without_params)) - {"running_", "queued_"}
    words = set(_WORD.findall(_LITERAL.sub(" ", without_params)))
    columns = (words & GUARD_COLUMNS) - params
    return columns, literals, params - {"value"}, timed


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


# PostgreSQL's functions that a statement calls in its guard, by name: their body (the one
# query each returns) stands in for the call, so that what they read is compared too.
_FUNCTION = re.compile(r"CREATE FUNCTION (\w+)\(\).*?RETURN ARRAY\((.*?)\);\s*END", re.S)


def _postgres(name: str) -> str:
    sql = _sql.queries("postgres")[name]
    for _, script in _sql.migrations("postgres"):
        for function, body in _FUNCTION.findall(script):
            sql = sql.replace(f"{function}()", f"({body})")
    return sql


@pytest.mark.parametrize("name", _transitions())
def test_a_transitions_guard_is_the_same_on_both_dialects(name: str) -> None:
    lite = _guard(_sql.queries("sqlite")[name])
    pg = _guard(_postgres(name))
    assert lite[0] == pg[0], f"{name}: guard columns differ"
    assert lite[1] == pg[1], f"{name}: compared values differ"
    extra = _ONE_DIALECT.get(name, set())
    assert lite[2] - _BATCH_FIELDS == pg[2] - _BATCH_FIELDS - extra, (
        f"{name}: guard parameters differ"
    )
    assert lite[3] == pg[3], f"{name}: comparisons with the clock differ"


def test_a_function_of_the_guard_is_read_in() -> None:
    """The claim reads the full keys through `tenure_full_keys()`: without its body, the
    guard would miss the running runs it counts (and differ from SQLite's)."""
    called = _sql.queries("postgres")["claim"]
    assert "tenure_full_keys()" in called
    assert _guard(_postgres("claim"))[1] - _guard(called)[1] == {"running"}


def test_the_comparison_sees_a_missing_guard() -> None:
    """The check can fail: drop one condition from a guard and it differs."""
    sql = _sql.queries("postgres")["requeue_stale"]
    weakened = sql.replace("AND pending_effect = %(fence)s", "")
    assert weakened != sql
    assert _guard(weakened) != _guard(_sql.queries("sqlite")["requeue_stale"])
    # A stale lease taken for a live one: the same column, the comparison turned round.
    sql = _sql.queries("postgres")["mark_fence"]
    turned = sql.replace("lease_expires >= {now}", "lease_expires < {now}")
    assert turned != sql
    assert _guard(turned) != _guard(_sql.queries("sqlite")["mark_fence"])


# Every write a segment or its worker makes under a lease (owner and token named by the
# caller), and the reads by owner (which change nothing).
OWNER_WRITES = {
    "record_step",
    "renew_leases",
    "mark_fence",
    "clear_fence",
    "mark_step_deadline",
    "requeue",
    "requeue_in_doubt",
    "hand_back",
    "release",
    "settle_batch",
    "suspend",
    "park",
    "wait_for_children",
    "publish_delta",
    "reserve_budget",
}
OWNER_READS = {"held_by", "held"}
# A claim's own undoing of a run it took beyond its key's limit (SPEC §22), in the claim's
# transaction, on a row that transaction holds: a lease that ran out while the claim waited
# for its keys' locks must not keep the run taken.
OWNER_SAME_TRANSACTION = {"unclaim"}
_OWNER = re.compile(
    r"\bclaimed_by\s*=\s*"
    r"(?::owner\b|%\(owner\)s|json_extract\(b\.value, '\$\.owner'\)|[bd]\.owner\b)"
)
_CLAUSE = re.compile(r"\b(SET|WHERE|ON)\b", re.I)
_LIVE = re.compile(r"\blease_expires\s*>=\s*\{now\}")


# SQLite settles each run of a batch on its own (`settle_one`, `settle_batch`'s guard).
SQLITE_ONLY_WRITES = {"settle_one"}
# PostgreSQL settles a batch that may hold a child with its parents locked first.
POSTGRES_ONLY_WRITES = {"settle_batch_parents_first"}


def _owner_guards(sql: str) -> int:
    """How many conditions of a statement compare `claimed_by` with the owner its caller
    names: in a WHERE or a join's ON, not a claim's SET."""
    found = 0
    for match in _OWNER.finditer(sql):
        clauses = _CLAUSE.findall(sql[: match.start()])
        found += bool(clauses) and clauses[-1].upper() != "SET"
    return found


def _unexpired(sql: str) -> bool:
    """Each owner's guard of the statement comes with the live-lease condition."""
    return len(_LIVE.findall(sql)) == _owner_guards(sql)


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_every_write_under_a_lease_refuses_it_once_expired(dialect: str) -> None:
    queries = _sql.queries(dialect)
    by_owner = {name for name, sql in queries.items() if _owner_guards(sql)}
    writes = OWNER_WRITES | (SQLITE_ONLY_WRITES if dialect == "sqlite" else POSTGRES_ONLY_WRITES)
    # A statement guarded by an owner that is not listed here must be looked at (and listed).
    assert by_owner == writes | OWNER_READS | OWNER_SAME_TRANSACTION
    unguarded = sorted(name for name in writes if not _unexpired(queries[name]))
    assert unguarded == [], f"writes that a lease past its time still passes: {unguarded}"


def test_the_check_sees_a_write_without_the_expiry() -> None:
    sql = _sql.queries("sqlite")["settle_batch"]
    weakened = sql.replace("AND lease_expires >= {now}", "")
    assert weakened != sql and _unexpired(sql) and not _unexpired(weakened)
    sql = _sql.queries("postgres")["record_step"]
    once = sql.replace("AND lease_expires >= {now}", "", 1)  # the step's UPDATE, not its replay
    assert once != sql and _unexpired(sql) and not _unexpired(once)


def test_sqlites_settle_of_one_run_has_the_batchs_guard() -> None:
    """SQLite settles each run of a batch with `settle_one` (its values bound, no JSON): the
    same guard as `settle_batch`, which the other dialect's is compared with above."""
    queries = _sql.queries("sqlite")
    one, batch = _guard(queries["settle_one"]), _guard(queries["settle_batch"])
    assert one[0] == batch[0] and one[1] == batch[1] and one[3] == batch[3]
    assert one[2] == batch[2] | _BATCH_FIELDS | {"id"}


def test_postgres_settle_with_parents_first_has_the_settles_guard() -> None:
    """A batch that may hold a child is settled by `settle_batch_parents_first`: the guard of
    `settle_batch` (compared with SQLite's above), and the runs' ids to lock parents by."""
    first, batch = (
        _guard(_postgres("settle_batch_parents_first")),
        _guard(_postgres("settle_batch")),
    )
    assert first[0] == batch[0] and first[1] == batch[1] and first[3] == batch[3]
    assert first[2] == batch[2] | {"ids"}
