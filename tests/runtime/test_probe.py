"""In-doubt writes resolved by a probe (SPEC §16), on both stores: each verdict, a probe that
raises or hangs, a run cancelled mid-probe, the reaper without the app, the budget, and the
redrive of a probe-able dead-letter."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure import EventKind, FailureClass, Outcome, Probe, RunRequest, RunStatus, ToolEffect
from tenure._ladder import Engine
from tenure._reaper import Reaper
from tenure._worker import Worker
from tenure.audit import audit
from tenure.store import Claimed, open_store

from .test_group_commit import LostCommit

MakeRuntime = Callable[..., tenure.Runtime]
WRITE = ToolEffect.NON_IDEMPOTENT_WRITE


class Ledger:
    """An outside system that keeps every payment under its idempotency key."""

    def __init__(self) -> None:
        self.rows: list[str] = []
        self.lock = threading.Lock()

    def pay(self, key: str) -> None:
        with self.lock:
            self.rows.append(key)

    def paid(self, key: str) -> bool:
        with self.lock:
            return key in self.rows


def payment_app(
    make_runtime: MakeRuntime,
    *,
    fail_after_paying: bool,
    probe: Callable[..., Any] | None = None,
    **runtime: Any,
) -> tuple[tenure.Runtime, Ledger, str]:
    """A run whose `pay` write fails on attempt 0 (after or before paying): its fence stands,
    so failure recovery sends it back in doubt."""
    rt = make_runtime(**runtime)
    ledger = Ledger()

    def check(ctx: tenure.ToolContext, amount: int) -> Probe:
        return (
            Probe.done({"paid": amount}) if ledger.paid(ctx.idempotency_key) else (Probe.not_done())
        )

    @rt.tool(effect=WRITE, timeout=2, probe=probe or check)
    def pay(ctx: tenure.ToolContext, amount: int) -> dict[str, int]:
        if ctx.attempt == 0 and not fail_after_paying:
            raise tenure.RetryableError("gateway timeout", failure_class=FailureClass.TIMEOUT)
        ledger.pay(ctx.idempotency_key)
        if ctx.attempt == 0:
            raise tenure.RetryableError("no answer", failure_class=FailureClass.TIMEOUT)
        return {"paid": amount}

    run_id = rt.enqueue(
        RunRequest(
            prompt="pay",
            model="scripted",
            tools=["pay"],
            script=[{"call": [{"tool": "pay", "args": {"amount": 7}}]}, {"say": "paid"}],
        )
    )
    return rt, ledger, run_id


def kinds(rt: tenure.Runtime, run_id: str) -> list[str]:
    return [str(e.kind) for e in rt.events(run_id)]


def in_doubt(rt: tenure.Runtime, run_id: str) -> None:
    """The first segment fails inside the write: requeued in doubt, fence standing."""
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED
    assert run.pending_effect is WRITE and run.fence_probe and run.requeue_count == 1
    requeued = [e for e in rt.events(run_id) if e.kind is EventKind.REQUEUED]
    assert requeued[-1].payload["cause"] == "in_doubt"


def probe_event(rt: tenure.Runtime, run_id: str) -> dict[str, Any]:
    (found,) = [e.payload for e in rt.events(run_id) if e.kind is EventKind.PROBE]
    return found


def test_done_records_the_write_once_with_the_probes_result(make_runtime: MakeRuntime) -> None:
    rt, ledger, run_id = payment_app(make_runtime, fail_after_paying=True)
    in_doubt(rt, run_id)
    second = rt.run_queued(run_id)
    assert second is not None and second.outcome is Outcome.COMPLETED
    assert len(ledger.rows) == 1  # the write happened once, and was not repeated
    probe = probe_event(rt, run_id)
    assert probe["verdict"] == "done" and probe["result"] == {"paid": 7}
    assert probe["idempotency_key"] == ledger.rows[0] and probe["name"] == "pay"
    (tool,) = [e.payload for e in rt.events(run_id) if e.kind is EventKind.TOOL]
    assert tool["resolved_by"] == "probe" and tool["result"] == {"paid": 7}
    assert tool["idempotency_key"] == ledger.rows[0]
    seq = kinds(rt, run_id)
    assert seq.index("probe") == seq.index("tool") - 1  # one transaction, probe first
    run = rt.status(run_id)
    assert run is not None and run.pending_effect is None and not run.fence_probe
    report = audit(rt.store)
    assert report.ok, report.summary()


def test_not_done_runs_the_write_once_with_the_same_key(make_runtime: MakeRuntime) -> None:
    rt, ledger, run_id = payment_app(make_runtime, fail_after_paying=False)
    in_doubt(rt, run_id)
    second = rt.run_queued(run_id)
    assert second is not None and second.outcome is Outcome.COMPLETED
    assert probe_event(rt, run_id)["verdict"] == "not_done"
    (tool,) = [e.payload for e in rt.events(run_id) if e.kind is EventKind.TOOL]
    assert "resolved_by" not in tool and tool["result"] == {"paid": 7}
    assert ledger.rows == [tool["idempotency_key"]] == [probe_event(rt, run_id)["idempotency_key"]]
    report = audit(rt.store)
    assert report.ok, report.summary()


@pytest.mark.parametrize(
    ("probe", "reason"),
    [
        (lambda ctx, amount: Probe.unknown("the gateway does not say"), "does not say"),
        (lambda ctx, amount: 1 / 0, "raised"),
        (lambda ctx, amount: time.sleep(5), "did not answer within"),
        (lambda ctx, amount: "yes", "not a tenure.Probe"),
    ],
    ids=["unknown", "raises", "times_out", "not_a_probe"],
)
def test_a_probe_that_cannot_tell_dead_letters_with_the_fence_standing(
    make_runtime: MakeRuntime, probe: Callable[..., Any], reason: str
) -> None:
    rt, ledger, run_id = payment_app(make_runtime, fail_after_paying=True, probe=probe)
    in_doubt(rt, run_id)
    second = rt.run_queued(run_id)
    assert second is not None and second.outcome is Outcome.FAILED
    run = rt.status(run_id)
    assert run is not None and run.termination_reason is tenure.TerminationReason.NOT_RETRYABLE
    assert run.pending_effect is WRITE and run.fence_probe
    found = probe_event(rt, run_id)
    assert found["verdict"] == "unknown" and reason in found["reason"]
    assert kinds(rt, run_id)[-2:] == ["probe", "dead_lettered"]
    assert len(ledger.rows) == 1  # never repeated
    report = audit(rt.store)
    assert report.ok, report.summary()


def test_a_run_cancelled_while_its_probe_runs_writes_nothing(make_runtime: MakeRuntime) -> None:
    started = threading.Event()

    def slow_probe(ctx: tenure.ToolContext, amount: int) -> Probe:
        started.set()
        while not ctx.cancelled:
            time.sleep(0.01)
        return Probe.done({"paid": amount})

    rt, _, run_id = payment_app(
        make_runtime, fail_after_paying=True, probe=slow_probe, lease_seconds=0.6
    )
    in_doubt(rt, run_id)
    result: list[Any] = []
    segment = threading.Thread(target=lambda: result.append(rt.run_queued(run_id)))
    segment.start()
    assert started.wait(10)
    before = kinds(rt, run_id)
    assert rt.cancel(run_id)
    segment.join(10)
    assert result[0].outcome is Outcome.CANCELLED
    assert kinds(rt, run_id) == [*before, "cancelled"]  # no probe event, no tool event
    run = rt.status(run_id)
    assert run is not None and run.pending_effect is WRITE  # a cancel keeps the evidence


def test_the_reaper_without_the_app_requeues_a_probeable_fence_in_doubt(
    make_runtime: MakeRuntime, db_url: str
) -> None:
    """The decision needs no app: the row says the fence's tool has a probe."""
    rt, _, run_id = payment_app(make_runtime, fail_after_paying=True, lease_seconds=0.3)
    store = rt.store
    claimed = store.claim_run(run_id, "worker:dead:1:1", 0.3)
    assert claimed is not None
    call = {"name": "pay", "args": {"amount": 7}, "idempotency_key": "k", "turn": 0, "index": 0}
    assert store.mark_fence(claimed.lease, WRITE, 0.3, call, True)
    time.sleep(0.5)
    bare = open_store(db_url)  # no tools, no models: what `tenure reap` from cron has
    try:
        report = Reaper(bare, 3).run_once()
    finally:
        bare.close()
    assert report.requeued == 1 and report.dead_lettered == 0
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.requeue_count == 1
    assert run.pending_effect is WRITE and run.fence_probe
    assert rt.events(run_id)[-1].payload["cause"] == "in_doubt"


