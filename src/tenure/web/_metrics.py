"""Prometheus metrics: runs by status from the store at every scrape, and counters this
process observes as its segments and reaper passes go through the store.

Observation needs no hook in the core: `instrument(runtime)` puts an `ObservedStore` in front
of the runtime's store, and every guarded transition the worker, the ladder and the reaper
make is seen there with its result (a claim, a requeue and its cause, a dead-letter and its
reason, a guarded write that matched nothing — a lost lease —, a reaper pass). The wrapper
only reads what goes through; it never changes an argument or a result.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tenure._heartbeat import WorkerState, worker_state
from tenure._types import EventKind, RunStatus, TerminationReason, ToolEffect, Usage
from tenure.store._base import (
    NO_USAGE,
    Claimed,
    Lease,
    NewEvent,
    NewRun,
    Settlement,
    StaleRun,
    Store,
)
from tenure.store._records import QUEUE_TOTALS_WINDOW

if TYPE_CHECKING:
    from tenure.runtime import Runtime
    from tenure.web._otel import Tracing

log = logging.getLogger("tenure.web")

STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# Segments whose end this process never saw (a crashed slot) are forgotten past this many.
MAX_TRACKED_SEGMENTS = 10_000


class RunsCollector(Collector):
    """`tenure_runs{status}` and `tenure_runs_ended{reason}`, read from the store per scrape."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("tenure_database_up", "1 if the last scrape read the store")
        try:
            raw = self.store.run_counts()
        except Exception as exc:  # a scrape must answer even when the database does not
            log.warning("metrics: cannot read run counts: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        by_status = GaugeMetricFamily("tenure_runs", "Runs by status", labels=["status"])
        by_reason = GaugeMetricFamily(
            "tenure_runs_ended", "Ended runs by termination reason", labels=["reason"]
        )
        statuses = dict.fromkeys(RunStatus, 0)
        reasons = dict.fromkeys(TerminationReason, 0)
        for (status, reason), n in raw.items():
            statuses[status] += n
            if reason is not None:
                reasons[reason] += n
        for status, n in statuses.items():
            by_status.add_metric([str(status)], n)
        for reason, n in reasons.items():
            by_reason.add_metric([str(reason)], n)
        yield up
        yield by_status
        yield by_reason


# The workers gauge reads at most this many worker rows per scrape.
WORKERS_SCAN_LIMIT = 1_000


class WorkersCollector(Collector):
    """`tenure_workers{state}`: worker processes by state (`running`, `stopping`, `dead`,
    `stopped`), from their own heartbeat rows, read per scrape. A dead worker counts here
    before its leases expire."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        try:
            now = self.store.now()
            rows = self.store.workers(WORKERS_SCAN_LIMIT)
        except Exception as exc:  # tenure_database_up already says the store did not answer
            log.warning("metrics: cannot read workers: %s", exc)
            return
        states = dict.fromkeys(WorkerState, 0)
        for row in rows:
            states[worker_state(row, now)] += 1
        gauge = GaugeMetricFamily(
            "tenure_workers", "Worker processes by state, from their heartbeats", labels=["state"]
        )
        for state, n in states.items():
            gauge.add_metric([str(state)], n)
        yield gauge


# Per-queue gauges read at most this many runs of each non-terminal status per scrape (the
# store has no per-queue count yet).
QUEUE_SCAN_LIMIT = 10_000
_ACTIVE = (
    RunStatus.QUEUED,
    RunStatus.RUNNING,
    RunStatus.WAITING_FOR_APPROVAL,
    RunStatus.WAITING_FOR_INPUT,
    RunStatus.WAITING_FOR_CHILDREN,
)


class QueuesCollector(Collector):
    """Per queue, read from the store per scrape: `tenure_queue_runs{queue,status}` (runs not
    yet ended), `tenure_queue_oldest_ready_seconds{queue}` (how long the longest-waiting
    claimable run has waited), `tenure_leases_expired{queue}`: running runs whose lease
    has expired and that no reaper has handled yet (a dead worker shows here first), and
    `tenure_queue_paused{queue}` with `tenure_queues_paused` (how many are paused), and
    `tenure_queue_tokens{queue,direction}` / `tenure_queue_cost{queue}`: what its runs not
    yet ended and those that ended in the last 24 h spent (Store.queue_totals)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        try:
            now = self.store.now()
            runs = [r for s in _ACTIVE for r in self.store.runs(s, limit=QUEUE_SCAN_LIMIT)]
            paused = [p.queue for p in self.store.paused_queues()]
            totals = self.store.queue_totals(QUEUE_TOTALS_WINDOW)
        except Exception as exc:  # tenure_database_up already says the store did not answer
            log.warning("metrics: cannot read queues: %s", exc)
            return
        paused_count = GaugeMetricFamily(
            "tenure_queues_paused",
            "Queues paused by an operator (workers claim none of their runs)",
        )
        paused_count.add_metric([], len(paused))
        paused_one = GaugeMetricFamily(
            "tenure_queue_paused",
            "1 while a queue is paused (workers claim none of its runs), else 0",
            labels=["queue"],
        )
        by_queue = GaugeMetricFamily(
            "tenure_queue_runs",
            "Runs not yet ended, by queue and status",
            labels=["queue", "status"],
        )
        oldest = GaugeMetricFamily(
            "tenure_queue_oldest_ready_seconds",
            "Seconds the longest-waiting claimable run of a queue has waited (0: none waits)",
            labels=["queue"],
        )
        expired = GaugeMetricFamily(
            "tenure_leases_expired",
            "Running runs whose lease expired and that the reaper has not handled yet",
            labels=["queue"],
        )
        tokens = GaugeMetricFamily(
            "tenure_queue_tokens",
            "Tokens spent by a queue's runs not yet ended and those that ended in the last "
            "24 h, by direction (input, output)",
            labels=["queue", "direction"],
        )
        cost = GaugeMetricFamily(
            "tenure_queue_cost",
            "Cost of a queue's runs not yet ended and those that ended in the last 24 h",
            labels=["queue"],
        )
        for queue, spent in sorted(totals.items()):
            tokens.add_metric([queue, "input"], spent.input_tokens)
            tokens.add_metric([queue, "output"], spent.output_tokens)
            cost.add_metric([queue], spent.cost)
        counts: dict[tuple[str, str], int] = {}
        ages: dict[str, float] = {}
        stale: dict[str, int] = {}
        for run in runs:
            key = (run.queue, str(run.status))
            counts[key] = counts.get(key, 0) + 1
            ages.setdefault(run.queue, 0.0)
            stale.setdefault(run.queue, 0)
            if run.status is RunStatus.QUEUED and run.available_at <= now:
                ages[run.queue] = max(ages[run.queue], (now - run.available_at).total_seconds())
            expires = run.lease_expires
            if run.status is RunStatus.RUNNING and expires is not None and expires < now:
                stale[run.queue] += 1
        for (queue, status), n in sorted(counts.items()):
            by_queue.add_metric([queue, status], n)
        for queue in sorted(ages):
            oldest.add_metric([queue], ages[queue])
            expired.add_metric([queue], stale[queue])
        for queue in sorted(set(ages) | set(paused)):
            paused_one.add_metric([queue], 1 if queue in paused else 0)
        yield by_queue
        yield oldest
        yield expired
        yield paused_count
        yield paused_one
        yield tokens
        yield cost


class ModelsCollector(Collector):
    """Per model with limits (SPEC §17), read from the store per scrape:
    `tenure_model_in_use{model}` (calls in flight, every worker's) and
    `tenure_model_circuit_open{model}` (seconds until its circuit closes; 0: closed)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        try:
            models = self.store.models()
        except Exception as exc:  # tenure_database_up already says the store did not answer
            log.warning("metrics: cannot read models: %s", exc)
            return
        in_use = GaugeMetricFamily(
            "tenure_model_in_use", "Calls in flight to a model with limits", labels=["model"]
        )
        circuit = GaugeMetricFamily(
            "tenure_model_circuit_open",
            "Seconds until a model's open circuit closes (0: closed)",
            labels=["model"],
        )
        for m in models:
            in_use.add_metric([m.name], m.in_use)
            until = m.circuit_open_until
            circuit.add_metric([m.name], (until - m.now).total_seconds() if until else 0.0)
        yield in_use
        yield circuit


class TenantsCollector(Collector):
    """SPEC §22, read from the store per scrape: per concurrency key
    `tenure_concurrency_running{key}`, `tenure_concurrency_waiting{key}` (queued runs that
    wait for the key: it is at its limit) and `tenure_concurrency_limit{key}` (keys with a
    limit); per schedule `tenure_schedule_fired{schedule}` (ticks fired so far),
    `tenure_schedule_last_fire_timestamp{schedule}` and
    `tenure_schedule_next_fire_timestamp{schedule}` (Unix seconds; a paused schedule has
    no next fire)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        try:
            keys = self.store.concurrency_keys()
            schedules = self.store.schedules()
        except Exception as exc:  # tenure_database_up already says the store did not answer
            log.warning("metrics: cannot read keys and schedules: %s", exc)
            return
        running = GaugeMetricFamily(
            "tenure_concurrency_running", "Runs of a concurrency key running", labels=["key"]
        )
        waiting = GaugeMetricFamily(
            "tenure_concurrency_waiting",
            "Queued runs of a concurrency key that wait for it (the key is at its limit)",
            labels=["key"],
        )
        limit = GaugeMetricFamily(
            "tenure_concurrency_limit", "A concurrency key's limit", labels=["key"]
        )
        for k in keys:
            running.add_metric([k.key], k.running)
            waiting.add_metric([k.key], k.queued if k.full else 0)
            if k.limit is not None:
                limit.add_metric([k.key], k.limit)
        fired = GaugeMetricFamily(
            "tenure_schedule_fired", "Ticks of a schedule fired so far", labels=["schedule"]
        )
        last = GaugeMetricFamily(
            "tenure_schedule_last_fire_timestamp",
            "Unix time of a schedule's last fired tick",
            labels=["schedule"],
        )
        following = GaugeMetricFamily(
            "tenure_schedule_next_fire_timestamp",
            "Unix time of a schedule's next tick (none while paused)",
            labels=["schedule"],
        )
        for s in schedules:
            fired.add_metric([s.name], s.fired)
            if s.last_fire is not None:
                last.add_metric([s.name], s.last_fire.timestamp())
            if s.next_fire is not None and not s.paused:
                following.add_metric([s.name], s.next_fire.timestamp())
        yield from (running, waiting, limit, fired, last, following)


class Metrics:
    """The counters of one process, in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._runs: RunsCollector | None = None
        r = self.registry
        self.claims = Counter("tenure_claims", "Runs claimed by this process", registry=r)
        self.requeues = Counter(
            "tenure_requeues", "Runs sent back to the queue, by cause", ["cause"], registry=r
        )
        self.dead_letters = Counter(
            "tenure_dead_letters", "Runs dead-lettered, by reason", ["reason"], registry=r
        )
        self.lease_losses = Counter(
            "tenure_lease_losses",
            "Guarded writes of a segment that matched no row (the run was no longer its own)",
            registry=r,
        )
        self.reaper_passes = Counter("tenure_reaper_passes", "Reaper passes", registry=r)
        self.reaped = Counter(
            "tenure_reaper_runs", "Stale runs the reaper handled, by action", ["action"], registry=r
        )
        self.step_seconds = Histogram(
            "tenure_step_seconds",
            "Time from one step boundary to the next, by step kind",
            ["kind"],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.model_tokens = Counter(
            "tenure_model_tokens", "Model tokens, by direction", ["direction"], registry=r
        )
        self.parked = Counter(
            "tenure_parked",
            "Runs parked to wait for their model's capacity (not charged), by model and why",
            ["model", "why"],
            registry=r,
        )
        for cause in ("failure", "stale", "step_deadline", "drain", "unstarted", "unserved"):
            self.requeues.labels(cause)
        for reason in ("retries_exhausted", "not_retryable"):
            self.dead_letters.labels(reason)
        for action in ("requeued", "dead_lettered", "skipped"):
            self.reaped.labels(action)
        for direction in ("input", "output"):
            self.model_tokens.labels(direction)

    def watch_store(self, store: Store) -> None:
        """Read run counts from `store` at every scrape (the first store given is kept)."""
        if self._runs is None:
            self._runs = RunsCollector(store)
            self.registry.register(self._runs)
            self.registry.register(QueuesCollector(store))
            self.registry.register(WorkersCollector(store))
            self.registry.register(ModelsCollector(store))
            self.registry.register(TenantsCollector(store))


class ObservedStore:
    """A store that counts what goes through it (see the module docstring)."""

    def __init__(self, inner: Store, metrics: Metrics, tracing: Tracing | None = None) -> None:
        self.inner = inner
        self.url = inner.url
        self.metrics = metrics
        self.tracing = tracing
        self._lock = threading.Lock()
        # (run id, token) of a segment -> when its last step boundary was written.
        self._boundaries: OrderedDict[tuple[str, int], float] = OrderedDict()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # -- segments --------------------------------------------------------------------------

    def _began(self, claimed: Sequence[Claimed]) -> None:
        if not claimed:
            return
        self.metrics.claims.inc(len(claimed))
        now = time.monotonic()
        with self._lock:
            for c in claimed:
                self._boundaries[(c.lease.run_id, c.lease.token)] = now
            while len(self._boundaries) > MAX_TRACKED_SEGMENTS:
                self._boundaries.popitem(last=False)
        if self.tracing is not None:
            for c in claimed:
                self.tracing.segment_started(c.lease)

    def _boundary(self, lease: Lease, events: Sequence[NewEvent], usage: Usage) -> None:
        now = time.monotonic()
        key = (lease.run_id, lease.token)
        with self._lock:
            last = self._boundaries.get(key)
            if key in self._boundaries:
                self._boundaries[key] = now
        stepped = (EventKind.LLM, EventKind.TOOL, EventKind.STEP)  # STEP: an agent function's
        step = next((e for e in events if e.kind in stepped), None)
        if step is not None and last is not None:
            self.metrics.step_seconds.labels(str(step.kind)).observe(now - last)
            if self.tracing is not None:
                self.tracing.step(lease, step, now - last)
        if usage.input_tokens:
            self.metrics.model_tokens.labels("input").inc(usage.input_tokens)
        if usage.output_tokens:
            self.metrics.model_tokens.labels("output").inc(usage.output_tokens)

    def _ended(self, lease: Lease, outcome: str) -> None:
        with self._lock:
            self._boundaries.pop((lease.run_id, lease.token), None)
        if self.tracing is not None:
            self.tracing.segment_ended(lease, outcome)

    def _missed(self, lease: Lease) -> None:
        """A guarded write of `lease` matched nothing: cancelled, or the lease was lost."""
        try:
            cancelled = self.inner.run_status(lease.run_id) is RunStatus.CANCELLED
        except Exception:
            cancelled = False
        if not cancelled:
            self.metrics.lease_losses.inc()
        self._ended(lease, "cancelled" if cancelled else "lease_lost")

    # -- the observed transitions ----------------------------------------------------------

    def claim(
        self, owner: str, queues: Sequence[str] | None, lease_seconds: float, limit: int
    ) -> list[Claimed]:
        claimed = self.inner.claim(owner, queues, lease_seconds, limit)
        self._began(claimed)
        return claimed

    def start(self, run: NewRun, owner: str, lease_seconds: float) -> Lease:
        lease = self.inner.start(run, owner, lease_seconds)
        with self._lock:
            self._boundaries[(lease.run_id, lease.token)] = time.monotonic()
        if self.tracing is not None:
            self.tracing.segment_started(lease)
        return lease

    def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> Claimed | None:
        claimed = self.inner.claim_run(run_id, owner, lease_seconds)
        self._began([claimed] if claimed else [])
        return claimed

    def record_step(
        self,
        lease: Lease,
        lease_seconds: float,
        events: Sequence[NewEvent],
        usage: Usage = NO_USAGE,
    ) -> list[int] | None:
        sequences = self.inner.record_step(lease, lease_seconds, events, usage)
        if sequences is None:
            self._missed(lease)
        else:
            self._boundary(lease, events, usage)
        return sequences

    def note_lease_lost(self, lease: Lease, cancelled: bool) -> None:
        """The lease keeper found `lease` lost (or its run cancelled). Misses of
        `renew_leases` itself are not counted: a renewal races the segment's own last
        write, and only the keeper knows whether the segment had ended meanwhile."""
        if not cancelled:
            self.metrics.lease_losses.inc()
        self._ended(lease, "cancelled" if cancelled else "lease_lost")

    def mark_fence(
        self,
        lease: Lease,
        effect: ToolEffect,
        lease_seconds: float,
        call: dict[str, Any] | None = None,
        probe: bool = False,
    ) -> bool:
        won = self.inner.mark_fence(lease, effect, lease_seconds, call, probe)
        if not won:
            self._missed(lease)
        return won

    def clear_fence(self, lease: Lease, lease_seconds: float, event: NewEvent) -> int | None:
        sequence = self.inner.clear_fence(lease, lease_seconds, event)
        if sequence is None:
            self._missed(lease)
        else:
            self._boundary(lease, [event], NO_USAGE)
        return sequence

    def requeue(self, lease: Lease, delay: float, error_class: Any, error: str) -> bool:
        won = self.inner.requeue(lease, delay, error_class, error)
        if won:
            self.metrics.requeues.labels("failure").inc()
            self._ended(lease, "requeued")
        else:
            self._missed(lease)
        return won

    def park(
        self,
        lease: Lease,
        delay: float,
        payload: dict[str, Any],
        kind: EventKind = EventKind.THROTTLED,
    ) -> bool:
        won = self.inner.park(lease, delay, payload, kind)
        if won and kind is EventKind.SLEEPING:  # an agent function's long sleep
            self._ended(lease, "sleeping")
        elif won:
            model, why = str(payload.get("model", "")), str(payload.get("why", ""))
            self.metrics.parked.labels(model, why).inc()
            self._ended(lease, "parked")
        else:
            self._missed(lease)
        return won

    def hand_back(
        self,
        lease: Lease,
        why: str,
        missing: Sequence[str] = (),
        fence_call: str | None = None,
    ) -> bool:
        won = self.inner.hand_back(lease, why, missing, fence_call)
        if won:
            self.metrics.requeues.labels("unserved" if missing else "unstarted").inc()
            self._ended(lease, "released")
        return won

    def release(self, lease: Lease) -> bool:
        won = self.inner.release(lease)
        if won:
            self.metrics.requeues.labels("drain").inc()
            self._ended(lease, "released")
        return won

    def settle(self, lease: Lease, settlement: Settlement) -> list[int] | None:
        sequences = self.inner.settle(lease, settlement)
        self._settled(lease, settlement, sequences)
        return sequences

    def settle_and_claim(
        self,
        settles: Sequence[tuple[Lease, Settlement]],
        owner: str,
        queues: Sequence[str] | None,
        lease_seconds: float,
        limit: int,
    ) -> tuple[list[list[int] | None], list[Claimed]]:
        results, claimed = self.inner.settle_and_claim(settles, owner, queues, lease_seconds, limit)
        for (lease, settlement), sequences in zip(settles, results, strict=True):
            self._settled(lease, settlement, sequences)
        self._began(claimed)
        return results, claimed

    def _settled(self, lease: Lease, settlement: Settlement, sequences: list[int] | None) -> None:
        if sequences is None:
            self._missed(lease)
            return
        self._boundary(lease, settlement.events, settlement.usage)
        if settlement.is_dead_letter:
            self.metrics.dead_letters.labels(str(settlement.reason)).inc()
        self._ended(lease, str(settlement.reason))

    def suspend(self, lease: Lease, *args: Any, **kwargs: Any) -> list[int] | None:
        # The segment ends: the run waits for a person, without a lease.
        sequences: list[int] | None = self.inner.suspend(lease, *args, **kwargs)
        if sequences is None:
            self._missed(lease)
        else:
            self._ended(lease, "suspended")
        return sequences

    def decide_inline(self, *args: Any, **kwargs: Any) -> Claimed | None:
        claimed: Claimed | None = self.inner.decide_inline(*args, **kwargs)
        self._began([claimed] if claimed else [])
        return claimed

    def stale_runs(self, limit: int) -> list[StaleRun]:
        self.metrics.reaper_passes.inc()
        return self.inner.stale_runs(limit)

    def requeue_stale(self, seen: StaleRun) -> bool:
        won = self.inner.requeue_stale(seen)
        self.metrics.reaped.labels("requeued" if won else "skipped").inc()
        if won:
            self.metrics.requeues.labels(
                "stale" if seen.step_deadline is None else "step_deadline"
            ).inc()
        return won

    def dead_letter_stale(self, seen: StaleRun, reason: TerminationReason, error: str) -> bool:
        won = self.inner.dead_letter_stale(seen, reason, error)
        self.metrics.reaped.labels("dead_lettered" if won else "skipped").inc()
        if won:
            self.metrics.dead_letters.labels(str(reason)).inc()
        return won


def instrument(runtime: Runtime, metrics: Metrics, tracing: Tracing | None = None) -> None:
    """Observe `runtime`'s store from now on (workers and reaps started after this call)."""
    store = runtime.store
    if isinstance(store, ObservedStore):
        return
    observed = cast(Store, ObservedStore(store, metrics, tracing))
    # The runtime hands its store to every worker and reaper it makes, so replacing it here
    # is the whole installation; nothing in the core knows it is observed.
    with runtime._lock:
        runtime._store = observed
