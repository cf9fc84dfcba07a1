"""What each `tenure` command does, on top of the public Runtime API."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.text import Text

from tenure import (
    InvalidRequest,
    Outcome,
    Run,
    RunRequest,
    RunStatus,
    Runtime,
    TerminationReason,
    ToolEffect,
)
from tenure._command import CliError, Context, NotFound, UsageError
from tenure._policy import MAX_NESTING_DEPTH
from tenure._text import without_password
from tenure.agent._runviews import agent_call, agent_steps
from tenure.cli._follow import follow
from tenure.cli._human import HANDLERS as human_handlers
from tenure.cli._output import (
    agents_table,
    err,
    event_line,
    fork_plan_lines,
    models_table,
    out,
    plural,
    print_json,
    reason_text,
    run_details,
    run_json,
    run_tree,
    runs_table,
    steps_table,
    tree_json,
)
from tenure.providers.scripted import parse_script

# `show --tree` shows at most this many runs of a tree.
TREE_LIMIT = 1000
# Bulk redrive reads dead-letters in pages of this size.
REDRIVE_PAGE = 500


def _read_script(path: str | None) -> list[dict[str, Any]] | None:
    if path is None:
        return None
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"--script {path}: cannot read it: {reason}") from None
    try:
        script = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--script {path}: not valid JSON: {exc}") from None
    except RecursionError:
        raise UsageError(
            f"--script {path}: nested too deeply (at most {MAX_NESTING_DEPTH} levels)"
        ) from None
    try:
        parse_script(script)
    except InvalidRequest as exc:
        raise UsageError(f"--script {path}: {exc}") from None
    assert isinstance(script, list)
    return script


def _read_input(text: str | None) -> dict[str, Any] | None:
    """`--input`: a JSON object (what the agent function's parameters are checked against
    when the run is enqueued)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--input: not valid JSON: {exc}") from None
    except RecursionError:
        raise UsageError(
            f"--input: nested too deeply (at most {MAX_NESTING_DEPTH} levels)"
        ) from None
    if not isinstance(value, dict):
        raise UsageError(f"--input: expected a JSON object, got {_json_kind(value)}")
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null"


def _request(args: argparse.Namespace) -> RunRequest:
    if args.agent is None:
        if args.input is not None:
            raise UsageError("--input is an agent function's input: name the agent with --agent")
        if args.prompt is None:
            raise UsageError("give --prompt TEXT, or --agent NAME with --input JSON")
    return RunRequest(
        prompt=args.prompt or "",
        agent=args.agent,
        input=_read_input(args.input),
        model=args.model,
        tools=list(args.tools),
        queue=args.queue,
        idempotency_key=args.idempotency_key,
        max_iterations=args.max_iterations,
        script=_read_script(args.script),
        priority=args.priority,
        concurrency_key=args.concurrency_key,
    )


def _existing(app: Runtime, run_id: str) -> Run:
    run = app.status(run_id)
    if run is None:
        raise NotFound(run_id)
    return run


# -- commands ----------------------------------------------------------------------------


def init(ctx: Context, args: argparse.Namespace) -> int:
    app = ctx.app
    version = app.store.schema_version()
    out.print(f"database ready: {without_password(app.database_url)} (schema version {version})")
    return 0


def enqueue(ctx: Context, args: argparse.Namespace) -> int:
    request = _request(args)
    out.print(ctx.app.enqueue(request, delay=args.delay))
    return 0


def run(ctx: Context, args: argparse.Namespace) -> int:
    request = _request(args)
    result = ctx.app.run(request)
    final = ctx.app.status(result.run_id)
    ok = result.outcome is Outcome.COMPLETED
    line = Text(str(result.outcome), style="green" if ok else "red")
    if final is not None and final.termination_reason:
        line.append(" (").append_text(reason_text(final.termination_reason)).append(")")
    out.print(line + Text(f"  {result.run_id}"))
    if result.output is not None:
        out.print(result.output)
    if result.error is not None:
        err.print(f"error: {final.error if final and final.error else result.error}")
    return 0 if ok else 1


