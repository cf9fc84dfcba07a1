"""`tenure queues`: every queue that is paused, has runs not yet ended or had runs end in the
last 24 h, with their tokens and cost; `tenure queues pause NAME` and `tenure queues resume
NAME`. `tenure concurrency`: concurrency keys and their limits."""

from __future__ import annotations

import argparse

from rich.text import Text

from tenure._command import Context
from tenure._errors import InvalidRequest
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
            "children",
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
                str(q.children),
                str(q.spent.total_tokens),
                f"{q.spent.cost:.4f}",
                when(q.paused.paused_at) if q.paused else "",
                q.paused.paused_by if q.paused else "",
            ]
            for q in found
        ),
    )
    return 0


def concurrency_command(ctx: Context, args: argparse.Namespace) -> int:
    """`tenure concurrency`: every concurrency key (SPEC §22) with its limit, its runs
    running and queued; `tenure concurrency set KEY N` (N `none` removes the limit)."""
    app = ctx.app
    if args.concurrency_action == "set":
        limit = _limit(args.limit)
        if limit is None:
            removed = app.set_concurrency_limit(args.key, None)
            out.print(f"{args.key}: no limit" + ("" if removed else " (it had none)"))
        else:
            app.set_concurrency_limit(args.key, limit)
            out.print(f"{args.key}: at most {limit} running at once")
        return 0
    found = app.concurrency_keys()
    if args.json:
        print_json([k.to_json() for k in found])
        return 0
    if not found:
        out.print("no concurrency keys (no limit set, no keyed run queued or running)")
        return 0
    table(
        ["key", "limit", "running", "queued", "state"],
        (
            [
                k.key,
                "none" if k.limit is None else str(k.limit),
                str(k.running),
                str(k.queued),
                Text("full: its queued runs wait for the key", style="bold yellow")
                if k.full and k.queued
                else Text("full" if k.full else ""),
            ]
            for k in found
        ),
    )
    return 0


def _limit(text: str) -> int | None:
    if text.strip().lower() == "none":
        return None
    try:
        value = int(text, 10)
    except ValueError:
        raise InvalidRequest(
            f"a concurrency limit must be a whole number (0 or more) or 'none', got {text!r}"
        ) from None
    return value


def schedules_command(ctx: Context, args: argparse.Namespace) -> int:
    """`tenure schedules`: every schedule with its next and last fire; `pause`, `resume`,
    `delete NAME`."""
    app = ctx.app
    action = args.schedule_action
    if action is not None:
        done = {
            "pause": app.pause_schedule,
            "resume": app.resume_schedule,
            "delete": app.delete_schedule,
        }[action](args.name)
        past = {"pause": "paused", "resume": "resumed", "delete": "deleted"}[action]
        if done:
            out.print(f"{past} {args.name}")
        elif action == "delete":
            out.print(f"no schedule {args.name}")
        else:
            out.print(f"{args.name} was {'already paused' if action == 'pause' else 'not paused'}")
        return 0
    found = app.schedules()
    if args.json:
        print_json([s.to_json() for s in found])
        return 0
    if not found:
        out.print("no schedules")
        return 0
    table(
        ["name", "cron", "timezone", "state", "next fire", "last fire", "fired", "queue"],
        (
            [
                s.name,
                s.cron,
                s.timezone,
                Text("paused", style="bold yellow") if s.paused else Text("active"),
                "" if s.paused or s.next_fire is None else when(s.next_fire),
                when(s.last_fire) if s.last_fire else "never",
                str(s.fired),
                str((s.request or {}).get("queue", "default")),
            ]
            for s in found
        ),
    )
    return 0
