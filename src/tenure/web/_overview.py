"""What an operator reads at a glance, computed from runs (no I/O here): short run ids, times
relative to the database's clock, per-queue depth, the workers seen through their leases, and
the two charts (runs finished per minute, queue depth over time) drawn as inline SVG.

Run ids made together by UUIDv7 share their first characters (a millisecond timestamp): they
are shown by their end, which is random.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from markupsafe import Markup, escape

from tenure._heartbeat import WorkerState, worker_state
from tenure._text import span
from tenure._types import Run, RunStatus, Usage
from tenure.store._base import PausedQueue, WorkerRow

SHORT_ID = 8
FINISHED_MINUTES = 30
# What a chart's bars are coloured by (the status classes of tenure.css).
OUTCOMES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


def short_id(run_id: str) -> str:
    """The distinguishing end of a run id (UUIDv7 ids made together share their start)."""
    return run_id if len(run_id) <= SHORT_ID + 1 else "…" + run_id[-SHORT_ID:]


def relative(value: datetime | None, now: datetime) -> str:
    if value is None:
        return ""
    seconds = (value - now).total_seconds()
    if abs(seconds) < 1:
        return "now"
    return f"in {span(seconds)}" if seconds > 0 else f"{span(seconds)} ago"


def prompt_line(request: dict[str, Any] | None) -> str:
    """The first line of a run's prompt (what an operator recognises a run by)."""
    prompt = (request or {}).get("prompt")
    if not isinstance(prompt, str):
        return ""
    line = prompt.strip().splitlines()[0] if prompt.strip() else ""
    return line if len(line) <= 100 else line[:99] + "…"


def is_scheduled(run: Run, now: datetime) -> bool:
    """A queued run that is not claimable yet because it was enqueued with a delay: it has
    never been claimed and never failed. (A run waiting after a failure, a hand-back or a
    park is backing off.)"""
    return (
        run.status is RunStatus.QUEUED
        and run.available_at > now
        and run.started_at is None
        and run.requeue_count == 0
        and not run.error_class
    )


def duration(run: Run, now: datetime) -> float | None:
    """Seconds from its first claim to its end (to now while it has not ended)."""
    if run.started_at is None:
        return None
    end = run.finished_at or (now if not run.status.is_terminal else None)
    return None if end is None else max(0.0, (end - run.started_at).total_seconds())


# -- queues ------------------------------------------------------------------------------------


@dataclass
class QueueDepth:
    queue: str
    ready: int = 0
    backing_off: int = 0
    # Enqueued with a delay, not claimable yet (never claimed, never failed).
    scheduled: int = 0
    running: int = 0
    waiting: int = 0
    # Agent functions waiting for their child runs (SPEC §21).
    children: int = 0
    # How long the longest-waiting ready run has been claimable and not claimed.
    oldest_ready_seconds: float | None = None
    # Paused by an operator: workers claim none of its runs (None: not paused).
    paused: PausedQueue | None = None
    # Tokens and cost of its runs not yet ended and of those that ended in the last
    # `window` seconds (Store.queue_totals).
    spent: Usage = field(default_factory=Usage)
    window: float = 0.0
    # Queued runs by priority, and by concurrency key (SPEC §22).
    priorities: dict[int, int] = field(default_factory=dict)
    keys: dict[str, int] = field(default_factory=dict)

    @property
    def queued(self) -> int:
        return self.ready + self.backing_off + self.scheduled

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "queued": self.queued,
            "ready": self.ready,
            "backing_off": self.backing_off,
            "scheduled": self.scheduled,
            "running": self.running,
            "waiting": self.waiting,
            "waiting_for_children": self.children,
            "oldest_ready_seconds": self.oldest_ready_seconds,
            "paused": self.paused is not None,
            "paused_at": self.paused.paused_at.isoformat() if self.paused else None,
            "paused_by": self.paused.paused_by if self.paused else None,
            "input_tokens": self.spent.input_tokens,
            "output_tokens": self.spent.output_tokens,
            "cost": self.spent.cost,
            "totals_window_seconds": self.window,
            "priorities": {str(p): n for p, n in sorted(self.priorities.items(), reverse=True)},
            "keys": dict(sorted(self.keys.items())),
        }


_WAITING = (RunStatus.WAITING_FOR_APPROVAL, RunStatus.WAITING_FOR_INPUT)