def _tune(app: Runtime, args: argparse.Namespace) -> None:
    if args.lease_seconds is not None:
        app.settings = dataclasses.replace(app.settings, lease_seconds=args.lease_seconds)
    if args.backoff_base is not None:
        app.settings = dataclasses.replace(app.settings, backoff_base=args.backoff_base)


def worker(ctx: Context, args: argparse.Namespace) -> int:
    app = ctx.app
    _tune(app, args)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("tenure").setLevel(logging.INFO)
    w = app.worker(
        args.concurrency,
        args.queues,
        args.burst,
        poll_interval=args.poll_interval,
        grace_seconds=args.grace_seconds,
    )
    queues = ", ".join(args.queues) if args.queues else "all queues"
    err.print(
        f"{w.identity} on {without_password(app.database_url)}: {queues}, "
        f"concurrency {args.concurrency}, "
        f"lease {app.settings.lease_seconds:g}s; SIGTERM or Ctrl-C drains"
    )
    stats = w.run()
    outcomes = ", ".join(f"{n} {k}" for k, n in sorted(stats.outcomes.items())) or "none"
    how = "burst done" if args.burst else "drained and stopped"
    out.print(
        f"worker {how}: claimed {plural(stats.claimed, 'run')} ({outcomes}); "
        f"handed back {stats.released}; reaped {stats.reaped}"
    )
    return 0


def agents(ctx: Context, args: argparse.Namespace) -> int:
    found = ctx.app.agents()
    if args.json:
        print_json(found)
    elif found:
        agents_table(found)
    else:
        out.print("no agent functions (the app registers them with @rt.agent; name it with --app)")
    return 0


def reap(ctx: Context, args: argparse.Namespace) -> int:
    report = ctx.app.reap(args.limit)
    out.print(f"requeued {report.requeued}")
    out.print(f"dead-lettered {report.dead_lettered}")
    out.print(f"skipped {report.skipped}")
    return 0


def runs(ctx: Context, args: argparse.Namespace) -> int:
    found = ctx.app.runs(
        args.status,
        args.reason,
        args.queue,
        args.limit,
        metadata=dict(args.meta) if args.meta else None,
        since=args.since,
        until=args.until,
        parent=args.parent,
        roots=args.roots,
    )
    if args.json:
        print_json([r.to_json() for r in found])
    elif found:
        # A queued run whose key is at its limit says so (SPEC §22); read only when a
        # listed queued run has a key.
        keyed = any(r.concurrency_key and r.status is RunStatus.QUEUED for r in found)
        full = {k.key for k in ctx.app.concurrency_keys() if k.full} if keyed else set()
        runs_table(found, full)
    else:
        out.print("no runs")
    return 0


def models(ctx: Context, args: argparse.Namespace) -> int:
    found = ctx.app.models()
    if args.json:
        print_json([m.to_json() for m in found])
    elif found:
        models_table(found)
    else:
        out.print("no models")
    return 0


def status(ctx: Context, args: argparse.Namespace) -> int:
    app = ctx.app
    found = _existing(app, args.run_id)
    call = agent_call(app.store.request_event(args.run_id))
    # An agent function's run: its steps by position, read from its journal.
    steps = agent_steps(app.events(args.run_id)) if call is not None else []
    budget = app.budget(args.run_id)  # its tree's (SPEC §21)
    tree = app.store.tree(args.run_id, TREE_LIMIT) if args.tree else []
    if args.json:
        data = run_json(found, call)
        data["budget"] = None if budget is None else budget.to_json()
        if call is not None:
            data["steps"] = [s.to_json() for s in steps]
        if args.tree:
            data["tree"] = tree_json(tree)
        print_json(data)
        return 0
    if args.tree:
        run_tree(tree)
        if len(tree) >= TREE_LIMIT:
            out.print(f"(the first {TREE_LIMIT} runs of the tree)")
        return 0
    run_details(found, call, budget)
    if call is not None:
        out.print()
        if steps:
            steps_table(steps)
        else:
            out.print("no steps yet")
    return 0


