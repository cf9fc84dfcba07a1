"""`tenure crashtest`: the crash harness of SPEC §19 for the app of `--app`, as a table of
scenario x crash point x property; exit 1 on any violation."""

from __future__ import annotations

import argparse
import json

from rich.table import Table
from rich.text import Text

from tenure._command import DEFAULT_APP, Context, UsageError
from tenure.cli._output import err, out, plural, table
from tenure.testing import PROPERTIES, CrashReport, Result, Verdict, crashtest

# Column heads short enough for an 80-column terminal; the docs spell each property out.
SHORT = {
    "prefix continuation": "prefix",
    "recovery determinism": "determinism",
    "checkpoint validity": "checkpoints",
}


def _cell(verdict: Verdict) -> Text:
    if verdict.ok is None:
        return Text("-", style="dim")
    return Text("ok", style="green") if verdict.ok else Text("VIOLATED", style="bold red")


def _table(report: CrashReport) -> Table:
    table = Table(show_lines=False)
    table.add_column("scenario")
    table.add_column("point")
    for prop in PROPERTIES:
        table.add_column(SHORT.get(prop, prop))
    for r in report.results:
        table.add_row(r.scenario, r.point, *(_cell(r.verdicts[p]) for p in PROPERTIES))
    return table


def _plain_table(report: CrashReport) -> None:
    """The same table as aligned lines: rich fits a table to 80 columns when stdout is not a
    terminal, which cut the property columns off a piped or logged report."""
    table(
        ["scenario", "point", *(SHORT.get(p, p) for p in PROPERTIES)],
        (
            [r.scenario, r.point, *(_cell(r.verdicts[p]) for p in PROPERTIES)]
            for r in report.results
        ),
    )


def _as_json(r: Result) -> dict[str, object]:
    return {
        "scenario": r.scenario,
        "point": r.point,
        "run_id": r.run_id,
        "database": r.database,
        "properties": {p: {"ok": v.ok, "detail": v.detail} for p, v in r.verdicts.items()},
    }


def crashtest_command(ctx: Context, args: argparse.Namespace) -> int:
    if args.deciders < 1:
        raise UsageError("--deciders: at least 1")
    app = ctx.app
    # The global --database is where the cases run (PostgreSQL: each on its own queue);
    # without it every case gets a fresh SQLite file.
    database = ctx.database
    with err.status("crash-testing…") as status:

        def progress(r: Result) -> None:
            mark = "ok" if r.ok else "VIOLATED"
            status.update(f"crash-testing… {r.scenario} / {r.point}: {mark}")

        report = crashtest(
            app,
            args.scenarios,
            points=args.points,
            app=ctx.app_spec or DEFAULT_APP,
            database=database,
            deciders=args.deciders,
            progress=progress,
        )
    if args.json:
        out.print(json.dumps([_as_json(r) for r in report.results], indent=2))
    else:
        if out.is_terminal:
            out.print(_table(report))
        else:
            _plain_table(report)
        for line in report.violations():
            out.print(Text("VIOLATION ", style="bold red") + Text(line))
        cases = plural(len(report.results), "case")
        verdict = "no violation" if report.ok else plural(len(report.violations()), "violation")
        out.print(f"{cases} in {report.seconds:.0f}s: {verdict}")
    return 0 if report.ok else 1
