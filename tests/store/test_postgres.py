"""What only PostgreSQL has: SKIP LOCKED, the claim's partial index, NOTIFY, HOT heartbeats,
and the faults of a network database (killed connections, a lost COMMIT, a restart)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import tenure
from tenure import RunRequest, RunStatus
from tenure._types import EventKind
from tenure.store import _sql, open_store
from tenure.store._pg_conn import Q, conninfo_from_url
from tenure.store.postgres import PostgresStore

from .._postgres import Cluster
from .helpers import (
    SHORT_LEASE,
    as_enqueued,
    claim_one,
    completed,
    enqueue,
    expire,
    new_run,
    stale_for,
    step,
)

LATEST = _sql.migrations("postgres")[-1][0]

WAIT = 5.0


def sql(url: str, query: str, params: dict[str, Any] | None = None) -> list[Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def kill_store_connections(url: str) -> int:
    """pg_terminate_backend every connection tenure holds to this database."""
    rows = sql(
        url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name = 'tenure' "
        "AND pid <> pg_backend_pid()",
    )
    return len(rows)


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_url, retry_seconds=20)
    yield store
    store.close()


def test_urls_with_either_scheme_open_a_postgres_store(pg_url: str) -> None:
    for url in (pg_url, pg_url.replace("postgresql://", "postgres://", 1)):
        store = open_store(url)
        try:
            assert isinstance(store, PostgresStore)
            assert store.schema_version() == LATEST
        finally:
            store.close()
    assert "application_name=tenure" in conninfo_from_url(pg_url)
    assert "application_name=mine" in conninfo_from_url(pg_url + "?application_name=mine")


def test_concurrent_first_migrations_apply_once(pg_cluster: Cluster) -> None:
    name = "tenure_fresh_migrate"
    pg_cluster.admin(f"CREATE DATABASE {name}")
    url = pg_cluster.url(name)
    stores = [PostgresStore(url) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def migrate(store: PostgresStore) -> None:
        barrier.wait()
        try:
            store.migrate()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=migrate, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        versions = sql(url, "SELECT version FROM tenure_schema_version ORDER BY version")
        assert versions == [(v,) for v, _ in _sql.migrations("postgres")]
        assert stores[0].schema_version() == LATEST
    finally:
        for s in stores:
            s.close()
        pg_cluster.drop_database(name)


def test_a_claimer_skips_a_row_another_has_locked_instead_of_waiting(
    pg: PostgresStore, pg_url: str
) -> None:
    locked = enqueue(pg)
    free = enqueue(pg)
    with psycopg.connect(pg_url) as other:
        other.execute("SELECT 1 FROM tenure_runs WHERE id = %s FOR UPDATE", (locked,))
        started = time.monotonic()
        got = pg.claim("worker:a", None, 30, 10)
        elapsed = time.monotonic() - started
        assert [c.lease.run_id for c in got] == [free]
        assert elapsed < 1.0, f"the claim waited {elapsed:.2f}s on a locked row"
        other.rollback()
    assert [c.lease.run_id for c in pg.claim("worker:a", None, 30, 10)] == [locked]


def test_a_keeper_round_does_not_wait_for_a_row_another_transaction_has_locked(
    pg: PostgresStore, pg_url: str
) -> None:
    """The keeper renews many rows in one statement while a group settle writes many rows
    in another: if either waited for the other's row locks they could deadlock (seen in a
    benchmark: a second lost per deadlock). A row locked right now is being written by its
    own segment, a settle or a cancel: it is left for the next round, not reported lost."""
    enqueue(pg)
    enqueue(pg)
    busy, free = (c.lease for c in pg.claim("worker:a", None, 30, 10))
    before = {r.id: r.lease_expires for r in pg.runs(status=RunStatus.RUNNING, limit=10)}
    kept: list[set[str]] = []
    took: list[float] = []

    def renew() -> None:
        started = time.monotonic()
        kept.append(pg.renew_leases([(busy, 60.0), (free, 60.0)]))
        took.append(time.monotonic() - started)

    with psycopg.connect(pg_url) as other:
        other.execute("SELECT 1 FROM tenure_runs WHERE id = %s FOR UPDATE", (busy.run_id,))
        renewal = threading.Thread(target=renew)
        renewal.start()
        renewal.join(WAIT)
        other.rollback()  # a renewal that waited for the lock goes on from here
    renewal.join(WAIT)
    assert took and took[0] < 1.0, f"the renewal waited {took}s on a locked row"
    assert kept == [{busy.run_id, free.run_id}]
    after = {r.id: r.lease_expires for r in pg.runs(status=RunStatus.RUNNING, limit=10)}
    assert after[free.run_id] > before[free.run_id]  # type: ignore[operator]
    assert after[busy.run_id] == before[busy.run_id]  # renewed by a later round
    assert pg.renew_leases([(busy, 60.0)]) == {busy.run_id}
    cancelled = pg.cancel(free.run_id)
    assert cancelled and pg.renew_leases([(free, 60.0)]) == set()  # a missed guard is lost


CLAIM_PARAMS = {"owner": "w", "lease": 30.0, "limit": 4, "queues": None, "n": 1}
FINISHED_RUNS = 20_000


def explain_claim(url: str) -> str:
    with psycopg.connect(url) as conn:
        rows = conn.execute("EXPLAIN " + Q["claim"], CLAIM_PARAMS).fetchall()  # type: ignore[operator]
        conn.rollback()
    return "\n".join(r[0] for r in rows)


def test_the_claim_reads_its_partial_index_in_order_however_many_runs_are_finished(
    pg: PostgresStore, pg_url: str
) -> None:
    sql(
        pg_url,
        "INSERT INTO tenure_runs (id, queue, status, termination_reason, available_at, "
        "created_at, finished_at, updated_at) "
        "SELECT 'done-' || i, 'default', 'completed', 'completed', now(), now(), now(), now() "
        "FROM generate_series(1, %(n)s) AS i",
        {"n": FINISHED_RUNS},
    )
    for _ in range(5):
        enqueue(pg)
    sql(pg_url, "ANALYZE tenure_runs")
    plan = explain_claim(pg_url)
    assert "tenure_runs_claim_order" in plan, plan
    assert "Sort" not in plan, plan  # the priority order is the index's own
    assert "Seq Scan on tenure_runs" not in plan, plan
    assert len(pg.claim("worker:a", None, 30, 10)) == 5


def test_the_claim_reads_its_partial_index_in_order_while_queues_are_paused(
    pg: PostgresStore, pg_url: str
) -> None:
    """The check of paused queues filters the scan of the claimable index; it must not make
    the planner sort every queued run at each claim instead."""
    sql(
        pg_url,
        "INSERT INTO tenure_runs (id, queue, status, termination_reason, available_at, "
        "created_at, finished_at, updated_at) "
        "SELECT 'done-' || i, 'default', 'completed', 'completed', now(), now(), now(), now() "
        "FROM generate_series(1, %(n)s) AS i",
        {"n": FINISHED_RUNS},
    )
    for _ in range(5):
        enqueue(pg)
    for queue in ("mail", "reports"):
        assert pg.pause_queue(queue)
    sql(pg_url, "ANALYZE tenure_runs")
    sql(pg_url, "ANALYZE tenure_paused_queues")
    plan = explain_claim(pg_url)
    assert "tenure_runs_claim_order" in plan, plan
    assert "Sort" not in plan, plan
    assert "Seq Scan on tenure_runs" not in plan, plan
    assert len(pg.claim("worker:a", None, 30, 10)) == 5


def test_heartbeats_are_hot_updates(pg: PostgresStore, pg_url: str) -> None:
    run_id = enqueue(pg)
    lease = claim_one(pg).lease
    params = {"id": run_id, "owner": lease.owner, "token": lease.token, "lease": 30.0, "n": 0}
    params |= {"input_tokens": 1, "output_tokens": 1, "cost": 0.0}
    params |= {"attempt": lease.attempt, "events": "[]"}
    hot = 0
    beats = 50
    with psycopg.connect(pg_url) as conn:
        for beat in range(beats):
            params["nonce"] = beat  # a new step each time
            assert conn.execute(Q["record_step"], params).fetchone() is not None
            hot += conn.execute(  # type: ignore[index]
                "SELECT pg_stat_get_xact_tuples_hot_updated('tenure_runs'::regclass)"
            ).fetchone()[0]
            conn.commit()
    assert hot >= beats * 0.9, f"only {hot} of {beats} heartbeats were HOT"


# -- NOTIFY ------------------------------------------------------------------------------


def subscribed(store: PostgresStore) -> tuple[threading.Event, Any]:
    woken = threading.Event()
    unsubscribe = store.subscribe(woken.set)
    assert store._listener.listening.wait(WAIT)
    woken.clear()
    return woken, unsubscribe


def test_enqueue_release_and_stale_requeue_wake_a_subscriber(pg: PostgresStore) -> None:
    other = PostgresStore(pg.url)  # the notification crosses connections, as between hosts
    woken, unsubscribe = subscribed(pg)
    try:
        run_id = enqueue(other)
        assert woken.wait(WAIT), "enqueue did not wake the subscriber"
        woken.clear()
        lease = claim_one(other).lease
        assert not woken.wait(0.3), "a claim makes nothing claimable"
        assert other.release(lease)
        assert woken.wait(WAIT), "release did not wake the subscriber"
        woken.clear()
        lease = claim_one(other, lease=SHORT_LEASE).lease
        expire()
        assert other.requeue_stale(stale_for(other, run_id))
        assert woken.wait(WAIT), "a stale requeue did not wake the subscriber"
        woken.clear()
        enqueue(other, delay=60)
        assert not woken.wait(0.3), "a delayed run is not claimable: polling finds it later"
    finally:
        unsubscribe()
        other.close()
    assert not pg._listener.listening.is_set()


def test_the_listener_reconnects_after_its_connection_is_killed(
    pg: PostgresStore, pg_url: str
) -> None:
    woken, unsubscribe = subscribed(pg)
    try:
        assert kill_store_connections(pg_url) >= 1
        assert woken.wait(WAIT), "a reconnected listener wakes once for what it missed"
        woken.clear()
        deadline = time.monotonic() + WAIT
        while not woken.is_set() and time.monotonic() < deadline:
            enqueue(pg)  # until the new LISTEN is in place
            woken.wait(0.2)
        assert woken.is_set()
    finally:
        unsubscribe()


# -- faults ------------------------------------------------------------------------------


def test_killed_pool_connections_are_replaced_and_the_next_operation_succeeds(
    pg: PostgresStore, pg_url: str
) -> None:
    run_id = enqueue(pg)
    lease = claim_one(pg).lease
    assert kill_store_connections(pg_url) >= 1
    assert pg.record_step(lease, 30, [step(n=1)]) == [2]
    assert kill_store_connections(pg_url) >= 1
    assert pg.settle(lease, completed())
    run = pg.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert [e.kind for e in pg.events(run_id)].count(EventKind.ASSEMBLED) == 1


class LoseCommitReply:
    """A TCP proxy to the server that, once armed, loses the reply to the next COMMIT.

    The COMMIT reaches the server and is carried out; the client only sees its connection
    drop. That is the one failure whose outcome a client cannot know by itself.
    """

    def __init__(self, port: int) -> None:
        self.target = port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        self.armed = threading.Event()
        self.dropped = threading.Event()
        self._sockets: list[socket.socket] = [self.server]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self._lock:
                self._sockets += [client, upstream]
            lose = threading.Event()
            threading.Thread(target=self._up, args=(client, upstream, lose), daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client, lose), daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket, lose: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if self.armed.is_set() and b"COMMIT\x00" in data:
                    self.armed.clear()
                    lose.set()  # before the server can answer
                upstream.sendall(data)
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)

    def _down(self, upstream: socket.socket, client: socket.socket, lose: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                if lose.is_set():
                    self.dropped.set()
                    break
                client.sendall(data)
        for s in (client, upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._lock:
            for s in self._sockets:
                s.close()


@pytest.fixture
def proxy(pg_cluster: Cluster) -> Iterator[LoseCommitReply]:
    p = LoseCommitReply(pg_cluster.port)
    yield p
    p.close()


def test_a_settle_whose_commit_reply_was_lost_is_not_reported_lost(
    pg: PostgresStore, pg_url: str, proxy: LoseCommitReply, pg_cluster: Cluster
) -> None:
    via_proxy = pg_url.replace(f":{pg_cluster.port}/", f":{proxy.port}/")
    store = PostgresStore(via_proxy, retry_seconds=20)
    try:
        run_id = enqueue(store)
        lease = claim_one(store).lease
        assert store.record_step(lease, 30, [step(n=1)]) == [2]
        assert not proxy.dropped.is_set()
        proxy.armed.set()
        # A blind retry would fail the guard and report a settle that won as lost.
        assert store.settle(lease, completed())
        assert proxy.dropped.is_set()
        run = pg.get_run(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED
        assert [e.kind for e in pg.events(run_id)].count(EventKind.ASSEMBLED) == 1
    finally:
        store.close()


class LoseCommittedReply(LoseCommitReply):
    """A proxy that, once armed, loses the first reply that tells the client its transaction
    has ended: PostgreSQL's ReadyForQuery with status idle, whichever message committed (a
    COMMIT, or a statement that is its own transaction in autocommit). The server committed;
    the client only sees its connection drop. `on_loss` runs before the client can see
    anything, so a test can change the run meanwhile."""

    IDLE = b"Z\x00\x00\x00\x05I"

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.on_loss: Callable[[], None] = lambda: None

    def _up(self, client: socket.socket, upstream: socket.socket, lose: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                upstream.sendall(data)
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)

    def _down(self, upstream: socket.socket, client: socket.socket, lose: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                if self.armed.is_set() and self.IDLE in data:
                    self.armed.clear()
                    self.on_loss()
                    self.dropped.set()
                    break
                client.sendall(data)
        for s in (client, upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def committed_proxy(pg_cluster: Cluster) -> Iterator[LoseCommittedReply]:
    p = LoseCommittedReply(pg_cluster.port)
    yield p
    p.close()


@contextlib.contextmanager
def store_via(proxy: LoseCommitReply, pg_url: str, pg_cluster: Cluster) -> Iterator[PostgresStore]:
    """A store whose one pooled connection goes through `proxy`, already used for a step (so
    that the next message the step sends is the step itself)."""
    via_proxy = pg_url.replace(f":{pg_cluster.port}/", f":{proxy.port}/")
    store = PostgresStore(via_proxy, retry_seconds=20, pool_min_size=1, pool_max_size=1)
    try:
        yield store
    finally:
        store.close()


def test_a_step_whose_committed_reply_was_lost_is_applied_once_and_keeps_its_lease(
    pg: PostgresStore, pg_url: str, committed_proxy: LoseCommittedReply, pg_cluster: Cluster
) -> None:
    with store_via(committed_proxy, pg_url, pg_cluster) as store:
        run_id = enqueue(store)
        lease = claim_one(store).lease
        assert store.record_step(lease, 30, [step(n=1)]) == [2]
        committed_proxy.armed.set()
        # Run again blindly, the step would append its event twice or, guarded against
        # that, report the lease it still holds as lost.
        assert store.record_step(lease, 30, [step(n=2)]) == [3]
        assert committed_proxy.dropped.is_set()
        assert store.record_step(lease, 30, [step(n=3)]) == [4]
        assert [(e.sequence, e.payload.get("n")) for e in pg.events(run_id)] == [
            (0, None),
            (1, None),
            (2, 1),
            (3, 2),
            (4, 3),
        ]
        assert store.settle(lease, completed())
        run = pg.get_run(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED


@pytest.mark.parametrize("shape", ["request only", "with its own events"])
def test_an_enqueue_whose_committed_reply_was_lost_creates_its_run_once(
    pg: PostgresStore,
    pg_url: str,
    committed_proxy: LoseCommittedReply,
    pg_cluster: Cluster,
    shape: str,
) -> None:
    """Both one-statement enqueues (the request's text sent once, or the events as given)
    are retried whole when the reply of their commit is lost: the retry inserts nothing and
    finds the run the first try made."""
    with store_via(committed_proxy, pg_url, pg_cluster) as store:
        enqueue(store)  # the pooled connection is open before the proxy is armed
        run = as_enqueued({"prompt": "once"}, key="k") if shape == "request only" else new_run()
        committed_proxy.armed.set()
        assert store.enqueue(run) == (run.run_id, True)
        assert committed_proxy.dropped.is_set()
        rows = sql(pg_url, "SELECT count(*) FROM tenure_runs WHERE id = %(id)s", {"id": run.run_id})
        assert rows == [(1,)]
        assert [e.payload for e in pg.events(run.run_id)] == [dict(e.payload) for e in run.events]


def test_a_step_whose_committed_reply_was_lost_reports_a_lease_taken_meanwhile_as_lost(
    pg: PostgresStore, pg_url: str, committed_proxy: LoseCommittedReply, pg_cluster: Cluster
) -> None:
    with store_via(committed_proxy, pg_url, pg_cluster) as store:
        run_id = enqueue(store)
        lease = claim_one(store, lease=SHORT_LEASE).lease
        assert store.record_step(lease, SHORT_LEASE, [step(n=1)]) == [2]

        def taken_by_another() -> None:
            expire()
            assert pg.requeue_stale(stale_for(pg, run_id))
            claim_one(pg, owner="worker:b")

        committed_proxy.on_loss = taken_by_another
        committed_proxy.armed.set()
        # The step committed under its lease, which another worker holds now: the segment
        # must stop, whatever its step did before the loss.
        assert store.record_step(lease, SHORT_LEASE, [step(n=2)]) is None
        assert committed_proxy.dropped.is_set()
        events = pg.events(run_id)
        assert [(str(e.kind), e.lease_token) for e in events[2:]] == [
            ("llm", lease.token),
            ("llm", lease.token),
            ("requeued", lease.token),
            ("claimed", lease.token + 1),
        ]
        assert [e.sequence for e in events] == list(range(6))


class CutClientMidStatement(LoseCommitReply):
    """A proxy that, once armed, passes the client's next message on to the server and then
    cuts the client off at once: the server goes on and commits what it was sent, while the
    client, seeing its connection lost, tries again before that commit is done."""

    def _up(self, client: socket.socket, upstream: socket.socket, lose: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                upstream.sendall(data)
                if self.armed.is_set():
                    self.armed.clear()
                    self.dropped.set()
                    client.shutdown(socket.SHUT_RDWR)
                    return
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)


def test_a_step_retried_while_its_first_try_is_still_committing_is_applied_once(
    pg: PostgresStore, pg_url: str, pg_cluster: Cluster
) -> None:
    # The first try's COMMIT is slowed down (a deferred trigger), so its retry reaches the
    # row while that try still holds it: the retry must wait, then see the first try's
    # step as its own rather than the row as it was before.
    sql(
        pg_url,
        "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN IF NEW.payload->>'n' = '2' THEN PERFORM pg_sleep(0.5); END IF; "
        "RETURN NULL; END $$;"
        "CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON tenure_events "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()",
    )
    proxy = CutClientMidStatement(pg_cluster.port)
    try:
        with store_via(proxy, pg_url, pg_cluster) as store:
            run_id = enqueue(store)
            lease = claim_one(store).lease
            assert store.record_step(lease, 30, [step(n=1)]) == [2]
            proxy.armed.set()
            assert store.record_step(lease, 30, [step(n=2)]) == [3]
            assert proxy.dropped.is_set()
            assert [(e.sequence, e.payload.get("n")) for e in pg.events(run_id)][2:] == [
                (2, 1),
                (3, 2),
            ]
    finally:
        proxy.close()


def test_a_write_lost_before_its_commit_is_run_again(pg: PostgresStore, pg_url: str) -> None:
    # A deferred trigger makes COMMIT slow enough to kill the connection inside it: the
    # transaction aborts, the store learns that from the server and runs it again.
    sql(
        pg_url,
        "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN IF NEW.kind = 'llm' THEN PERFORM pg_sleep(0.5); END IF; RETURN NULL; END $$;"
        "CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON tenure_events "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()",
    )
    run_id = enqueue(pg)
    lease = claim_one(pg).lease
    killer = threading.Timer(0.2, kill_store_connections, args=(pg_url,))
    killer.start()
    assert pg.record_step(lease, 30, [step(n=1)]) == [2]
    killer.join()
    assert [e.sequence for e in pg.events(run_id)] == [0, 1, 2]


def _scripted(n: int, sleep: float) -> list[RunRequest]:
    script = [{"sleep": sleep}, {"say": "ok"}]
    return [RunRequest(prompt=f"p{i}", model="scripted", script=script) for i in range(n)]


def _drain_while(rt: tenure.Runtime, ids: list[str], fault: Any, when: int) -> None:
    """Work the runs with a worker thread; call `fault()` once `when` runs completed."""
    worker = rt.worker(concurrency=4, poll_interval=0.2)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    faulted = False
    try:
        while time.monotonic() < deadline:
            done = len(rt.runs(status=RunStatus.COMPLETED, limit=len(ids) + 1))
            if not faulted and done >= when:
                fault()
                faulted = True
            if done == len(ids):
                break
            time.sleep(0.1)
    finally:
        worker.stop()
        thread.join(30)
    assert faulted


def _settled_once(rt: tenure.Runtime, ids: list[str]) -> None:
    for run_id in ids:
        run = rt.status(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED, run
        kinds = Counter(e.kind for e in rt.events(run_id))
        assert kinds[EventKind.ASSEMBLED] == 1, (run_id, kinds)
        assert kinds[EventKind.LLM] == 1, (run_id, kinds)


@pytest.mark.slow
def test_connections_killed_mid_run_lose_no_run_and_settle_none_twice(pg_url: str) -> None:
    with tenure.Runtime(pg_url) as rt:
        ids = rt.enqueue_many(_scripted(40, 0.05))
        _drain_while(rt, ids, lambda: kill_store_connections(pg_url), when=10)
        _settled_once(rt, ids)


@pytest.mark.slow
def test_a_server_restart_mid_run_loses_no_run_and_settles_none_twice(
    pg_url: str, pg_cluster: Cluster
) -> None:
    with tenure.Runtime(pg_url) as rt:
        ids = rt.enqueue_many(_scripted(40, 0.05))
        _drain_while(rt, ids, pg_cluster.restart, when=10)
        _settled_once(rt, ids)


def test_an_unreachable_or_missing_database_is_a_clear_error(pg_cluster: Cluster) -> None:
    from .._postgres import free_port

    for url, says in (
        (f"postgresql://postgres@127.0.0.1:{free_port()}/tenure", "refused"),
        (pg_cluster.url("no_such_database"), 'database "no_such_database" does not exist'),
    ):
        store = PostgresStore(url, retry_seconds=1)
        try:
            with pytest.raises(tenure.DatabaseUnavailable, match=says):
                store.now()
        finally:
            store.close()


def test_a_step_after_a_rollback_on_its_connection_finds_its_prepared_statement(
    pg_url: str,
) -> None:
    """psycopg prepares a query it has run five times on a connection; once it has, a
    ROLLBACK there (a deadlock's victim, any failed transaction) makes it send DEALLOCATE ALL
    before the next query, which drops the step's own prepared statement too. Seen in a
    benchmark: every later step on that connection failed and its run was dead-lettered."""
    store = PostgresStore(pg_url, retry_seconds=20, pool_min_size=1, pool_max_size=1)
    try:
        run_id = enqueue(store)
        lease = claim_one(store).lease
        assert store.record_step(lease, 30, [step(n=1)]) == [2]  # prepared on the connection
        for _ in range(6):
            store.get_run(run_id)  # now psycopg has prepared a statement of its own
        with store._connection(time.monotonic() + WAIT) as conn:
            conn.execute("BEGIN")
            conn.execute("ROLLBACK")
        assert store.record_step(lease, 30, [step(n=2)]) == [3]
        assert [e.sequence for e in store.events(run_id)] == [0, 1, 2, 3]
    finally:
        store.close()
