"""The lease keeper (SPEC §15): long steps under short leases, and losses that reach the step
in flight. Real databases, real threads; time passes for real (the database's clock)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import tenure
from tenure import EventKind, Outcome, RunRequest, RunStatus, TerminationReason, ToolEffect
from tenure._keeper import Keeper
from tenure._ladder import Engine
from tenure._reaper import Reaper
from tenure._worker import Worker
from tenure.providers import OpenAICompatible
from tenure.store import Lease

from ..fakes._app import Latency
from ..fakes.openai_service import FakeOpenAI

MakeRuntime = Callable[..., tenure.Runtime]


def sleeping(seconds: float, then: str = "done") -> RunRequest:
    return RunRequest(prompt="p", model="scripted", script=[{"sleep": seconds}, {"say": then}])


def run_worker(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> float:
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, "condition not reached in time"
        time.sleep(0.02)
    return time.monotonic() - start


def status(rt: tenure.Runtime, run_id: str) -> RunStatus:
    run = rt.status(run_id)
    assert run is not None
    return run.status


def test_a_model_call_much_longer_than_the_lease_completes_without_a_requeue(
    make_runtime: MakeRuntime,
) -> None:
    """A 5 s model call under a 1 s lease: the worker's own reaper runs every 0.25 s and
    finds nothing to reap, because the keeper renews the lease in the background."""
    rt = make_runtime(lease_seconds=1.0)
    run_id = rt.enqueue(sleeping(5.0))
    worker = rt.worker(concurrency=2, poll_interval=0.05)
    thread = run_worker(worker)
    wait_for(lambda: status(rt, run_id) is RunStatus.COMPLETED)
    worker.stop()
    thread.join(10)
    run = rt.status(run_id)
    assert run is not None and run.requeue_count == 0 and run.attempt == 0
    kinds = [e.kind for e in rt.events(run_id)]
    assert kinds.count(EventKind.CLAIMED) == 1 and EventKind.REQUEUED not in kinds
    assert worker.stats.reaped == 0


def test_cancel_during_a_long_model_call_stops_it_within_a_third_of_the_lease(
    make_runtime: MakeRuntime,
) -> None:
    lease = 1.5
    rt = make_runtime(lease_seconds=lease)
    run_id = rt.enqueue(sleeping(30.0))
    worker = rt.worker(concurrency=1, poll_interval=0.05)
    thread = run_worker(worker)
    wait_for(lambda: status(rt, run_id) is RunStatus.RUNNING)
    time.sleep(0.3)  # the model call is in flight
    before = len(rt.events(run_id))
    assert rt.cancel(run_id)
    took = wait_for(lambda: worker.stats.outcomes.get(str(Outcome.CANCELLED)) == 1)
    # The keeper's next round finds the run gone and aborts the call: well before the
    # 30 s call would have ended, and within a round (lease / 3) plus scheduling slack.
    assert took < lease, took
    assert worker.inflight == 0  # the slot is free again
    worker.stop()
    thread.join(10)
    events = rt.events(run_id)
    assert [e.kind for e in events[before:]] == [EventKind.CANCELLED]  # nothing more written
    assert rt.status(run_id).termination_reason is TerminationReason.CANCELLED  # type: ignore[union-attr]


def established_to(port: int) -> int:
    """TCP connections of this machine in state ESTABLISHED whose remote end is `port`
    (the client side of the fake service's connections; /proc/net/tcp, IPv4)."""
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return sum(1 for row in rows if int(row[2].split(":")[1], 16) == port and row[3] == "01")


def test_cancel_during_a_long_non_streaming_openai_call_closes_it_within_a_third_of_the_lease(
    make_runtime: MakeRuntime,
) -> None:
    """A model call that is not streamed (the answer would come after 30 s): the keeper's
    round finds the run cancelled, the HTTP request is closed and the slot is free again."""
    lease = 1.5
    with (
        FakeOpenAI(latency=Latency.fixed(30.0)) as fake,
        OpenAICompatible("fake", base_url=fake.url, timeout=60) as provider,
    ):
        rt = make_runtime(lease_seconds=lease)
        rt.add_model("fake", provider)
        run_id = rt.enqueue(RunRequest(prompt="p", model="fake"))
        worker = rt.worker(concurrency=1, poll_interval=0.05)
        thread = run_worker(worker)
        wait_for(lambda: fake.stats().requests == 1 and established_to(fake.port) == 1)
        before = len(rt.events(run_id))
        assert rt.cancel(run_id)
        took = wait_for(lambda: worker.stats.outcomes.get(str(Outcome.CANCELLED)) == 1)
        assert took < lease, took
        assert worker.inflight == 0
        wait_for(lambda: established_to(fake.port) == 0, timeout=2.0)  # the request is closed
        worker.stop()
        thread.join(10)
        assert fake.stats().answered == 0
    events = rt.events(run_id)
    assert [e.kind for e in events[before:]] == [EventKind.CANCELLED]  # nothing more written


class CountingRenewals:
    """The real store; records the batch of every `renew_leases` statement."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.batches: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def renew_leases(self, leases: Sequence[tuple[Lease, float]]) -> set[str]:
        self.batches.append(len(leases))
        return self._store.renew_leases(leases)  # type: ignore[no-any-return]


def test_segments_that_start_do_not_start_keeper_rounds(make_runtime: MakeRuntime) -> None:
    """A claim has just set a fresh lease: a segment that starts waits for the keeper's next
    round like the others. (A round at every start cost a write per run: bench/steps.py.)"""
    rt = make_runtime(lease_seconds=30.0)
    ids = rt.enqueue_many([sleeping(0.01) for _ in range(20)])
    rt.work(concurrency=4, burst=True, poll_interval=0.01)
    assert all(status(rt, i) is RunStatus.COMPLETED for i in ids)
    assert rt._keeper.rounds == 0  # the drain took far less than a round (lease / 3 = 10 s)
    # Nor do they wake the keeper's thread: their leases need no earlier round than the
    # first one's (a wake-up per run was a large part of a trivial run's CPU).
    assert rt._keeper.wakeups <= 1


class Held:
    """A segment as the keeper sees it: a lease held, a step within its deadline."""

    def __init__(self, lease: Lease, lease_seconds: float) -> None:
        self.lease, self.lease_seconds = lease, lease_seconds
        self.lost = False

    def renewable(self, now: float) -> bool:
        return True

    def lose(self, cancelled: bool) -> None:
        self.lost = True


def test_a_segment_with_a_shorter_lease_brings_the_next_round_forward(
    make_runtime: MakeRuntime,
) -> None:
    """A long lease sets the keeper's wait (10 s); a segment with a 0.6 s lease that starts
    later wakes it, and is renewed in time (its lease outlives three of its lengths)."""
    rt = make_runtime()
    store = rt.store
    keeper = Keeper(lambda: store)
    try:
        long_id, short_id = rt.enqueue(sleeping(1)), rt.enqueue(sleeping(1))
        long_claim = store.claim_run(long_id, "w:1", 30.0)
        short_claim = store.claim_run(short_id, "w:1", 0.6)
        assert long_claim is not None and short_claim is not None
        keeper.keep(Held(long_claim.lease, 30.0))
        deadline = time.monotonic() + 5
        while keeper.wakeups == 0 and keeper._round is None:  # the thread has set its wait
            assert time.monotonic() < deadline
            time.sleep(0.01)
        short = Held(short_claim.lease, 0.6)
        keeper.keep(short)
        time.sleep(1.8)
        assert not short.lost and keeper.rounds >= 3
        # Still ours after three of its lease lengths: its lease was renewed all along.
        assert store.record_step(short_claim.lease, 0.6, []) is not None
    finally:
        keeper.close()


def test_one_keeper_round_is_one_statement_for_every_run_in_flight(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime(lease_seconds=0.6)
    ids = [rt.enqueue(sleeping(2.5)) for _ in range(6)]
    counting = CountingRenewals(rt.store)
    engine = rt.engine
    from tenure._keeper import Keeper

    keeper = Keeper(lambda: counting)  # type: ignore[arg-type, return-value]
    worker = Worker(
        Engine(counting, engine.tools, engine.models, engine.settings, keeper),  # type: ignore[arg-type]
        concurrency=6,
        poll_interval=0.05,
    )
    thread = run_worker(worker)
    wait_for(lambda: all(status(rt, i) is RunStatus.COMPLETED for i in ids))
    worker.stop()
    thread.join(10)
    keeper.close()
    assert keeper.rounds == len(counting.batches) >= 4
    assert max(counting.batches) == 6  # all six runs, one statement
    assert all(rt.status(i).requeue_count == 0 for i in ids)  # type: ignore[union-attr]


def _hung_tool_run(make_runtime: MakeRuntime, effect: ToolEffect) -> tuple[tenure.Runtime, str]:
    """A tool that hangs past its 0.4 s timeout under a 0.5 s lease, and a reaper looping."""
    rt = make_runtime(lease_seconds=0.5)
    release = threading.Event()

    @rt.tool(effect=effect, timeout=0.4)
    def hang() -> str:
        release.wait(20)
        return "late"

    run_id = rt.enqueue(
        RunRequest(
            prompt="p",
            model="scripted",
            tools=["hang"],
            script=[{"call": [{"tool": "hang"}]}, {"say": "ok"}],
        )
    )
    result: list[Any] = []
    segment = threading.Thread(target=lambda: result.append(rt.run_queued(run_id)), daemon=True)
    segment.start()
    wait_for(lambda: status(rt, run_id) is RunStatus.RUNNING)
    reaper = Reaper(rt.store, 3)
    wait_for(lambda: (reaper.run_once(), status(rt, run_id) is not RunStatus.RUNNING)[1])
    release.set()
    segment.join(10)
    assert result and result[0].outcome is Outcome.LEASE_LOST  # its late write was refused
    return rt, run_id


def test_a_read_only_tool_hung_past_its_timeout_loses_its_lease_and_is_requeued(
    make_runtime: MakeRuntime,
) -> None:
    rt, run_id = _hung_tool_run(make_runtime, ToolEffect.READ_ONLY)
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.requeue_count == 1
    assert EventKind.TOOL not in [e.kind for e in rt.events(run_id)]


def test_a_write_hung_past_its_timeout_leaves_its_fence_standing(
    make_runtime: MakeRuntime,
) -> None:
    rt, run_id = _hung_tool_run(make_runtime, ToolEffect.NON_IDEMPOTENT_WRITE)
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.FAILED
    assert run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE


def test_a_tool_sees_that_its_run_was_cancelled(make_runtime: MakeRuntime) -> None:
    rt = make_runtime(lease_seconds=0.6)
    seen: list[bool] = []

    @rt.tool(timeout=30)
    def long_read(ctx: tenure.ToolContext) -> str:
        while not ctx.cancelled:
            time.sleep(0.01)
        seen.append(ctx.cancelled)
        ctx.raise_if_cancelled()
        return "never"

    run_id = rt.enqueue(
        RunRequest(
            prompt="p",
            model="scripted",
            tools=["long_read"],
            script=[{"call": [{"tool": "long_read"}]}, {"say": "ok"}],
        )
    )
    result: list[Any] = []
    segment = threading.Thread(target=lambda: result.append(rt.run_queued(run_id)), daemon=True)
    segment.start()
    wait_for(lambda: status(rt, run_id) is RunStatus.RUNNING)
    time.sleep(0.2)
    assert rt.cancel(run_id)
    segment.join(10)
    assert seen == [True] and result[0].outcome is Outcome.CANCELLED
    assert [e.kind for e in rt.events(run_id)][-1] is EventKind.CANCELLED


def test_a_tool_that_never_returns_gives_its_slot_back(make_runtime: MakeRuntime) -> None:
    """Concurrency 1: the first run's tool hangs past its timeout on attempt 0; its slot is
    given back (the thread abandoned), so the second run completes while the tool still
    hangs; the first run is reaped, resumes and completes; the hung call's late result is
    never recorded."""
    rt = make_runtime(lease_seconds=0.6)
    unblock = threading.Event()

    @rt.tool(timeout=0.3)
    def stuck(ctx: tenure.ToolContext) -> int:
        if ctx.attempt == 0:
            unblock.wait(30)
        return ctx.attempt

    hung = rt.enqueue(
        RunRequest(
            prompt="p",
            model="scripted",
            tools=["stuck"],
            script=[{"call": [{"tool": "stuck"}]}, {"say": "ok"}],
        )
    )
    plain = rt.enqueue(sleeping(0.0))
    worker = rt.worker(concurrency=1, poll_interval=0.05)
    thread = run_worker(worker)
    try:
        wait_for(lambda: status(rt, plain) is RunStatus.COMPLETED, 15)
        assert not unblock.is_set()  # completed while the first tool still hangs
        wait_for(lambda: status(rt, hung) is RunStatus.COMPLETED, 15)
    finally:
        unblock.set()
        worker.stop()
        thread.join(10)
    assert not thread.is_alive()
    assert worker.inflight == 0
    tool_events = [e for e in rt.events(hung) if e.kind is EventKind.TOOL]
    assert [e.payload["result"] for e in tool_events] == [1]  # attempt 1's; never attempt 0's
    assert rt.status(hung).requeue_count == 1  # type: ignore[union-attr]
