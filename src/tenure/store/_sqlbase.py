"""The plumbing every SQL dialect shares: one write transaction, guarded statements and the
events they append.

A dialect supplies its named queries (`store/sql/<dialect>/queries.sql`), a way to run a
function inside one write transaction, reads, and the conversion of its time values. Each
transition is one guarded UPDATE that RETURNs `(last_sequence, attempt, lease_token)` when
it applied; the events that record it are inserted in the same transaction at the
sequences it reserved (`n` of them, named by the statement's caller).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from operator import itemgetter
from typing import Any, Protocol, TypeVar

from tenure._json import dumps
from tenure._types import (
    EventKind,
)
from tenure.store._base import Claimed, Lease, NewEvent
from tenure.store._records import REPLAYED_KINDS, replay_form

T = TypeVar("T")
# id, lease_token, attempt, request, requeue_count, last_sequence, decision, fence_call; a
# claim's rows go on with concurrency_key and priority.
ClaimRow = tuple[Any, ...]
# In a claim's row (`_claim_returning`), past its first eight columns: whether it has a parent.
CLAIM_HAS_PARENT = 4


class Cursor(Protocol):
    """What sqlite3 and psycopg cursors have in common, as far as the store uses them."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: str, params: Any = ..., /) -> Any: ...

    def executemany(self, sql: str, params: Any, /) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


_PARAM = re.compile(r":(\w+)")


@lru_cache(maxsize=512)
def repeated_row(sql: str, rows: int) -> tuple[str, tuple[str, ...]]:
    """A statement of one row of `VALUES (...)`, written for `rows` rows with positional
    parameters, and the names of one row's parameters in their order: bind
    `[row[name] for row in rows for name in names]`."""
    start = sql.index("VALUES") + len("VALUES")
    opening = sql.index("(", start)
    depth = 0
    for end in range(opening, len(sql)):  # to the parenthesis that closes the row
        depth += {"(": 1, ")": -1}.get(sql[end], 0)
        if depth == 0:
            break
    row = sql[opening : end + 1]
    names = tuple(_PARAM.findall(row))
    positional = _PARAM.sub("?", row)
    return sql[:opening] + ", ".join([positional] * rows) + sql[end + 1 :], names


@lru_cache(maxsize=64)
def numbered(sql: str) -> tuple[str, Callable[[Mapping[str, Any]], tuple[Any, ...]]]:
    """`sql` with its named parameters numbered (`:name` becomes `?N`, one number per name,
    in the order the names first appear), and a function that picks their values out of a
    mapping in that order. sqlite3 binds a named parameter by making a string of its name,
    hashing it and looking it up, with the GIL released and taken again around each name;
    values given in order bind without any of that."""
    names: list[str] = []

    def number(found: re.Match[str]) -> str:
        if found.group(1) not in names:
            names.append(found.group(1))
        return f"?{names.index(found.group(1)) + 1}"

    text = _PARAM.sub(number, sql)
    if not names:
        return text, lambda params: ()
    if len(names) == 1:
        (name,) = names
        return text, lambda params: (params[name],)
    return text, itemgetter(*names)


@lru_cache(maxsize=64)
def numbered_nulls(
    sql: str, nulls: tuple[str, ...]
) -> tuple[str, Callable[[Mapping[str, Any]], tuple[Any, ...]]]:
    """`numbered(sql)` with each parameter named in `nulls` written as the literal NULL: the
    statement for values of which those are None. sqlite3 binds a None only after looking
    for an adapter for it, in vain, at every execution; a NULL written in the statement
    costs nothing once it is prepared. A process meets at most one statement per subset
    of the names a caller passes."""
    return numbered(_PARAM.sub(lambda found: "NULL" if found[1] in nulls else found[0], sql))


def in_powers_of_two(items: Sequence[T], most: int) -> Iterator[Sequence[T]]:
    """`items` in consecutive slices whose lengths are powers of two, none longer than
    `most` (a power of two): a statement written for each length (`repeated_row`) is
    prepared once per length, and a process meets at most log2(most) + 1 of them, not one
    per batch size (SQLite compiles a statement's triggers into it: a prepare costs as much
    as many executions)."""
    start = 0
    while start < len(items):
        size = min(most, 1 << ((len(items) - start).bit_length() - 1))
        yield items[start : start + size]
        start += size


def _no_op() -> None:
    return None


def lifecycle(kind: EventKind, **payload: Any) -> NewEvent:
    return NewEvent(kind, payload)


def _event_rows(
    rows: list[dict[str, Any]],
    run_id: str,
    last: int,
    attempt: int,
    token: int,
    events: Sequence[NewEvent],
) -> list[int]:
    """Add the rows of `events`, which end at sequence `last`, to `rows`; their sequences."""
    first = last - len(events) + 1
    for i, e in enumerate(events):
        text = dumps(e.payload) if e.text is None else e.text
        rows.append(
            {
                "run_id": run_id,
                "sequence": first + i,
                "attempt": attempt,
                "lease_token": token,
                "kind": str(e.kind),
                "payload": text,
                "replay": replay_form(e.kind, text) if e.kind in REPLAYED_KINDS else None,
            }
        )
    return list(range(first, last + 1))


