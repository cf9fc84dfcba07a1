"""A worker commits the ends of its finished runs together, with its next claim.

A slot hands its run's final settle to the next commit and goes on; these tests force what
can go wrong in between: the lease is lost before the commit, the commit itself fails, the
slot is busy with a long run, and the worker stops with ends not yet committed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import tenure
from tenure import EventKind, Outcome, RunRequest, RunStatus
from tenure._errors import DatabaseUnavailable
from tenure._ladder import Engine
from tenure._reaper import Reaper
from tenure._worker import MAX_END_DELAY, Worker
from tenure.audit import audit
from tenure.store import Claimed, Lease, Settlement

MakeRuntime = Callable[..., tenure.Runtime]


def say(text: str, *before: dict[str, Any]) -> RunRequest:
    return RunRequest(prompt="p", model="scripted", script=[*before, {"say": text}])


class BeforeEachCommit:
    """The real store; `settle_and_claim` first calls `hook` with the settles it got."""

    def __init__(self, store: Any, hook: Callable[[Sequence[tuple[Lease, Settlement]]], None]):
        self._store, self._hook = store, hook
        self.commits: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def settle_and_claim(
        self,
        settles: Sequence[tuple[Lease, Settlement]],
        owner: str,
        queues: Sequence[str] | None,
        lease_seconds: float,
        limit: int,
    ) -> tuple[list[list[int] | None], list[Claimed]]:
        self._hook(settles)
        self.commits.append(len(settles))
        return self._store.settle_and_claim(settles, owner, queues, lease_seconds, limit)  # type: ignore[no-any-return]


def worker_on(rt: tenure.Runtime, store: Any, **kwargs: Any) -> Worker:
    engine = rt.engine
    kwargs.setdefault("poll_interval", 0.02)
    return Worker(Engine(store, engine.tools, engine.models, engine.settings), **kwargs)


def run_until_done(worker: Worker, done: Callable[[], bool], timeout: float = 20.0) -> None:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the runs did not end in time"
        time.sleep(0.02)
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()


def test_an_end_whose_lease_expired_before_its_commit_is_not_settled(
    make_runtime: MakeRuntime,
) -> None:
    """The reaper requeues the run between the end of its segment and the commit: the
    settle loses, the first segment leaves no trace, and the run is done exactly once."""
    lease = 0.3
    rt = make_runtime(lease_seconds=lease)
    run_id = rt.enqueue(say("once"))
    stolen: list[str] = []

    def steal(settles: Sequence[tuple[Lease, Settlement]]) -> None:
        for held, _ in settles:
            if held.run_id == run_id and not stolen:
                # The lease runs out while the end waits; the worker's own reaper (or this
                # one) requeues the run.
                deadline = time.monotonic() + 10
                while rt.status(run_id).status is RunStatus.RUNNING:  # type: ignore[union-attr]
                    assert time.monotonic() < deadline
                    time.sleep(lease / 4)
                    Reaper(rt.store, 3).run_once()
                stolen.append(held.run_id)

    worker = worker_on(rt, BeforeEachCommit(rt.store, steal), concurrency=1)
    run_until_done(worker, lambda: rt.status(run_id).status is RunStatus.COMPLETED)  # type: ignore[union-attr]
    assert stolen == [run_id]
    assert worker.stats.outcomes.get(str(Outcome.LEASE_LOST)) == 1
    assert worker.stats.outcomes.get(str(Outcome.COMPLETED)) == 1
    kinds = [e.kind for e in rt.events(run_id)]
    assert kinds.count(EventKind.ASSEMBLED) == 1  # only the second segment's
    assert kinds.count(EventKind.CLAIMED) == 2
    assert audit(rt.store).ok


def test_an_end_whose_lease_expired_while_it_waited_is_refused_without_a_reaper(
    make_runtime: MakeRuntime,
) -> None:
    """No reaper acted before the commit: the lease's time alone, by the database's clock,
    refuses the batched settle. The segment reports lease_lost; the reaper then requeues the
    run as a dead worker's, and it is done exactly once."""
    lease = 0.3
    rt = make_runtime(lease_seconds=lease)
    run_id = rt.enqueue(say("once"))
    outwaited: list[str] = []

    def outwait(settles: Sequence[tuple[Lease, Settlement]]) -> None:
        for held, _ in settles:
            if held.run_id == run_id and not outwaited:
                # The keeper no longer renews an ended segment: its lease runs out here.
                time.sleep(lease + 0.2)
                run = rt.status(run_id)
                assert run is not None and run.status is RunStatus.RUNNING
                assert run.lease_expires is not None and run.lease_expires < rt.store.now()
                outwaited.append(held.run_id)

    def done() -> bool:
        # The worker's own reaper is kept out of the way (reap_interval): this one acts
        # only once the commit has been refused.
        if outwaited:
            Reaper(rt.store, 3).run_once()
        return rt.status(run_id).status is RunStatus.COMPLETED  # type: ignore[union-attr]

    worker = worker_on(rt, BeforeEachCommit(rt.store, outwait), concurrency=1, reap_interval=60)
    run_until_done(worker, done)
    assert outwaited == [run_id]
    assert worker.stats.outcomes.get(str(Outcome.LEASE_LOST)) == 1
    assert worker.stats.outcomes.get(str(Outcome.COMPLETED)) == 1
    events = rt.events(run_id)
    assert [e.kind for e in events].count(EventKind.ASSEMBLED) == 1  # the second segment's
    causes = [e.payload["cause"] for e in events if e.kind is EventKind.REQUEUED]
    assert causes == ["stale"]
    assert audit(rt.store).ok


