"""The Store against a plain Python model: hypothesis drives random sequences of the §5 and §7
transitions (enqueue, claim, heartbeat, fence, settle, fail, cancel, drain, redrive, reap,
time passing, zombie writes) and checks, after every rule, that each run row is what the
model says, and at the end of each sequence, the audit.

Time passes for real: a lease is either long (never expires here) or short, and the `wait`
rule sleeps past a short lease. Between rules a short lease may or may not have expired yet
(by the database's clock), so the model knows three states — surely live, surely expired,
unsure — and accepts either outcome only when unsure.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tenure import _policy
from tenure._reaper import Reaper
from tenure._recovery import dead_letter as _dead_letter
from tenure._types import (
    EventKind,
    FailureClass,
    RunStatus,
    TerminationReason,
    ToolEffect,
)
from tenure.audit import audit
from tenure.store import Lease, NewEvent, NewRun, Settlement, Store, open_store
from tenure.store._base import StaleRun

LONG = 60.0
SHORT = 0.15
MARGIN = 0.05
MAX_REQUEUES = 2
MAX_RUNS = 4  # few runs at a time, many transitions each
REQUEST = json.dumps({"prompt": "model", "model": "scripted", "script": [{"say": "ok"}]})
pytestmark = pytest.mark.slow


@dataclass
class ModelRun:
    id: str
    status: RunStatus = RunStatus.QUEUED
    reason: TerminationReason | None = None
    token: int = 0
    attempt: int = 0
    claims: int = 0
    owner: str = ""
    requeue_count: int = 0
    fence: ToolEffect | None = None
    pending: tuple[str, str] | None = None  # (call id, idempotency key) of the open tool call
    lease: Lease | None = None
    stale: list[Lease] = field(default_factory=list)
    granted: tuple[float, float, float] = (0.0, 0.0, 0.0)  # call start, call end, length

    def expiry(self) -> str:
        """`live`, `expired` or `unsure`, by this process's clock around the grant."""
        start, end, length = self.granted
        now = time.monotonic()
        if now < start + length - MARGIN:
            return "live"
        if now > end + length + MARGIN:
            return "expired"
        return "unsure"