def queue_depths(
    runs: Iterable[Run],
    now: datetime,
    paused: Sequence[PausedQueue] = (),
    totals: dict[str, Usage] | None = None,
    window: float = 0.0,
) -> list[QueueDepth]:
    """Per queue: runs queued (ready now, backing off, or scheduled for later), running,
    waiting for a person, waiting for their children; whether it is paused; what its runs
    spent (`totals`, over `window`). A paused queue, or one with totals, is listed even
    with no run."""
    by_queue: dict[str, QueueDepth] = {p.queue: QueueDepth(p.queue, paused=p) for p in paused}
    for name, spent in (totals or {}).items():
        by_queue.setdefault(name, QueueDepth(name)).spent = spent
    for q in by_queue.values():
        q.window = window
    for run in runs:
        _count(by_queue.setdefault(run.queue, QueueDepth(run.queue, window=window)), run, now)
    return [by_queue[name] for name in sorted(by_queue)]


def _count(q: QueueDepth, run: Run, now: datetime) -> None:
    if run.status is RunStatus.RUNNING:
        q.running += 1
    elif run.status in _WAITING:
        q.waiting += 1
    elif run.status is RunStatus.WAITING_FOR_CHILDREN:
        q.children += 1
    elif is_scheduled(run, now):
        q.scheduled += 1
    elif run.status is RunStatus.QUEUED and run.available_at > now:
        q.backing_off += 1
    elif run.status is RunStatus.QUEUED:
        q.ready += 1
        age = (now - run.available_at).total_seconds()
        q.oldest_ready_seconds = max(age, q.oldest_ready_seconds or 0.0)
    if run.status is RunStatus.QUEUED:
        q.priorities[run.priority] = q.priorities.get(run.priority, 0) + 1
        if run.concurrency_key is not None:
            q.keys[run.concurrency_key] = q.keys.get(run.concurrency_key, 0) + 1


# -- workers: their own heartbeat rows, and what their leases say of them ---------------------


@dataclass
class WorkerSeen:
    """A worker, from its own row (`tenure_workers`: host, pid, queues, slots, heartbeat) when
    it keeps one, and from its leases: a worker renews every lease it holds, so the latest
    renewal is the last time it was seen working. A lease owner without a row (an
    interactive run, a decider, a worker of an older tenure) is known by its leases only:
    all of them expired means it stopped renewing (dead, frozen or cut off)."""

    owner: str
    runs: int
    expired: int
    last_renewal: datetime | None
    queues: list[str] = field(default_factory=list)
    row: WorkerRow | None = None
    state: str = ""

    @property
    def kind(self) -> str:
        return self.owner.partition(":")[0]

    @property
    def host(self) -> str:
        if self.row is not None:
            return self.row.host
        parts = self.owner.split(":")
        return parts[1] if len(parts) > 2 else ""

    @property
    def pid(self) -> int | None:
        if self.row is not None:
            return self.row.pid
        parts = self.owner.split(":")
        return int(parts[2]) if len(parts) > 3 and parts[2].isdigit() else None

    @property
    def stalled(self) -> bool:
        return self.runs > 0 and self.expired == self.runs

    @property
    def last_seen(self) -> datetime | None:
        return self.row.last_seen if self.row is not None else self.last_renewal

    def to_json(self) -> dict[str, Any]:
        row = self.row
        return {
            "owner": self.owner,
            "kind": self.kind,
            "host": self.host,
            "pid": self.pid,
            "state": self.state,
            "runs_held": self.runs,
            "expired_leases": self.expired,
            "last_renewal": self.last_renewal.isoformat() if self.last_renewal else None,
            "last_seen": self.last_seen.isoformat() if self.last_seen else None,
            "queues": self.queues,
            "all_queues": row is not None and row.queues is None,
            "slots": row.slots if row else None,
            "slots_in_use": row.slots_in_use if row else None,
            "heartbeat_seconds": row.heartbeat_seconds if row else None,
            "started_at": row.started_at.isoformat() if row else None,
            "stopped_at": row.stopped_at.isoformat() if row and row.stopped_at else None,
            "stalled": self.stalled,
        }


def _lease_state(runs: int, expired: int) -> str:
    """The state of a lease owner without a row: its leases are all there is to go by."""
    return "stale" if runs > 0 and expired == runs else str(WorkerState.RUNNING)