class SQLBase(ABC):
    url: str
    _q: dict[str, str]

    @abstractmethod
    def _write(self, fn: Callable[[Cursor], T]) -> T:
        """Run `fn` in one write transaction; retried whole on a transient failure."""

    @abstractmethod
    def _read(self, sql: str, params: dict[str, Any]) -> list[Any]: ...

    @abstractmethod
    def _time(self, value: Any) -> datetime | None:
        """A time value of this dialect as an aware UTC datetime."""

    @abstractmethod
    def _queues_param(self, queues: Sequence[str] | None) -> Any: ...

    @abstractmethod
    def _time_param(self, value: datetime) -> Any:
        """An aware datetime as this dialect's time parameter."""

    def _lock_keys(self, cur: Cursor, keys: Sequence[str]) -> None:
        """Before a claim counts the running runs of `keys` again: wait for every other
        claim of them to end (a store whose writers take turns has nothing to wait for)."""
        return None

    @abstractmethod
    def migrate(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    def subscribe(self, wake: Callable[[], None]) -> Callable[[], None]:
        return _no_op

    def now(self) -> datetime:
        value = self._time(self._read(self._q["now"], {})[0][0])
        assert value is not None
        return value

    def _append(
        self,
        cur: Cursor,
        run_id: str,
        last: int,
        attempt: int,
        token: int,
        events: Sequence[NewEvent],
    ) -> list[int]:
        rows: list[dict[str, Any]] = []
        sequences = _event_rows(rows, run_id, last, attempt, token, events)
        self._insert_events(cur, rows)
        return sequences

    def _insert_events(self, cur: Cursor, rows: list[dict[str, Any]]) -> None:
        """The rows `_event_rows` made, in one statement."""
        if rows:
            cur.executemany(self._q["insert_event"], rows)

    def _guarded(
        self,
        name: str,
        params: dict[str, Any],
        run_id: str,
        events: Sequence[NewEvent],
        lease: Lease | None = None,
    ) -> list[int] | None:
        """One guarded UPDATE that RETURNs (last_sequence, attempt, lease_token), then its
        events. Events of an owner's write carry the owner's lease, not the row's: if a guard
        ever let a stale owner through, the audit would see the stale token."""

        return self._write(lambda cur: self._guarded_in(cur, name, params, run_id, events, lease))

    def _guarded_in(
        self,
        cur: Cursor,
        name: str,
        params: dict[str, Any],
        run_id: str,
        events: Sequence[NewEvent],
        lease: Lease | None = None,
        rows: list[dict[str, Any]] | None = None,
    ) -> list[int] | None:
        """The guarded statement, then its events: inserted now, or added to `rows` for
        the caller to insert with the rest of its transaction's events."""
        # Every statement that appends events reserves their sequences itself: `n` of them.
        row = cur.execute(self._q[name], {**params, "n": len(events)}).fetchone()
        if row is None:
            return None
        attempt, token = (lease.attempt, lease.token) if lease else (row[1], row[2])
        if rows is None:
            return self._append(cur, run_id, row[0], attempt, token, events)
        return _event_rows(rows, run_id, row[0], attempt, token, events)

    @staticmethod
    def _lease_params(lease: Lease) -> dict[str, Any]:
        return {"id": lease.run_id, "owner": lease.owner, "token": lease.token}

    def _claimed(
        self,
        cur: Cursor,
        rows: Sequence[ClaimRow],
        owner: str,
        before: Sequence[NewEvent] = (),
        events: list[dict[str, Any]] | None = None,
    ) -> list[Claimed]:
        """The claims of `rows`, each with its `claimed` event (inserted now, or added to
        `events` for the caller to insert)."""
        out = []
        pending: list[dict[str, Any]] = [] if events is None else events
        worker = dumps(owner)  # every claimed event's text is written here: one encoding
        for run_id, token, attempt, request, requeue_count, last, decision, fence, *rest in rows:
            token, attempt = int(token), int(attempt)
            payload = {"worker": owner, "lease_token": token, "attempt": attempt}
            text = f'{{"worker":{worker},"lease_token":{token},"attempt":{attempt}}}'
            event = NewEvent(EventKind.CLAIMED, payload, text)
            _event_rows(pending, run_id, last, attempt, token, [*before, event])
            # The claims' last column says whether the run has a parent (`_claim_returning`).
            has_parent = bool(rest[CLAIM_HAS_PARENT]) if len(rest) > CLAIM_HAS_PARENT else True
            lease = Lease(run_id, owner, token, attempt, has_parent)
            out.append(Claimed(lease, request, requeue_count, decision, fence, last))
        if events is None:
            self._insert_events(cur, pending)
        return out
