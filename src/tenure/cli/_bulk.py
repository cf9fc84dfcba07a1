"""`tenure cancel` and `tenure redrive` with filters: the runs the filter matches are
counted, the count is printed and confirmed (`--yes` skips the question), then each run is
cancelled or redriven by its own guarded transition (`tenure._bulk`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tenure import RunStatus, TerminationReason
from tenure._bulk import Filter, Selection, cancel_each, redrive_each, select
from tenure._command import CliError, Context, UsageError
from tenure.cli._output import err, out, plural

# Ids shown with the count, before the question.
SHOWN = 5


def bulk_filter(args: argparse.Namespace) -> Filter | None:
    """The filter of a bulk cancel or redrive; None when none was given (one RUN)."""
    if not (args.status or args.reason or args.queue):
        if args.yes:
            raise UsageError("--yes confirms a filter (--status, --reason, --queue): name one")
        return None
    if args.run_id:
        raise UsageError("name one RUN, or filter with --status, --reason, --queue: not both")
    return Filter(
        RunStatus(args.status) if args.status else None,
        TerminationReason(args.reason) if args.reason else None,
        args.queue,
    )


@contextmanager
def _progress(label: str) -> Iterator[Callable[[], None]]:
    # Imported here: rich.progress is a fifth of the command line's own import time.
    from rich.progress import Progress, SpinnerColumn, TextColumn

    # A live count on a terminal (stderr, so that piped output stays the plain summary).
    progress = Progress(
        SpinnerColumn(),
        TextColumn(label + ": {task.completed}"),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )
    with progress:
        task = progress.add_task(label, total=None)
        yield lambda: progress.advance(task)


def _confirmed(verb: str, chosen: Selection, yes: bool) -> bool:
    ids = [r.id for r in chosen.runs]
    more = f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else ""
    out.print(
        f"{plural(len(ids), 'run')} to {verb} ({chosen.filter.describe()}): "
        + ", ".join(ids[:SHOWN])
        + more,
        markup=False,
        highlight=False,
    )
    if yes:
        return True
    err.print(f"{verb} {plural(len(ids), 'run')}? [y/N] ", end="", markup=False)
    answer = sys.stdin.readline()
    if not sys.stdin.isatty():
        err.print()  # the answer came from a pipe: end the question's line
    return answer.strip().lower() in ("y", "yes")


def bulk_cancel(ctx: Context, f: Filter, yes: bool) -> int:
    store = ctx.app.store
    with _progress("runs looked at") as tick:
        chosen = select(store, "cancel", f, tick=tick)
    if not chosen.runs:
        out.print(f"no run to cancel ({f.describe()})")
        return 0
    if not _confirmed("cancel", chosen, yes):
        raise CliError("not confirmed: nothing cancelled")
    with _progress("runs cancelled") as tick:
        done = cancel_each(store, chosen, tick)
    out.print(f"cancelled {len(done.done)}")
    if done.changed:
        moved = f"no longer {f.status}" if f.status else "ended"
        out.print(f"changed meanwhile {len(done.changed)} ({moved}: not cancelled)")
    return 0


def bulk_redrive(ctx: Context, f: Filter, yes: bool) -> int:
    store = ctx.app.store
    with _progress("dead letters looked at") as tick:
        chosen = select(store, "redrive", f, tick=tick)
    fenced = (
        f"skipped {len(chosen.skipped)} (non-idempotent fence stands and its tool has no "
        "probe: redrive each with --force)"
    )
    if not chosen.runs:
        out.print(f"no dead letter to redrive ({f.describe()})")
        if chosen.skipped:
            out.print(fenced)
        return 0
    if chosen.skipped:
        out.print(fenced)
    if not _confirmed("redrive", chosen, yes):
        raise CliError("not confirmed: nothing redriven")
    with _progress("runs redriven") as tick:
        done = redrive_each(store, chosen, tick)
    out.print(f"redriven {len(done.done)}")
    if done.changed:
        out.print(f"refused {len(done.changed)} (no stored request, or changed meanwhile)")
    return 0