def workers_seen(
    running: Iterable[Run], now: datetime, rows: Iterable[WorkerRow] = ()
) -> list[WorkerSeen]:
    """Every worker with a row, and every other owner of a running run's lease: the live
    ones first, then the dead, then the stopped. A run's `updated_at` moves with every
    guarded write its owner makes (the claim, each renewal, a fence), so the latest one
    among an owner's runs is its last renewal, whatever lease length it was started with."""
    by_owner: dict[str, list[Run]] = {}
    for run in running:
        if run.claimed_by:
            by_owner.setdefault(run.claimed_by, []).append(run)
    by_row = {row.id: row for row in rows}
    seen = []
    for owner in sorted(set(by_owner) | set(by_row)):
        runs, row = by_owner.get(owner, []), by_row.get(owner)
        expiries = [r.lease_expires for r in runs if r.lease_expires is not None]
        expired = sum(1 for e in expiries if e < now)
        # A worker's row says what it serves (None: every queue); an owner without one is
        # known by the queues of the runs it holds.
        queues = (row.queues or []) if row else {r.queue for r in runs}
        seen.append(
            WorkerSeen(
                owner=owner,
                runs=len(runs),
                expired=expired,
                last_renewal=max((r.updated_at for r in runs), default=None),
                queues=sorted(queues),
                row=row,
                state=str(worker_state(row, now)) if row else _lease_state(len(runs), expired),
            )
        )
    order = {"running": 0, "stopping": 0, "stale": 1, "dead": 1, "stopped": 2}
    return sorted(seen, key=lambda w: order.get(w.state, 0))


# -- charts --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    label: str
    parts: list[tuple[str, int]]  # (css class, value), stacked from the bottom

    @property
    def total(self) -> int:
        return sum(v for _, v in self.parts)


def finished_per_minute(
    runs: Iterable[Run], now: datetime, minutes: int = FINISHED_MINUTES
) -> list[Bar]:
    """Runs that ended in each of the last `minutes` minutes, by terminal status."""
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)
    counts = [dict.fromkeys(OUTCOMES, 0) for _ in range(minutes)]
    for run in runs:
        if run.finished_at is None or run.status not in OUTCOMES or run.finished_at < start:
            continue
        index = int((run.finished_at - start).total_seconds() // 60)
        if 0 <= index < minutes:
            counts[index][run.status] += 1
    return [
        Bar(
            (start + timedelta(minutes=i)).strftime("%H:%M"),
            [(f"s-{status}", n) for status, n in c.items()],
        )
        for i, c in enumerate(counts)
    ]


def svg_bars(bars: Sequence[Bar], *, title: str, width: int = 600, height: int = 120) -> Markup:
    """A stacked bar chart as inline SVG: no script, no build, styled by tenure.css."""
    top = max((b.total for b in bars), default=0) or 1
    step = width / max(len(bars), 1)
    shapes: list[str] = []
    for i, bar in enumerate(bars):
        y = float(height)
        for css, value in bar.parts:
            if not value:
                continue
            h = value / top * (height - 14)
            y -= h
            shapes.append(
                f'<rect class="{escape(css)}" x="{i * step + 1:.1f}" y="{y:.1f}" '
                f'width="{max(step - 2, 1):.1f}" height="{h:.1f}">'
                f"<title>{escape(bar.label)}: {value} {escape(css[2:])}</title></rect>"
            )
    first = escape(bars[0].label) if bars else ""
    last = escape(bars[-1].label) if bars else ""
    return Markup(
        f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {width} '
        f'{height + 14}" width="100%" preserveAspectRatio="none">'
        f"<title>{escape(title)}</title>"
        f'<text class="axis" x="0" y="10">max {top}</text>'
        f"{''.join(shapes)}"
        f'<text class="axis" x="0" y="{height + 12}">{first}</text>'
        f'<text class="axis" x="{width}" y="{height + 12}" text-anchor="end">{last}</text>'
        "</svg>"
    )


def svg_line(
    points: Sequence[tuple[datetime, int]], *, title: str, width: int = 600, height: int = 120
) -> Markup:
    """A line (queue depth over time) as inline SVG."""
    if len(points) < 2:
        return Markup(f'<p class="muted chart-empty">{escape(title)}: not enough samples yet</p>')
    t0, t1 = points[0][0], points[-1][0]
    spread = max((t1 - t0).total_seconds(), 1.0)
    top = max(v for _, v in points) or 1
    coords = " ".join(
        f"{(t - t0).total_seconds() / spread * width:.1f},{height - v / top * (height - 14):.1f}"
        for t, v in points
    )
    return Markup(
        f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {width} '
        f'{height + 14}" width="100%" preserveAspectRatio="none">'
        f"<title>{escape(title)}</title>"
        f'<text class="axis" x="0" y="10">max {top}</text>'
        f'<polyline class="depth" fill="none" points="{coords}"/>'
        f'<text class="axis" x="0" y="{height + 12}">{t0:%H:%M:%S}</text>'
        f'<text class="axis" x="{width}" y="{height + 12}" text-anchor="end">{t1:%H:%M:%S}</text>'
        "</svg>"
    )