class StoreMachine(RuleBasedStateMachine):
    url = ""

    def __init__(self) -> None:
        super().__init__()
        self.store: Store = open_store(self.url)
        self.runs: list[ModelRun] = []
        self.owners = itertools.count(1)
        self.seen: list[StaleRun] = []  # what a stalled reaper read

    # -- helpers -------------------------------------------------------------------------

    def _pick(self, i: int, *statuses: RunStatus) -> ModelRun | None:
        found = [r for r in self.runs if not statuses or r.status in statuses]
        return found[i % len(found)] if found else None

    def _grant(self, run: ModelRun, length: float, start: float) -> None:
        run.granted = (start, time.monotonic(), length)

    def _end_segment(self, run: ModelRun) -> None:
        if run.lease is not None:
            run.stale.append(run.lease)
        run.lease, run.owner = None, ""

    # -- rules ---------------------------------------------------------------------------

    @precondition(lambda self: sum(not r.status.is_terminal for r in self.runs) < MAX_RUNS)
    @rule()
    def enqueue(self) -> None:
        run_id = str(uuid.uuid4())
        new = NewRun(run_id, "default", REQUEST, None, 0.0, (NewEvent(EventKind.REQUEST, {}),))
        assert self.store.enqueue(new) == (run_id, True)
        self.runs.append(ModelRun(run_id))

    @precondition(lambda self: any(r.status is RunStatus.QUEUED for r in self.runs))
    @rule(long=st.booleans())
    def claim(self, long: bool) -> None:
        owner = f"worker:model:{next(self.owners)}"
        length = LONG if long else SHORT
        start = time.monotonic()
        claimed = self.store.claim(owner, None, length, 1)
        queued = [r for r in self.runs if r.status is RunStatus.QUEUED]
        assert len(claimed) == (1 if queued else 0)
        if not claimed:
            return
        run = next(r for r in queued if r.id == claimed[0].lease.run_id)
        run.attempt = run.attempt + 1 if run.claims else 0
        run.token += 1
        run.claims += 1
        run.status, run.owner, run.lease = RunStatus.RUNNING, owner, claimed[0].lease
        assert claimed[0].lease.token == run.token and claimed[0].lease.attempt == run.attempt
        assert claimed[0].requeue_count == run.requeue_count
        self._grant(run, length, start)

    @precondition(lambda self: any(r.lease for r in self.runs))
    @rule(i=st.integers(0, 1000), long=st.booleans())
    def step(self, i: int, long: bool) -> None:
        """A heartbeat with the step's event: a model turn making one call, or its result."""
        run = self._pick(i, RunStatus.RUNNING)
        assert run is not None and run.lease is not None
        lease, length, start = run.lease, LONG if long else SHORT, time.monotonic()
        seq_hint = len(self.store.events(run.id))
        if run.pending is None:
            call_id = f"call_{seq_hint}"
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "function": {"name": "t", "arguments": "{}"}}],
            }
            event = NewEvent(EventKind.LLM, {"message": message})
        else:
            event = self._tool_event(run, ToolEffect.READ_ONLY)
        sequences = self.store.record_step(lease, length, [event])
        assert sequences == [seq_hint]
        if run.pending is None:
            run.pending = (f"call_{seq_hint}", f"{run.id}:{seq_hint}")
        else:
            run.pending = None
        self._grant(run, length, start)

    def _tool_event(self, run: ModelRun, effect: ToolEffect) -> NewEvent:
        assert run.pending is not None
        call_id, key = run.pending
        payload = {"name": "t", "call_id": call_id, "effect": str(effect), "idempotency_key": key}
        return NewEvent(EventKind.TOOL, {**payload, "result": 1, "error": None})

    @precondition(lambda self: any(r.lease and r.pending and not r.fence for r in self.runs))
    @rule(i=st.integers(0, 1000), idempotent=st.booleans(), long=st.booleans())
    def fence(self, i: int, idempotent: bool, long: bool) -> None:
        candidates = [r for r in self.runs if r.lease and r.pending and not r.fence]
        run = candidates[i % len(candidates)]
        assert run.lease is not None
        effect = ToolEffect.IDEMPOTENT_WRITE if idempotent else ToolEffect.NON_IDEMPOTENT_WRITE
        start, length = time.monotonic(), LONG if long else SHORT
        assert self.store.mark_fence(run.lease, effect, length)
        run.fence = effect
        self._grant(run, length, start)

    @precondition(lambda self: any(r.lease and r.fence for r in self.runs))
    @rule(i=st.integers(0, 1000))
    def unfence(self, i: int) -> None:
        candidates = [r for r in self.runs if r.lease and r.fence]
        run = candidates[i % len(candidates)]
        assert run.lease is not None and run.fence is not None
        start = time.monotonic()
        sequence = self.store.clear_fence(run.lease, LONG, self._tool_event(run, run.fence))
        assert sequence == len(self.store.events(run.id)) - 1
        run.fence, run.pending = None, None
        self._grant(run, LONG, start)

    @precondition(lambda self: any(r.lease and not r.pending for r in self.runs))
    @rule(i=st.integers(0, 1000))
    def complete(self, i: int) -> None:
        candidates = [r for r in self.runs if r.lease and not r.pending]
        run = candidates[i % len(candidates)]
        assert run.lease is not None
        settlement = Settlement(
            RunStatus.COMPLETED,
            TerminationReason.COMPLETED,
            output="ok",
            events=(
                NewEvent(EventKind.LLM, {"message": {"role": "assistant", "content": "ok"}}),
                NewEvent(EventKind.ASSEMBLED, {"output": "ok"}),
            ),
        )
        assert self.store.settle(run.lease, settlement) is not None
        run.status, run.reason, run.fence = RunStatus.COMPLETED, TerminationReason.COMPLETED, None
        self._end_segment(run)

    @precondition(lambda self: any(r.lease for r in self.runs))
    @rule(i=st.integers(0, 1000), failure=st.sampled_from(list(FailureClass)))
    def fail(self, i: int, failure: FailureClass) -> None:
        """Failure recovery as the ladder does it (SPEC §6.7)."""
        run = self._pick(i, RunStatus.RUNNING)
        assert run is not None and run.lease is not None
        verdict = _policy.recovery(failure, run.fence, run.requeue_count, MAX_REQUEUES)
        if verdict is None:
            assert self.store.requeue(run.lease, 0.0, failure, "model failure")
            run.status, run.fence = RunStatus.QUEUED, None
            run.requeue_count += 1
        else:
            settlement = _dead_letter(verdict, failure, "model failure", "failure")
            assert self.store.settle(run.lease, settlement) is not None
            run.status, run.reason = RunStatus.FAILED, verdict.reason
        self._end_segment(run)

    @precondition(lambda self: any(r.lease for r in self.runs))
    @rule(i=st.integers(0, 1000))
    def drain(self, i: int) -> None:
        run = self._pick(i, RunStatus.RUNNING)
        assert run is not None and run.lease is not None
        released = self.store.release(run.lease)
        assert released == (run.fence is not ToolEffect.NON_IDEMPOTENT_WRITE)
        if released:
            run.status, run.fence = RunStatus.QUEUED, None
            self._end_segment(run)

    @precondition(lambda self: bool(self.runs))
    @rule(i=st.integers(0, 1000))
    def cancel(self, i: int) -> None:
        run = self._pick(i)
        assert run is not None
        assert self.store.cancel(run.id) == (not run.status.is_terminal)
        if not run.status.is_terminal:
            run.status, run.reason = RunStatus.CANCELLED, TerminationReason.CANCELLED
            self._end_segment(run)

    @precondition(lambda self: any(r.status is RunStatus.FAILED for r in self.runs))
    @rule(i=st.integers(0, 1000), force=st.booleans())
    def redrive(self, i: int, force: bool) -> None:
        run = self._pick(i, RunStatus.FAILED)
        assert run is not None
        allowed = force or run.fence is not ToolEffect.NON_IDEMPOTENT_WRITE
        assert self.store.redrive(run.id, force) == allowed
        if allowed:
            run.status, run.reason, run.fence, run.requeue_count = RunStatus.QUEUED, None, None, 0

    @rule(wait=st.booleans())
    def reap(self, wait: bool) -> None:
        if wait:
            self.wait()
        before = {r.id: r.expiry() for r in self.runs if r.status is RunStatus.RUNNING}
        Reaper(self.store, MAX_REQUEUES).run_once(limit=1000)
        for run in self.runs:
            if run.id not in before:
                continue
            row = self.store.get_run(run.id)
            assert row is not None
            if row.status is RunStatus.RUNNING:
                assert before[run.id] != "expired", f"an expired lease was not reaped: {run}"
                continue
            assert before[run.id] != "live", f"a live lease was reaped: {run}"
            verdict = _policy.reap(run.fence, True, run.requeue_count, MAX_REQUEUES)
            if verdict is None:
                assert row.status is RunStatus.QUEUED
                run.status, run.fence = RunStatus.QUEUED, None
                run.requeue_count += 1
            else:
                assert row.status is RunStatus.FAILED
                run.status, run.reason = RunStatus.FAILED, verdict.reason
            self._end_segment(run)

    @rule()
    def reap_read(self) -> None:
        """A reaper reads its candidates and stalls; `reap_write` resumes it later, after
        any number of other transitions."""
        self.seen = self.store.stale_runs(1000)

    @precondition(lambda self: bool(self.seen))
    @rule()
    def reap_write(self) -> None:
        """The stalled reaper writes the decisions it made on its read. Each applies only
        while the run is still exactly as read (token, fence, budget) and still stale."""
        for seen in self.seen:
            run = next(r for r in self.runs if r.id == seen.run_id)
            unchanged = (
                run.status is RunStatus.RUNNING
                and run.token == seen.lease_token
                and run.fence == seen.pending_effect
                and run.requeue_count == seen.requeue_count
            )
            expiry = run.expiry() if unchanged else "changed"
            verdict = _policy.reap(
                seen.pending_effect, seen.has_request, seen.requeue_count, MAX_REQUEUES
            )
            if verdict is None:
                won = self.store.requeue_stale(seen)
            else:
                won = self.store.dead_letter_stale(seen, verdict.reason, verdict.why)
            allowed = {"expired": {True}, "unsure": {True, False}}.get(expiry, {False})
            assert won in allowed, (seen, run, expiry)
            if not won:
                continue
            if verdict is None:
                run.status, run.fence = RunStatus.QUEUED, None
                run.requeue_count += 1
            else:
                run.status, run.reason = RunStatus.FAILED, verdict.reason
            self._end_segment(run)
        self.seen = []

    @precondition(lambda self: any(r.status is RunStatus.RUNNING for r in self.runs))
    @rule()
    def wait(self) -> None:
        """Let every short lease run out (the database's clock moves; nothing is mocked)."""
        time.sleep(SHORT + 2 * MARGIN)

    @precondition(lambda self: any(r.stale for r in self.runs))
    @rule(i=st.integers(0, 1000), j=st.integers(0, 1000))
    def zombie(self, i: int, j: int) -> None:
        """A segment that lost its lease tries every write it has: none applies."""
        candidates = [r for r in self.runs if r.stale]
        run = candidates[i % len(candidates)]
        old = run.stale[j % len(run.stale)]
        before = (self.store.get_run(run.id), len(self.store.events(run.id)))
        step = NewEvent(EventKind.LLM, {"message": {"role": "assistant", "content": "late"}})
        assert self.store.record_step(old, LONG, [step]) is None
        assert not self.store.mark_fence(old, ToolEffect.NON_IDEMPOTENT_WRITE, LONG)
        assert self.store.clear_fence(old, LONG, step) is None
        assert not self.store.requeue(old, 0.0, FailureClass.TIMEOUT, "late")
        assert not self.store.release(old)
        settled = Settlement(RunStatus.COMPLETED, TerminationReason.COMPLETED, output="late")
        assert self.store.settle(old, settled) is None
        after = (self.store.get_run(run.id), len(self.store.events(run.id)))
        assert _comparable(before[0]) == _comparable(after[0]) and before[1] == after[1]

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def rows_match_the_model(self) -> None:
        for run in self.runs:
            row = self.store.get_run(run.id)
            assert row is not None
            assert row.status is run.status, (row, run)
            assert row.termination_reason == run.reason
            assert row.lease_token == run.token and row.requeue_count == run.requeue_count
            assert row.claimed_by == run.owner
            assert (row.lease_expires is not None) == (run.status is RunStatus.RUNNING)
            if run.claims:
                assert row.attempt == run.attempt
            if run.status is not RunStatus.CANCELLED:  # a cancel keeps the fence as evidence
                assert row.pending_effect == run.fence, (row, run)
            sequences = [e.sequence for e in self.store.events(run.id)]
            assert sequences == list(range(len(sequences)))

    def teardown(self) -> None:
        try:
            for run in self.runs:  # leave nothing for the next sequence's reaper or claims
                self.store.cancel(run.id)
            report = audit(self.store, max_requeues=MAX_REQUEUES)
            assert report.ok, report.summary()
        finally:
            self.store.close()


def _comparable(row: object) -> object:
    if row is None:
        return None
    return {k: v for k, v in vars(row).items() if k != "updated_at"}


def test_the_store_follows_the_model(db_url: str) -> None:
    store = open_store(db_url)
    store.migrate()
    store.close()
    StoreMachine.url = db_url
    machine = StoreMachine.TestCase
    machine.settings = settings(
        max_examples=15,
        stateful_step_count=35,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )
    machine().runTest()
