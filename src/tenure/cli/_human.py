"""`tenure pending`, `tenure approve`, `tenure input`: a person in the loop."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tenure import DecisionConflict, Run, RunStatus
from tenure._command import CliError, Context, NotFound, UsageError
from tenure._text import span
from tenure.agent._held import HeldContext
from tenure.agent._runviews import agent_call
from tenure.cli._output import (
    Cell,
    clip,
    out,
    print_json,
    run_json,
    status_text,
    table_with_notes,
    when,
)


def _waiting(ctx: Context, run_id: str, expected: RunStatus) -> Run:
    run = ctx.app.status(run_id)
    if run is None:
        raise NotFound(run_id)
    if run.status is not expected:
        raise CliError(f"run {run_id} is {run.status}, not {expected}")
    return run


# The prompt and the model's words under a run's row, clipped; `--json` has them whole.
CONTEXT_WIDTH = 100


def pending(ctx: Context, args: argparse.Namespace) -> int:
    found = ctx.app.pending(args.limit)
    if args.json:
        print_json([_json(ctx, r) for r in found])
        return 0
    if not found:
        out.print("nothing waits for a person")
        return 0
    rows: list[tuple[list[Cell], list[str]]] = []
    for r in found:
        context = ctx.app.pending_context(r.id)
        cells: list[Cell] = [
            r.id,
            status_text(r.status),
            when(r.updated_at),
            _waited(context),
            clip(", ".join(_call(c) for c in ctx.app.pending_calls(r.id)), 80),
        ]
        rows.append((cells, _notes(context)))
    table_with_notes(["id", "status", "waiting since", "waited", "calls"], rows)
    return 0


def _json(ctx: Context, run: Run) -> dict[str, Any]:
    context = ctx.app.pending_context(run.id)
    return {
        **run_json(run, agent_call(ctx.app.store.request_event(run.id))),
        "pending_calls": ctx.app.pending_calls(run.id),
        "context": context.to_json() if context is not None else None,
    }


def _waited(context: HeldContext | None) -> str:
    if context is None or context.waited_seconds is None:
        return "?"
    return span(context.waited_seconds)


def _notes(context: HeldContext | None) -> list[str]:
    if context is None:  # decided meanwhile
        return []
    notes = [
        f"{label}: {_shown(value, context)}"
        for label, value in (("prompt", context.prompt), ("model said", context.model_text))
    ]
    if context.damaged:
        notes.append(clip(f"damaged: {context.damaged}", CONTEXT_WIDTH * 2))
    return notes


def _shown(value: str | None, context: HeldContext) -> str:
    if context.hidden:
        return f"hidden: {context.hidden}"
    if value is None:
        return "damaged (below)"
    return clip(value, CONTEXT_WIDTH) if value.strip() else "(nothing)"


def _call(call: dict[str, Any]) -> str:
    args = call["args"] if isinstance(call["args"], str) else json.dumps(call["args"])
    mark = {"approval": " [approve?]", "input": " [input?]"}.get(call["kind"], "")
    return f"{call['tool']}({args}){mark}"


def approve(ctx: Context, args: argparse.Namespace) -> int:
    _waiting(ctx, args.run_id, RunStatus.WAITING_FOR_APPROVAL)
    try:
        ctx.app.approve(args.run_id, not args.deny, decided_by=args.by, note=args.note)
    except DecisionConflict as exc:
        raise CliError(str(exc)) from None
    verb = "denied" if args.deny else "approved"
    out.print(f"{verb} {args.run_id} by {args.by}; the run is queued to continue")
    return 0


def submit_input(ctx: Context, args: argparse.Namespace) -> int:
    _waiting(ctx, args.run_id, RunStatus.WAITING_FOR_INPUT)
    try:
        text = Path(args.values).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--values {args.values}: cannot read it: {exc}") from None
    try:
        values = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--values {args.values}: not valid JSON: {exc}") from None
    try:
        ctx.app.submit_input(args.run_id, values, submitted_by=args.by)
    except DecisionConflict as exc:
        raise CliError(str(exc)) from None
    out.print(f"input for {args.run_id} submitted by {args.by}; the run is queued to continue")
    return 0


def add_parsers(command: Any) -> None:
    from tenure.cli._parser import limit_int  # the parser module imports this one

    p = command("pending", "runs waiting for an approval or for input, with their calls")
    p.add_argument("--limit", type=limit_int, default=100, metavar="N", help="at most N runs")
    p.add_argument(
        "--json",
        action="store_true",
        help="a JSON array of run objects, each with its held calls and their context whole",
    )

    p = command("approve", "approve (or --deny) the held calls of a waiting run")
    p.add_argument("run_id", metavar="RUN", help="the run's id")
    p.add_argument("--deny", action="store_true", help="deny: the model is told it was refused")
    p.add_argument("--by", required=True, metavar="NAME", help="who decides")
    p.add_argument("--note", metavar="TEXT", help="a note the model sees with a denial")

    p = command("input", "submit the values a waiting run asks for")
    p.add_argument("run_id", metavar="RUN", help="the run's id")
    p.add_argument("--by", required=True, metavar="NAME", help="who submits")
    p.add_argument("--values", required=True, metavar="FILE.json", help="a JSON object")


HANDLERS = {"pending": pending, "approve": approve, "input": submit_input}