def events(ctx: Context, args: argparse.Namespace) -> int:
    app = ctx.app
    _existing(app, args.run_id)
    if not args.follow:
        found = app.events(args.run_id, args.after)
        if args.json:
            print_json([e.to_json() for e in found])
        for event in [] if args.json else found:
            out.print(event_line(event))
        return 0
    return follow(app, args.run_id, args.after, args.json)


def cancel(ctx: Context, args: argparse.Namespace) -> int:
    from tenure.cli._bulk import bulk_cancel, bulk_filter

    f = bulk_filter(args)
    if f is not None:
        return bulk_cancel(ctx, f, args.yes)
    if not args.run_id:
        raise UsageError("name a RUN, or filter with --status, --queue")
    app = ctx.app
    if app.cancel(args.run_id):
        out.print(f"cancelled {args.run_id}")
        return 0
    found = _existing(app, args.run_id)
    raise CliError(f"run {args.run_id} has already ended ({found.status}): nothing to cancel")


def fork(ctx: Context, args: argparse.Namespace) -> int:
    from tenure import ForkRefused

    app = ctx.app
    _existing(app, args.run_id)
    try:
        if args.dry_run:
            plan = app.fork_plan(args.run_id, args.at)
            if args.json:
                print_json(plan.to_json())
            else:
                for line in fork_plan_lines(plan, args.allow_repeat_writes):
                    out.print(line, highlight=False, markup=False)
            return 0
        fork_id = app.fork(
            args.run_id,
            args.at,
            model=args.model,
            allow_repeat_writes=args.allow_repeat_writes,
        )
    except ForkRefused as exc:
        raise CliError(str(exc)) from None
    out.print(fork_id, highlight=False)
    return 0


def _redrive_one(app: Runtime, run_id: str, force: bool) -> int:
    if app.redrive(run_id, force=force):
        out.print(f"redriven {run_id}" + (" (forced)" if force else ""))
        return 0
    found = _existing(app, run_id)
    if not found.is_dead_letter:
        state = f"{found.status}" + (
            f" ({found.termination_reason})" if found.termination_reason else ""
        )
        raise CliError(f"run {run_id} is {state}, not dead-lettered: nothing to redrive")
    if found.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE and not force:
        raise CliError(
            f"run {run_id} was stopped during a non-idempotent write (its fence stands): the "
            "write may have happened; check, then redrive it with --force"
        )
    parent = app.status(found.parent_id) if found.parent_id else None
    if parent is not None and parent.status.is_terminal:
        raise CliError(
            f"run {run_id} is a child of run {parent.id}, which is {parent.status}: a child "
            "never runs on after its parent ended; redrive the parent instead"
        )
    raise CliError(f"run {run_id} has no stored request to run again")


def _redrive_all(app: Runtime) -> int:
    # Imported here: rich.progress is a fifth of the command line's own import time.
    from rich.progress import Progress, SpinnerColumn, TextColumn

    # A live count on a terminal (stderr, so that piped output stays the plain summary).
    progress = Progress(
        SpinnerColumn(),
        TextColumn("redriving dead letters: {task.completed} looked at"),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )
    with progress:
        task = progress.add_task("redrive", total=None)
        return _redrive_pages(app, lambda: progress.advance(task))


def _redrive_pages(app: Runtime, tick: Callable[[], None]) -> int:
    redriven = fenced = refused = 0
    seen: set[str] = set()
    for reason in (TerminationReason.RETRIES_EXHAUSTED, TerminationReason.NOT_RETRYABLE):
        while True:
            # What stays dead-lettered (skipped or refused) is in `seen`: ask for that many more.
            page = [
                r
                for r in app.runs(RunStatus.FAILED, reason, limit=REDRIVE_PAGE + len(seen))
                if r.id not in seen
            ]
            if not page:
                break
            for found in page:
                tick()
                seen.add(found.id)
                # A fence whose tool has a probe goes back in doubt: the probe decides.
                if (
                    found.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE
                    and not found.fence_probe
                ):
                    fenced += 1
                elif app.redrive(found.id):
                    redriven += 1
                else:
                    refused += 1
    out.print(f"redriven {redriven}")
    out.print(
        f"skipped {fenced} (non-idempotent fence stands and its tool has no probe: "
        "redrive each with --force)"
    )
    if refused:
        out.print(f"refused {refused} (no stored request, or changed meanwhile)")
    return 0


