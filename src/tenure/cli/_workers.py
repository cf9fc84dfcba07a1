"""`tenure workers`: every worker process, from its own heartbeat row, with the runs it holds;
a worker whose heartbeat is overdue shows `dead`, before its leases expire."""

from __future__ import annotations

import argparse
from collections import Counter
from datetime import datetime
from typing import Any

from rich.text import Text

from tenure._command import Context
from tenure._heartbeat import WorkerState, worker_state
from tenure._types import RunStatus
from tenure.cli._output import out, print_json, table, when
from tenure.store._base import WorkerRow

# Runs read to count what each worker holds.
HELD_SCAN_LIMIT = 10_000
STATE_STYLE = {
    WorkerState.RUNNING: "green",
    WorkerState.STOPPING: "yellow",
    WorkerState.STOPPED: "dim",
    WorkerState.DEAD: "bold red",
}


def _json(row: WorkerRow, state: WorkerState, held: int, now: datetime) -> dict[str, Any]:
    return {
        "id": row.id,
        "host": row.host,
        "pid": row.pid,
        "state": str(state),
        "queues": row.queues,  # null: every queue
        "slots": row.slots,
        "slots_in_use": row.slots_in_use,
        "runs_held": held,
        "heartbeat_seconds": row.heartbeat_seconds,
        "started_at": row.started_at.isoformat(),
        "last_seen": row.last_seen.isoformat(),
        "last_seen_seconds_ago": round((now - row.last_seen).total_seconds(), 3),
        "stopped_at": row.stopped_at.isoformat() if row.stopped_at else None,
    }


def workers_command(ctx: Context, args: argparse.Namespace) -> int:
    app = ctx.app
    now = app.store.now()
    rows = app.store.workers(args.limit)
    held = Counter(r.claimed_by for r in app.runs(RunStatus.RUNNING, limit=HELD_SCAN_LIMIT))
    shown = [
        (row, state)
        for row in rows
        if (state := worker_state(row, now)) is not WorkerState.STOPPED or args.all
    ]
    if args.json:
        print_json([_json(row, state, held[row.id], now) for row, state in shown])
        return 0
    if not shown:
        out.print("no workers" if args.all else "no workers (--all shows the stopped ones)")
        return 0
    table(
        ["id", "host", "pid", "state", "queues", "slots", "runs", "last seen", "started"],
        (
            [
                row.id,
                row.host,
                str(row.pid),
                Text(str(state), style=STATE_STYLE[state]),
                ", ".join(row.queues) if row.queues is not None else "all",
                f"{row.slots_in_use}/{row.slots}",
                str(held[row.id]),
                f"{(now - row.last_seen).total_seconds():.0f}s ago",
                when(row.started_at),
            ]
            for row, state in shown
        ),
    )
    return 0
