"""The PostgreSQL store: workers on any number of machines share one database.

Connections come from a `psycopg_pool.ConnectionPool`; every write is one transaction at
READ COMMITTED in which the guarded UPDATE takes the row lock, so a competing writer waits
and then re-checks the guard against the row as the winner left it. Claims pass over rows
locked by another claimer (`FOR UPDATE SKIP LOCKED`) instead of queueing behind them.

A transient failure (connection lost, server shutting down or restarting, serialization
failure, deadlock) retries the whole transaction with backoff, then raises
`DatabaseUnavailable`. A connection lost *during COMMIT* leaves the outcome unknown, and
re-running the transaction blindly would not tell the truth: a guarded UPDATE that had
applied would now fail its guard (a settle that won reported as lost) or, worse, pass it
again (a heartbeat appending its events twice). So each write transaction notes its
transaction id before committing, and after such a loss the server is asked whether that
id committed (`pg_xact_status`): committed → the result computed before the commit is the
truth; aborted → the transaction is run again; unknowable → `DatabaseUnavailable`.

A step (`record_step`, the heartbeat with its events) is the exception: it is one statement
that commits on its own in autocommit, one round trip instead of two (BEGIN and the
statement, then COMMIT), so no transaction id is in hand when its answer is lost. Instead the
client draws a nonce for each step, and the step's UPDATE stores it on the run row beside
the lease it renews. A retry of the same step that finds its nonce on the row, under the
same owner, token and status, knows that an earlier try committed: it changes nothing and
answers with that try's sequences. One that finds another lease there (the run was reaped,
cancelled, claimed by another worker since) reports the lease lost, which it is. The step's
events and its lease renewal stay one statement, hence one transaction.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast

import psycopg
from psycopg import conninfo as pg_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from tenure._errors import DatabaseUnavailable, StoreError
from tenure._json import dumps, dumps_finite
from tenure._types import EventKind, Usage
from tenure.store import _sql
from tenure.store._base import NO_USAGE, Lease, NewEvent, NewRun
from tenure.store._common import Cursor, SQLStore
from tenure.store._deltas import DeltaFeed, DeltaPiece
from tenure.store._pg_conn import (
    CHECKOUT_TIMEOUT_SECONDS,
    DEFAULT_POOL_MAX_SIZE,
    DEFAULT_POOL_MIN_SIZE,
    DEFAULT_RETRY_SECONDS,
    POOL_NAME,
    POOL_RECONNECT_SECONDS,
    PUBLISH_TIMEOUT_SECONDS,
    RETRY_FIRST_DELAY,
    RETRY_MAX_DELAY,
    Q,
    Reachability,
    _CommitUnknown,
    _configure,
    checking_our_pool,
    conninfo_from_url,
    is_permanent,
    is_unreachable,
    one_line,
    quiet_pool_log,
)
from tenure.store._pg_deltas import NotifyFeed, channel
from tenure.store._pg_listen import Listener
from tenure.store._records import replay_form
from tenure.store._rows import aware
from tenure.store._sqlbase import _event_rows

T = TypeVar("T")
log = logging.getLogger("tenure.store.postgres")


def step_nonce() -> int:
    """A step's own number (63 bits: a bigint), the same on every try of that step. It only
    has to differ from the number of the run's previous step under the same lease, so the
    process's generator does (`secrets` would cost a system call per step)."""
    return random.getrandbits(63)