def test_repeated_in_doubt_requeues_spend_the_budget(make_runtime: MakeRuntime) -> None:
    def never_sure(ctx: tenure.ToolContext, amount: int) -> Probe:
        return Probe.not_done()

    rt = make_runtime(max_requeues=2)

    @rt.tool(effect=WRITE, probe=never_sure)
    def pay(ctx: tenure.ToolContext, amount: int) -> None:
        raise tenure.RetryableError("no answer", failure_class=FailureClass.TIMEOUT)

    run_id = rt.enqueue(
        RunRequest(
            prompt="pay",
            model="scripted",
            tools=["pay"],
            script=[{"call": [{"tool": "pay", "args": {"amount": 7}}]}, {"say": "paid"}],
        )
    )
    outcomes = [rt.run_queued(run_id) for _ in range(3)]
    assert [o.outcome for o in outcomes if o] == [
        Outcome.REQUEUED,
        Outcome.REQUEUED,
        Outcome.FAILED,
    ]
    run = rt.status(run_id)
    assert run is not None and run.termination_reason is tenure.TerminationReason.RETRIES_EXHAUSTED
    assert run.pending_effect is WRITE and run.fence_probe  # kept as evidence
    causes = [e.payload["cause"] for e in rt.events(run_id) if e.kind is EventKind.REQUEUED]
    assert causes == ["in_doubt", "in_doubt"]

    # A probe-able dead-letter is redriven without force: back in doubt, fence kept.
    assert rt.redrive(run_id)
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED
    assert run.pending_effect is WRITE and run.fence_probe
    third = rt.run_queued(run_id)
    assert third is not None
    verdicts = [e.payload["verdict"] for e in rt.events(run_id) if e.kind is EventKind.PROBE]
    assert verdicts[-1] == "not_done"
    report = audit(rt.store, max_requeues=2)
    assert report.ok, report.summary()