def redrive(ctx: Context, args: argparse.Namespace) -> int:
    from tenure.cli._bulk import bulk_filter, bulk_redrive

    f = bulk_filter(args)
    if args.all_dead_letters:
        if args.run_id or args.force or f is not None:
            raise UsageError("--all-dead-letters takes no RUN, no filter and no --force")
        return _redrive_all(ctx.app)
    if f is not None:
        if args.force:
            raise UsageError("a filtered redrive takes no --force: redrive each fenced run alone")
        return bulk_redrive(ctx, f, args.yes)
    if not args.run_id:
        raise UsageError("name a RUN, filter with --reason, --queue, or use --all-dead-letters")
    return _redrive_one(ctx.app, args.run_id, args.force)


def purge(ctx: Context, args: argparse.Namespace) -> int:
    deleted = ctx.app.purge(args.older_than)
    out.print(f"purged {plural(deleted, 'run')}")
    return 0


def audit(ctx: Context, args: argparse.Namespace) -> int:
    from tenure.audit import audit as audit_store

    app = ctx.app
    if args.ledger and not Path(args.ledger).is_file():
        raise UsageError(f"--ledger {args.ledger}: no such file")
    budget = app.settings.max_requeues if args.max_requeues is None else args.max_requeues
    report = audit_store(
        app.store,
        args.ledger,
        max_requeues=budget,
        stranded_after=args.stranded_after,
    )
    out.print(report.summary(), markup=False, highlight=False)
    return 0 if report.ok else 1


def demo(ctx: Context, args: argparse.Namespace) -> int:
    if ctx.app_spec:
        raise UsageError("tenure demo runs the built-in demo app: leave out --app")
    # Before the demo (its app, its tables, its workers) is loaded or anything is opened.
    if ctx.database is not None and not ctx.database.startswith("sqlite:///"):
        raise UsageError(
            f"tenure demo needs a SQLite database (--database sqlite:///FILE), got {ctx.database}"
        )
    from tenure.demo._run import DemoOptions, run_demo

    return run_demo(
        DemoOptions(
            database_url=ctx.database,
            runs=args.runs,
            concurrency=args.concurrency,
            seed=args.seed,
        )
    )


def crashtest(ctx: Context, args: argparse.Namespace) -> int:
    from tenure.cli._crashtest import crashtest_command

    return crashtest_command(ctx, args)


def workers(ctx: Context, args: argparse.Namespace) -> int:
    from tenure.cli._workers import workers_command

    return workers_command(ctx, args)


def queues(ctx: Context, args: argparse.Namespace) -> int:
    from tenure.cli._queues import queues_command

    return queues_command(ctx, args)


def concurrency(ctx: Context, args: argparse.Namespace) -> int:
    from tenure.cli._queues import concurrency_command

    return concurrency_command(ctx, args)


def schedules(ctx: Context, args: argparse.Namespace) -> int:
    from tenure.cli._queues import schedules_command

    return schedules_command(ctx, args)


def serve(ctx: Context, args: argparse.Namespace) -> int:
    from tenure.cli._serve import serve as run_server

    return run_server(ctx, args)


HANDLERS = {
    "init": init,
    "enqueue": enqueue,
    "run": run,
    "worker": worker,
    "agents": agents,
    "reap": reap,
    "runs": runs,
    "models": models,
    "status": status,
    "show": status,
    "events": events,
    "cancel": cancel,
    "redrive": redrive,
    "fork": fork,
    "purge": purge,
    "demo": demo,
    "audit": audit,
    "serve": serve,
    "crashtest": crashtest,
    "workers": workers,
    "queues": queues,
    "concurrency": concurrency,
    "schedules": schedules,
    **human_handlers,
}