class PostgresStore(SQLStore):
    _q = Q

    def __init__(
        self,
        url: str,
        *,
        pool_min_size: int = DEFAULT_POOL_MIN_SIZE,
        pool_max_size: int = DEFAULT_POOL_MAX_SIZE,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
        reach_seconds: float | None = None,
    ) -> None:
        """`retry_seconds`: how long an operation rides out a server that stops answering.
        `reach_seconds`: how long one waits for a server that has not answered yet (default
        `retry_seconds`). A caller that gives it (a one-shot command) hears of a server it
        cannot reach from `DatabaseUnavailable` alone: those attempts are not in the log."""
        self.url = url
        self.conninfo = conninfo_from_url(url)
        self.retry_seconds = retry_seconds
        self.reach_seconds = retry_seconds if reach_seconds is None else reach_seconds
        self._quiet_reach = reach_seconds is not None
        self._reached = False
        self._reachability = Reachability(self._where)
        quiet_pool_log()
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            self.conninfo,
            kwargs={"autocommit": True},
            configure=_configure,
            min_size=pool_min_size,
            max_size=pool_max_size,
            open=False,
            name=POOL_NAME,
            reconnect_timeout=POOL_RECONNECT_SECONDS,
        )
        self._opened = False
        self._closed = False
        self._lock = threading.Lock()
        self._listener = Listener(self.conninfo, self._reachability)

    # -- connections ---------------------------------------------------------------------

    @contextlib.contextmanager
    def _connection(self, deadline: float) -> Iterator[psycopg.Connection[Any]]:
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            if not self._opened:
                self._first_connection(deadline)
                self._pool.open(wait=False)
                self._opened = True
        timeout = max(0.01, min(CHECKOUT_TIMEOUT_SECONDS, deadline - time.monotonic()))
        with self._pool.connection(timeout=timeout) as conn:
            yield conn

    def _first_connection(self, deadline: float) -> None:
        """Connect once before the pool does, and open the pool only once the server has
        answered: the pool retries every failure in the background and reports only a
        timeout, so an error that cannot heal would cost the whole retry window (and one that
        can, libpq's words for it) before anyone heard of it. A failure that can heal goes to
        the retry loop, which connects here again or gives up."""
        try:
            psycopg.connect(self.conninfo, connect_timeout=self._connect_timeout(deadline)).close()
        except psycopg.OperationalError as exc:
            if is_permanent(exc):
                raise DatabaseUnavailable(f"{self._where()}: {one_line(exc)}") from exc
            raise
        self._reached = True

    def _connect_timeout(self, deadline: float) -> int:
        """A connection attempt ends by the deadline (libpq waits 2 s at least), or sooner if
        the URL says so: a server that drops packets would otherwise hold a one-shot command
        for the whole `connect_timeout`."""
        left = max(2, math.ceil(deadline - time.monotonic()))
        given = int(pg_conninfo.conninfo_to_dict(self.conninfo).get("connect_timeout") or 0)
        return min(left, given) if given > 0 else left

    def close(self) -> None:
        with self._lock:
            self._closed = True
            opened, self._opened = self._opened, False
        self._listener.close()
        if opened:
            self._pool.close()

    # -- transactions --------------------------------------------------------------------

    def _retrying(self, attempt: Callable[[float], T], what: str) -> T:
        """Run `attempt(deadline)` until it succeeds, a permanent error, or the deadline."""
        reaching = not self._reached
        budget = self.reach_seconds if reaching else self.retry_seconds
        deadline = time.monotonic() + budget
        delay = RETRY_FIRST_DELAY
        while True:
            asked_at = time.monotonic()
            try:
                result = attempt(deadline)
            except _CommitUnknown as unknown:
                status = self._transaction_status(unknown.xid, deadline)
                if status == "committed":
                    log.warning("%s: connection lost during COMMIT, which had applied", what)
                    self._reachability.answered(asked_at)
                    return unknown.result  # type: ignore[no-any-return]
                if status != "aborted":
                    raise DatabaseUnavailable(
                        f"{self._where()}: connection lost during COMMIT of a {what} and "
                        f"its outcome is unknown ({status or 'too old to tell'})"
                    ) from unknown.__cause__
                cause: Exception = unknown
            except (psycopg.IntegrityError, psycopg.DataError) as exc:
                raise StoreError(f"{self._where()} refused the {what}: {exc}") from exc
            except psycopg.OperationalError as exc:
                cause = self._transient(exc)
            except psycopg.Error as exc:
                raise StoreError(f"{self._where()}: {what} failed: {exc}") from exc
            else:
                self._reachability.answered(asked_at)
                return result
            # The last try comes at the deadline, not a backoff step before it: "tried for
            # 3s" means three seconds (a quick restart may end within the last one).
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._unavailable(cause, budget, reaching) from cause
            self._retry_noted(cause, what, min(delay, left), reaching)
            time.sleep(min(delay, left))
            delay = min(delay * 2, RETRY_MAX_DELAY)

    def _transient(self, exc: psycopg.OperationalError) -> Exception:
        """`exc`, if waiting can heal it; else DatabaseUnavailable at once."""
        if is_permanent(exc):
            raise DatabaseUnavailable(f"{self._where()}: {one_line(exc)}") from exc
        self._drop_dead_connections()
        return exc

    def _retry_noted(self, cause: Exception, what: str, delay: float, reaching: bool) -> None:
        """A transient failure, about to be retried: a server that does not answer is told
        once per outage (`Reachability`), each try at DEBUG; a lost race (a deadlock, a
        serialization failure) on a server that answers, once per try."""
        if isinstance(cause, _CommitUnknown) or is_unreachable(cause):
            if not (reaching and self._quiet_reach):
                self._reachability.lost(lambda: self._reason(cause))
            log.debug("%s failed (%s); retrying in %.2fs", what, one_line(cause), delay)
        else:
            log.warning("%s failed transiently (%s); retrying in %.2fs", what, cause, delay)

    def _unavailable(self, cause: Exception, budget: float, reaching: bool) -> DatabaseUnavailable:
        if reaching:
            message = f"cannot reach {self._where()} (tried for {budget:g}s): {self._reason(cause)}"
        else:
            message = f"{self._where()} unavailable for {budget:g}s: {self._reason(cause)}"
        error = DatabaseUnavailable(message)
        error.logged = self._reachability.down
        return error

    def _reason(self, cause: Exception) -> str:
        return self._diagnose() if isinstance(cause, PoolTimeout) else one_line(cause)

    def _diagnose(self) -> str:
        """Why the pool could not connect, in libpq's words (the pool only says it timed out)."""
        try:
            psycopg.connect(self.conninfo).close()
        except psycopg.Error as exc:
            return one_line(exc)
        return "no pooled connection became free in time"

    def _drop_dead_connections(self) -> None:
        # After a server restart every idle pooled connection is dead; find them all now
        # rather than burning one retry on each.
        with contextlib.suppress(Exception), checking_our_pool():
            if self._opened:
                self._pool.check()

    def _transaction(self, fn: Callable[[Cursor], T], deadline: float) -> T:
        with self._connection(deadline) as conn:
            committing = False
            xid: str | None = None
            result: Any = None
            try:
                with conn.transaction():
                    result = fn(conn.cursor())
                    xid = conn.execute(Q["transaction_id"]).fetchone()[0]  # type: ignore[index]
                    committing = True
            except psycopg.OperationalError as exc:
                if committing and conn.closed:
                    raise _CommitUnknown(xid, result) from exc
                raise
            return result  # type: ignore[no-any-return]

    def _transaction_status(self, xid: str | None, deadline: float) -> str | None:
        """Whether transaction `xid` committed, asked on a fresh connection."""
        if xid is None:
            return "aborted"  # it wrote nothing, so running it again changes nothing twice
        while True:
            try:
                with self._connection(deadline) as conn:
                    row = conn.execute(Q["transaction_status"], {"xid": xid}).fetchone()
                status: str | None = row[0] if row else None
                if status != "in progress":
                    return status
            except psycopg.OperationalError:
                self._drop_dead_connections()
            if time.monotonic() + RETRY_MAX_DELAY >= deadline:
                return "server not reachable to ask"
            time.sleep(RETRY_FIRST_DELAY * 4)

    def _write(self, fn: Callable[[Cursor], T]) -> T:
        """Run `fn` in one transaction, retried whole on a transient failure."""
        return self._retrying(lambda deadline: self._transaction(fn, deadline), "write")

    def _statement(self, sql: str, params: dict[str, Any]) -> list[Any]:
        """One statement that is its own transaction (the connection is in autocommit):
        its rows come back once it has committed. Retried whole on a transient failure, so
        only for a statement whose second run, after a first that committed unseen, changes
        nothing and says so."""

        def once(deadline: float) -> list[Any]:
            with self._connection(deadline) as conn:
                return conn.execute(sql, params).fetchall()

        return self._retrying(once, "write")

    # -- the two writes on every run's path, in one round trip each where they can --------

    def enqueue_many(self, runs: Sequence[NewRun]) -> list[tuple[str, bool]]:
        if len(runs) != 1:
            return super().enqueue_many(runs)
        run = runs[0]
        params = {
            "id": run.run_id,
            "queue": run.queue,
            "request": run.request,
            "idempotency_key": run.idempotency_key,
            "delay": run.delay,
            "last_sequence": len(run.events) - 1,
            "parent_id": run.parent_id,
            "root_id": run.root_id,
            "priority": run.priority,
            "concurrency_key": run.concurrency_key,
        }
        if _request_only(run):
            sql = Q["enqueue_with_request"]
        else:
            rows: list[dict[str, Any]] = []
            _event_rows(rows, run.run_id, len(run.events) - 1, 0, 0, run.events)
            sql, params["events"] = Q["enqueue_with_events"], dumps(rows)
        if self._statement(sql, params):
            return [(run.run_id, True)]
        # Nothing inserted: our own earlier try had committed, or the key is taken.
        found = self._read(Q["enqueued_as"], params)[0][0]
        return [(found, found == run.run_id)]

    def _insert_runs(self, cur: Cursor, params: list[dict[str, Any]]) -> list[bool]:
        """The inserts of a batch (ctx.map's children, enqueue_many) sent together in one
        pipeline instead of a round trip each, still one statement per run and in order:
        each sees the runs before it (a concurrency key's round, a key taken by an earlier
        run of the batch) as one at a time did."""
        if len(params) < 2:
            return super()._insert_runs(cur, params)
        many = cast("psycopg.Cursor[Any]", cur)
        many.executemany(Q["enqueue"], params, returning=True)
        out = []
        while True:
            out.append(many.fetchone() is not None)  # RETURNING: a row when inserted
            if not many.nextset():
                return out

    def _claim_rows(self, cur: Cursor, params: dict[str, Any]) -> list[Any]:
        """The claim, after `claim_plan` in the same round trip (a pipeline)."""
        pg = cast("psycopg.Cursor[Any]", cur)
        with pg.connection.pipeline():
            pg.execute(Q["claim_plan"])
            pg.execute(_claim_sql(params["limit"]), params)
        return pg.fetchall()

    def _insert_events(self, cur: Cursor, rows: list[dict[str, Any]]) -> None:
        """The rows `_event_rows` made, in one statement: a JSON array (their values are
        text and integers, so the array is written without the look for NaN)."""
        if len(rows) < 2:
            super()._insert_events(cur, rows)
        else:
            cur.execute(Q["insert_events"], {"events": dumps_finite(rows)})

    def record_step(
        self,
        lease: Lease,
        lease_seconds: float,
        events: Sequence[NewEvent],
        usage: Usage = NO_USAGE,
    ) -> list[int] | None:
        n = len(events)
        params = {
            **self._lease_params(lease),
            "attempt": lease.attempt,
            "lease": lease_seconds,
            "n": n,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cost": usage.cost,
            "events": dumps(
                [
                    {
                        "i": i,
                        "kind": str(e.kind),
                        "payload": text,
                        "replay": replay_form(e.kind, text),
                    }
                    for i, e in enumerate(events)
                    for text in (dumps(e.payload),)
                ]
            ),
        }
        rows = self._statement(Q["record_step"], {**params, "nonce": step_nonce()})
        return list(range(rows[0][0] - n + 1, rows[0][0] + 1)) if rows else None

    def _read(self, sql: str, params: dict[str, Any]) -> list[Any]:
        def once(deadline: float) -> list[Any]:
            with self._connection(deadline) as conn:
                return conn.execute(sql, params).fetchall()

        return self._retrying(once, "read")

    def _where(self) -> str:
        info = pg_conninfo.conninfo_to_dict(self.conninfo)
        host = info.get("host") or "localhost"
        return f"PostgreSQL database {info.get('dbname', '')!s} at {host}:{info.get('port', 5432)}"

    # -- schema --------------------------------------------------------------------------

    def migrate(self) -> None:
        def apply(cur: Cursor) -> None:
            cur.execute(Q["migration_lock"])
            cur.execute(Q["schema_version_table"])
            current = cur.execute(Q["schema_version"]).fetchone()[0]
            _sql.refuse_newer(current, "postgres")
            for version, script in _sql.migrations("postgres"):
                if version <= current:
                    continue
                cur.execute(script)
                cur.execute(Q["record_schema_version"], {"version": version})

        self._write(apply)

    def schema_version(self) -> int:
        if not self._read(Q["schema_version_exists"], {})[0][0]:
            return 0
        return int(self._read(Q["schema_version"], {})[0][0])

    def _time(self, value: Any) -> datetime | None:
        return aware(value)

    def _time_param(self, value: datetime) -> Any:
        return value

    def _queues_param(self, queues: Sequence[str] | None) -> Any:
        return list(queues) if queues else None

    def _lock_keys(self, cur: Cursor, keys: Sequence[str]) -> None:
        cur.execute(self._q["concurrency_lock"], {"keys": list(keys)}).fetchall()

    # -- notifications -------------------------------------------------------------------

    def subscribe(self, wake: Callable[[], None]) -> Callable[[], None]:
        """`wake` is called when a run may have become claimable (LISTEN/NOTIFY).

        The listener has its own connection and reconnects when it is lost; after a
        reconnect it calls `wake` once, since notifications sent meanwhile were lost.
        """
        if self._closed:
            raise StoreError("the store is closed")
        return self._listener.add(wake)

    # -- streaming (SPEC §18) ------------------------------------------------------------

    def publish_deltas(self, pieces: Sequence[DeltaPiece]) -> None:
        """One NOTIFY per piece, in one statement on a pooled connection of its own: never
        the transaction of a step, which it must neither join nor hold up. Tried once."""
        if not pieces:
            return
        params = {
            "ids": [p.lease.run_id for p in pieces],
            "owners": [p.lease.owner for p in pieces],
            "tokens": [p.lease.token for p in pieces],
            "sequences": [p.sequence for p in pieces],
            "channels": [channel(p.lease.run_id) for p in pieces],
            "chunks": [p.chunk for p in pieces],
            "texts": [p.text for p in pieces],
        }
        with self._connection(time.monotonic() + PUBLISH_TIMEOUT_SECONDS) as conn:
            conn.execute(Q["publish_delta"], params)

    def follow_deltas(self, run_id: str) -> DeltaFeed:
        return NotifyFeed(self.conninfo, run_id, self._reachability)


def _request_only(run: NewRun) -> bool:
    """The run's one event is its `request`, whose payload is the stored request's text."""
    if len(run.events) != 1 or run.request is None:
        return False
    event = run.events[0]
    return event.kind is EventKind.REQUEST and event.text == run.request


@functools.cache
def _claim_sql(limit: int) -> str:
    """The claim with its limit written into the text: a prepared claim's generic plan then
    reads the claim-order index up to the limit, as the plan made for its values does, and
    the server keeps it instead of planning every claim afresh. With the limit a parameter
    the generic plan is costed for a tenth of the backlog and refused, so the server planned
    each claim (a third of the claim's server time, measured in bench/RESULTS.md). One text
    per limit: a worker's claims ask for at most its free slots and its buffer."""
    return Q["claim"].replace("%(limit)s", str(int(limit)))
