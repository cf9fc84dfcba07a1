"""`tenure queues`: every queue that is paused, has runs not yet ended or had runs end in the
last 24 h, with their tokens and cost; `tenure queues pause NAME` and `tenure queues resume
NAME`."""

from __future__ import annotations

import argparse

from rich.text import Text

from tenure._command import Context
from tenure.cli._output import out, print_json, table, when


def queues_command(ctx: Context, args: argparse.Namespace) -> int:
    app = ctx.app
    if args.queue_action == "pause":
        if app.pause_queue(args.name, by=args.by):
            out.print(f"paused {args.name}: workers claim none of its runs until it is resumed")
        else:
            out.print(f"{args.name} was already paused")
        return 0
    if args.queue_action == "resume":
        if app.resume_queue(args.name):
            out.print(f"resumed {args.name}")
        else:
            out.print(f"{args.name} was not paused")
        return 0
    found = app.queues()
    if args.json:
        print_json([q.to_json() for q in found])
        return 0
    if not found:
        out.print("no queues (none paused, no run waiting or running, none ended in 24 h)")
        return 0
    table(
        [
            "queue",
            "state",
            "queued",
            "running",
            "waiting",
            "tokens 24h",
            "cost 24h",
            "paused at",
            "paused by",
        ],
        (
            [
                q.name,
                Text("paused", style="bold yellow") if q.paused else Text("active"),
                str(q.queued),
                str(q.running),
                str(q.waiting),
                str(q.spent.total_tokens),
                f"{q.spent.cost:.4f}",
                when(q.paused.paused_at) if q.paused else "",
                q.paused.paused_by if q.paused else "",
            ]
            for q in found
        ),
    )
    return 0