def test_an_end_of_a_run_cancelled_before_its_commit_is_not_settled(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime()
    run_id = rt.enqueue(say("never"))

    def cancel(settles: Sequence[tuple[Lease, Settlement]]) -> None:
        if any(held.run_id == run_id for held, _ in settles):
            assert rt.cancel(run_id)

    worker = worker_on(rt, BeforeEachCommit(rt.store, cancel), concurrency=1)
    run_until_done(worker, lambda: rt.status(run_id).status is RunStatus.CANCELLED)  # type: ignore[union-attr]
    time.sleep(0.1)
    assert worker.stats.outcomes.get(str(Outcome.CANCELLED)) == 1
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.CANCELLED and run.output is None
    assert EventKind.ASSEMBLED not in [e.kind for e in rt.events(run_id)]


def test_a_commit_that_fails_settles_each_run_on_its_own(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()
    ids = [rt.enqueue(say(f"r{i}")) for i in range(6)]
    failed: list[int] = []

    def fail_once(settles: Sequence[tuple[Lease, Settlement]]) -> None:
        if settles and not failed:
            failed.append(len(settles))
            raise DatabaseUnavailable("the database went away for a moment")

    worker = worker_on(rt, BeforeEachCommit(rt.store, fail_once), concurrency=2)

    def all_done() -> bool:
        return all(rt.status(r).status is RunStatus.COMPLETED for r in ids)  # type: ignore[union-attr]

    run_until_done(worker, all_done)
    assert failed and failed[0] >= 1
    assert worker.stats.outcomes == {str(Outcome.COMPLETED): 6}
    for run_id in ids:
        assert [e.kind for e in rt.events(run_id)].count(EventKind.ASSEMBLED) == 1
    assert audit(rt.store).ok


def test_an_end_is_committed_while_its_slot_runs_a_long_run(make_runtime: MakeRuntime) -> None:
    """Short runs are claimed ahead; the one before a long run must not wait for it."""
    rt = make_runtime()
    warm = [rt.enqueue(say(f"w{i}")) for i in range(30)]
    worker = rt.worker(concurrency=1, poll_interval=0.02)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not all(rt.status(r).status is RunStatus.COMPLETED for r in warm):  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # Segments are short now: the worker claims ahead, so these arrive in one buffer.
    short = [rt.enqueue(say(f"s{i}")) for i in range(3)]
    long = rt.enqueue(say("slow", {"sleep": 3.0}))
    worker.wake()
    while rt.status(long).status is not RunStatus.RUNNING:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.005)
    time.sleep(MAX_END_DELAY * 10)
    assert rt.status(long).status is RunStatus.RUNNING  # type: ignore[union-attr]
    assert all(rt.status(r).status is RunStatus.COMPLETED for r in short)  # type: ignore[union-attr]
    worker.stop()
    thread.join(10)
    assert rt.status(long).status is RunStatus.COMPLETED  # type: ignore[union-attr]


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_stopped_worker_commits_every_run_that_ended(
    make_runtime: MakeRuntime, concurrency: int
) -> None:
    rt = make_runtime()
    ids = [rt.enqueue(say(f"r{i}")) for i in range(300)]
    worker = rt.worker(concurrency=concurrency, poll_interval=0.02)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while worker.stats.outcomes.get(str(Outcome.COMPLETED), 0) < 50:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()
    statuses = [rt.status(r).status for r in ids]  # type: ignore[union-attr]
    assert RunStatus.RUNNING not in statuses, "a run was left running by a stopped worker"
    completed = statuses.count(RunStatus.COMPLETED)
    assert completed == worker.stats.outcomes[str(Outcome.COMPLETED)]
    assert completed + statuses.count(RunStatus.QUEUED) == len(ids)
    assert audit(rt.store).ok


class LostCommit:
    """The real store, whose `settle_and_claim` commits and then, once the first time it
    claimed something, reports the connection lost: the outcome the worker cannot learn."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.lost: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def settle_and_claim(self, *args: Any) -> tuple[list[list[int] | None], list[Claimed]]:
        settled, claimed = self._store.settle_and_claim(*args)
        if claimed and not self.lost:
            self.lost.extend(c.lease.run_id for c in claimed)
            raise DatabaseUnavailable("connection lost during COMMIT; its outcome is unknown")
        return settled, claimed


def test_claims_of_a_commit_whose_outcome_was_lost_are_handed_back_not_orphaned(
    make_runtime: MakeRuntime,
) -> None:
    """The commit applied, but the worker heard it fail: the runs it claimed are held under
    its name with no slot to run them. They go back to the queue at once, untouched (no
    attempt, no budget), instead of waiting a whole lease for the reaper."""
    rt = make_runtime(lease_seconds=60)  # the reaper would not come within this test
    ids = [rt.enqueue(say(f"run {i}")) for i in range(6)]
    store = LostCommit(rt.store)
    worker = worker_on(rt, store, concurrency=2)
    done = lambda: all(rt.status(i).status is RunStatus.COMPLETED for i in ids)  # type: ignore[union-attr]  # noqa: E731
    run_until_done(worker, done)
    assert store.lost, "no commit was lost: the test proves nothing"
    for run_id in ids:
        run = rt.status(run_id)
        assert run is not None and run.requeue_count == 0 and run.attempt == 0
    for run_id in store.lost:
        causes = [e.payload.get("cause") for e in rt.events(run_id) if e.kind is EventKind.REQUEUED]
        assert causes == ["unstarted"]
    assert audit(rt.store).ok