def test_a_probe_only_for_a_non_idempotent_write(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()
    with pytest.raises(tenure.InvalidRequest, match="probe"):

        @rt.tool(effect=ToolEffect.IDEMPOTENT_WRITE, probe=lambda ctx: Probe.not_done())
        def save() -> None: ...


def test_the_dashboard_shows_the_verdict_and_a_redrive_plan_that_probes(
    make_runtime: MakeRuntime,
) -> None:
    from tenure.web._views import redrive_plan, timeline

    def never_sure(ctx: tenure.ToolContext, amount: int) -> Probe:
        return Probe.unknown("the gateway does not say")

    rt, _, run_id = payment_app(make_runtime, fail_after_paying=True, probe=never_sure)
    in_doubt(rt, run_id)
    rt.run_queued(run_id)  # the probe cannot tell: dead-lettered, fence standing
    run = rt.status(run_id)
    assert run is not None and run.is_dead_letter and run.fence_probe
    titles = [step.title for step in timeline(rt.events(run_id), reveal=False)]
    assert "probe of pay: could not tell" in titles
    plan = redrive_plan(
        run,
        rt.events(run_id),
        has_request=True,
        effect_of=lambda name: WRITE,
        reveal=False,
    )
    assert plan.redrivable and not plan.needs_force
    assert "probe" in plan.why and "in doubt" in plan.why


def test_a_drain_sends_a_probeable_write_back_in_doubt_after_its_deadline(
    make_runtime: MakeRuntime,
) -> None:
    """A drain whose grace ends while a probe-able write runs: the run goes back in doubt, but
    claimable only once the tool's timeout is over (a probe asked sooner could say `not_done`
    while this process's write is still landing), and the tool sees `ctx.cancelled`."""
    rt = make_runtime()
    ledger = Ledger()
    writing, told = threading.Event(), threading.Event()

    def check(ctx: tenure.ToolContext) -> Probe:
        return Probe.done("paid") if ledger.paid(ctx.idempotency_key) else Probe.not_done()

    @rt.tool(effect=WRITE, timeout=3, probe=check)
    def pay(ctx: tenure.ToolContext) -> str:
        writing.set()
        deadline = time.monotonic() + 5
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        if ctx.cancelled:
            told.set()
            return "stopped before paying"
        ledger.pay(ctx.idempotency_key)
        return "paid"

    run_id = rt.enqueue(
        RunRequest(
            prompt="pay",
            model="scripted",
            tools=["pay"],
            script=[{"call": [{"tool": "pay"}]}, {"say": "paid"}],
        )
    )
    worker = rt.worker(concurrency=1, poll_interval=0.02, grace_seconds=0.2)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    assert writing.wait(10)
    started = time.time()
    worker.stop()
    thread.join(10)
    assert told.wait(5), "the tool was not told that its run left it"
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.fence_probe
    assert [e.payload.get("cause") for e in rt.events(run_id)][-1] == "in_doubt"
    # claimable no sooner than the write's deadline: 3 s after it started, less the grace
    assert run.available_at.timestamp() >= started + 2.5
    assert rt.run_queued(run_id) is None  # not claimable yet
    assert not ledger.rows


def test_a_probe_past_its_timeout_dead_letters_even_when_the_wait_wakes_late(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The segment waiting for its probe wakes up late (a loaded machine): its timeout is
    still its own verdict, never lost to the worker's hung-slot check (which would leave the
    run to the reaper, charged, in doubt again)."""
    from tenure import _indoubt

    monkeypatch.setattr(_indoubt, "PROBE_POLL_SECONDS", 0.9)  # wakes at 0.9, 1.8, 2.7 s

    def hangs(ctx: tenure.ToolContext, amount: int) -> Probe:
        time.sleep(10)
        return Probe.done({"paid": amount})

    rt, ledger, run_id = payment_app(make_runtime, fail_after_paying=True, probe=hangs)
    in_doubt(rt, run_id)
    worker = rt.worker(concurrency=1, burst=True, poll_interval=0.02)
    worker.run()
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.FAILED, run
    assert run.termination_reason is tenure.TerminationReason.NOT_RETRYABLE
    assert run.requeue_count == 1 and run.pending_effect is WRITE
    found = probe_event(rt, run_id)
    assert found["verdict"] == "unknown" and "did not answer within 2s" in found["reason"]
    assert len(ledger.rows) == 1


# -- a run back in doubt that a worker claims but does not start (issue #30) ---------------


def worker_on(rt: tenure.Runtime, store: Any, **kwargs: Any) -> Worker:
    """A worker of `rt`'s app on `store` (the real store, wrapped to force a moment)."""
    engine = rt.engine
    return Worker(Engine(store, engine.tools, engine.models, engine.settings), **kwargs)


def run_worker_until(worker: Worker, done: Callable[[], bool], timeout: float = 20.0) -> None:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the run did not get where it should in time"
        time.sleep(0.02)
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()


def requeue_causes(rt: tenure.Runtime, run_id: str) -> list[str]:
    return [e.payload["cause"] for e in rt.events(run_id) if e.kind is EventKind.REQUEUED]


def still_in_doubt(rt: tenure.Runtime, run_id: str) -> None:
    """Back in the queue as it came: fence and probe standing, charged only once (for the
    in-doubt requeue), the attempt of the claim given back."""
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.claimed_by == ""
    assert run.pending_effect is WRITE and run.fence_probe
    assert run.requeue_count == 1 and run.attempt == 0


def probe_resolves_it(rt: tenure.Runtime, ledger: Ledger, run_id: str) -> None:
    """The run completed through its probe, asked about the interrupted call (its key is the
    one the write used): the write happened once."""
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED and run.requeue_count == 1
    probe = probe_event(rt, run_id)
    assert probe["verdict"] == "done" and probe["idempotency_key"] == ledger.rows[0]
    assert len(ledger.rows) == 1
    report = audit(rt.store)
    assert report.ok, report.summary()


def test_a_worker_without_the_write_tool_hands_an_in_doubt_run_back_for_its_probe(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tenure.store._owner.UNSERVED_BASE_SECONDS", 0.0)
    rt, ledger, run_id = payment_app(make_runtime, fail_after_paying=True)
    in_doubt(rt, run_id)
    plain = make_runtime()  # the model, but not the `pay` tool nor its probe
    for _ in range(3):  # every time, never charged: the budget (3) would be spent otherwise
        handed = plain.run_queued(run_id)
        assert handed is not None and handed.outcome is Outcome.REQUEUED
        still_in_doubt(rt, run_id)
    assert requeue_causes(rt, run_id) == ["in_doubt", "unserved", "unserved", "unserved"]
    assert not [e for e in rt.events(run_id) if e.kind is EventKind.PROBE]
    served = rt.run_queued(run_id)
    assert served is not None and served.outcome is Outcome.COMPLETED
    probe_resolves_it(rt, ledger, run_id)


class StopOnClaim:
    """The real store; the worker is told to stop as soon as a commit claimed `run_id`, so
    that the run waits in its buffer when the drain begins."""

    def __init__(self, store: Any, run_id: str) -> None:
        self._store, self.run_id = store, run_id
        self.worker: Worker | None = None
        self.stopped = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def settle_and_claim(self, *args: Any) -> tuple[list[list[int] | None], list[Claimed]]:
        settled, claimed = self._store.settle_and_claim(*args)
        if any(c.lease.run_id == self.run_id for c in claimed):
            assert self.worker is not None
            self.worker.stop()
            self.stopped = True
        return settled, claimed


def test_a_drain_hands_a_buffered_in_doubt_run_back_with_its_fence(
    make_runtime: MakeRuntime,
) -> None:
    rt, ledger, run_id = payment_app(make_runtime, fail_after_paying=True)
    in_doubt(rt, run_id)
    store = StopOnClaim(rt.store, run_id)
    worker = worker_on(rt, store, concurrency=1, poll_interval=0.02)
    store.worker = worker
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive() and store.stopped
    assert worker.stats.released == 1
    still_in_doubt(rt, run_id)
    handed = [e.payload for e in rt.events(run_id) if e.kind is EventKind.REQUEUED][-1]
    assert handed["cause"] == "unstarted" and handed["why"] == "the worker is stopping"
    served = rt.run_queued(run_id)
    assert served is not None and served.outcome is Outcome.COMPLETED
    probe_resolves_it(rt, ledger, run_id)


def test_an_in_doubt_run_claimed_by_a_lost_commit_is_handed_back_for_its_probe(
    make_runtime: MakeRuntime,
) -> None:
    """No slot runs an orphaned claim: it goes back with its fence, then the worker claims it
    again and asks the probe (the lease is long: the reaper would not come in this test)."""
    rt, ledger, run_id = payment_app(make_runtime, fail_after_paying=True, lease_seconds=60)
    in_doubt(rt, run_id)
    store = LostCommit(rt.store)
    worker = worker_on(rt, store, concurrency=1, poll_interval=0.02)
    run_worker_until(worker, lambda: rt.status(run_id).status is RunStatus.COMPLETED)  # type: ignore[union-attr]
    assert store.lost == [run_id]
    assert requeue_causes(rt, run_id) == ["in_doubt", "unstarted"]
    probe_resolves_it(rt, ledger, run_id)
