"""The `tenure` command line: global options, commands and their options (SPEC §10)."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from rich.text import Text

from tenure import RunStatus, TerminationReason, __version__
from tenure._policy import (
    DEFAULT_BACKOFF_BASE,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_REQUEUES,
    MAX_AGE_SECONDS,
    MAX_DELAY_SECONDS,
    MAX_ITERATIONS_CEILING,
)
from tenure._requests import PRIORITY_MAX, PRIORITY_MIN
from tenure.cli._human import add_parsers as add_human_parsers
from tenure.cli._output import err

DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the help already says it or there is
    nothing to show (a flag, an option that is off unless given)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or "default" in text
            or default in (None, False, argparse.SUPPRESS)
            or default == []
        ):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage mistake in one line, exit code 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments:") and _names_a_global(message):
            message += f"; global options go before the command: {GLOBAL_ORDER}"
        err.print(
            Text(f"{self.prog}: error: ", style="bold red")
            + Text(f"{message} (see '{self.prog} --help')")
        )
        raise SystemExit(2)


GLOBAL_OPTIONS = ("--database", "--app")
GLOBAL_ORDER = "tenure --database URL --app MODULE:ATTR COMMAND ..."


def _names_a_global(message: str) -> bool:
    words = message.partition(":")[2].split()
    return any(w.partition("=")[0] in GLOBAL_OPTIONS for w in words)


_NEGATIVE = re.compile(r"^-\d")


def join_negative_values(argv: Sequence[str]) -> list[str]:
    """`--older-than -5d` as `--older-than=-5d`: argparse takes a value that starts with a
    dash and is not a plain number for an option, and would say only "expected one argument";
    joined, the value reaches its type, which says what is wrong with it."""
    out: list[str] = []
    for word in argv:
        previous = out[-1] if out else ""
        if _NEGATIVE.match(word) and previous.startswith("--") and "=" not in previous:
            out[-1] = f"{previous}={word}"
        else:
            out.append(word)
    return out


def duration(text: str) -> float:
    """`30d`, `12h`, `45m`, `90s` (a number and a unit) in seconds."""
    if text.strip().startswith("-"):
        raise argparse.ArgumentTypeError(
            f"bad duration {text!r}: it cannot be negative; use a number and a unit s, m, h or d, "
            "e.g. 30d or 12h"
        )
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"bad duration {text!r}: use a number and a unit s, m, h or d, e.g. 30d or 12h"
        )
    value = float(match.group(1)) * DURATION_UNITS[match.group(2)]
    if value > MAX_AGE_SECONDS:
        raise argparse.ArgumentTypeError(f"duration {text!r} is longer than the ceiling, 36600d")
    return value


def metadata_pair(text: str) -> tuple[str, str]:
    """`KEY=VALUE`: a metadata key and the text value a run's must have."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"bad metadata {text!r}: use KEY=VALUE, e.g. tenant=acme")
    return key, value


# Whole numbers end up in 64-bit database columns and parameters.
MAX_INT = 2**63 - 1
# A TCP port: the socket layer takes a larger number modulo 65536 (70000 listens on 4464).
MAX_PORT = 65535
# Slots are threads of one process: far past what one process serves, far short of what
# exhausts it.
MAX_SLOTS = 10_000
# Rows a listing or a reaper pass reads at once.
MAX_LIMIT = 1_000_000
# Processes the crash harness starts at once to decide one waiting run.
MAX_DECIDERS = 64
MAX_DEMO_RUNS = 100_000


def _whole(text: str, low: int, high: int = MAX_INT) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from {low} to {high}, got {text!r}"
        )
    return value


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high`."""

    def parse(text: str) -> int:
        return _whole(text, low, high)

    parse.__name__ = f"whole number from {low} to {high}"
    return parse


positive_int = whole_number(1, MAX_INT)
non_negative_int = whole_number(0, MAX_INT)
# An event sequence to read after: -1 (from the start) or more.
sequence_int = whole_number(-1, MAX_INT)
limit_int = whole_number(1, MAX_LIMIT)
slots_int = whole_number(1, MAX_SLOTS)
port_int = whole_number(1, MAX_PORT)


def _number(text: str, *, allow_zero: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise argparse.ArgumentTypeError(f"expected a number of seconds {bound}, got {text!r}")
    if value > MAX_DELAY_SECONDS:
        raise argparse.ArgumentTypeError(
            f"expected at most {MAX_DELAY_SECONDS:.0f} seconds (366 days), got {text!r}"
        )
    return value


def seconds(text: str) -> float:
    return _number(text, allow_zero=True)


def positive_seconds(text: str) -> float:
    return _number(text, allow_zero=False)


Handler = Callable[..., int]


def _request_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--prompt", metavar="TEXT", help="what the agent should do (not needed with --agent)"
    )
    p.add_argument(
        "--agent",
        metavar="NAME",
        help="run this agent function of the app (see `tenure agents`) instead of the "
        "built-in loop",
    )
    p.add_argument(
        "--input",
        metavar="JSON",
        help="the agent function's input: a JSON object matching its parameters",
    )
    p.add_argument("--model", default="default", metavar="M", help="a registered model")
    p.add_argument(
        "--tool",
        dest="tools",
        action="append",
        default=[],
        metavar="T",
        help="a registered tool the run may call (repeatable)",
    )
    p.add_argument(
        "--script",
        metavar="FILE",
        help="a JSON array of turns for the scripted model ('-' reads standard input)",
    )
    p.add_argument("--queue", default="default", metavar="Q", help="the queue it waits on")
    p.add_argument("--idempotency-key", metavar="K", help="enqueue at most one run per key")
    p.add_argument(
        "--max-iterations",
        type=whole_number(1, MAX_ITERATIONS_CEILING),
        default=10,
        metavar="N",
        help="model turns the run may take",
    )
    p.add_argument(
        "--priority",
        type=whole_number(PRIORITY_MIN, PRIORITY_MAX),
        default=0,
        metavar="P",
        help=f"claimed before runs of a lower one ({PRIORITY_MIN} to {PRIORITY_MAX})",
    )
    p.add_argument(
        "--concurrency-key",
        metavar="KEY",
        help="held to the key's limit (`tenure concurrency set KEY N`), shared fairly",
    )


def _filter_options(p: argparse.ArgumentParser, what: str = "only runs") -> None:
    p.add_argument(
        "--status",
        choices=[s.value for s in RunStatus],
        metavar="S",
        help=f"{what} in this status: " + ", ".join(s.value for s in RunStatus),
    )
    p.add_argument(
        "--reason",
        choices=[r.value for r in TerminationReason],
        metavar="R",
        help=f"{what} that ended for this reason: " + ", ".join(r.value for r in TerminationReason),
    )
    p.add_argument("--queue", metavar="Q", help=f"{what} of this queue")


def _bulk_options(p: argparse.ArgumentParser, action: str) -> None:
    _filter_options(p, f"{action} every run")
    p.add_argument(
        "--yes",
        action="store_true",
        help=f"{action} the runs the filter matches without asking",
    )


def build(handlers: dict[str, Handler]) -> Parser:
    parser = Parser(
        prog="tenure",
        description="Durable LLM agent runs: enqueue, work, inspect and operate them.",
        epilog="Exit codes: 0 success, 1 the operation failed or found nothing, 2 bad usage.",
    )
    parser.add_argument(
        "--database",
        metavar="URL",
        help="sqlite:///FILE or postgresql://... "
        "(default: $TENURE_DATABASE_URL, else sqlite:///tenure.db)",
    )
    parser.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        help="your tenure.Runtime, with its tools and models (default: the built-in demo app, "
        "tenure.demo:app)",
    )
    parser.add_argument("--version", action="version", version=f"tenure {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(handler=handlers[name])
        return p

    command("init", "create or migrate the schema (also done on first use)")

    p = command("enqueue", "queue a run; prints its id")
    _request_options(p)
    p.add_argument("--delay", type=seconds, default=0.0, metavar="S", help="not before S seconds")

    p = command("run", "execute a run here and now; prints its outcome and answer")
    _request_options(p)

    p = command("worker", "work the queue; SIGTERM or Ctrl-C drains it gracefully")
    p.add_argument(
        "--concurrency",
        type=slots_int,
        default=4,
        metavar="N",
        help="how many runs this worker executes at once",
    )
    p.add_argument(
        "--queue",
        dest="queues",
        action="append",
        metavar="Q",
        help="only this queue (repeatable; default: every queue)",
    )
    p.add_argument("--burst", action="store_true", help="stop when nothing is runnable now")
    p.add_argument(
        "--lease-seconds",
        type=positive_seconds,
        metavar="S",
        help=f"override the app's lease (default: the app's, {DEFAULT_LEASE_SECONDS:g} "
        "unless it sets one)",
    )
    p.add_argument(
        "--backoff-base",
        type=positive_seconds,
        metavar="S",
        help="override the app's retry backoff base "
        f"(default: the app's, {DEFAULT_BACKOFF_BASE:g} unless it sets one)",
    )
    p.add_argument(
        "--poll-interval",
        type=positive_seconds,
        default=1.0,
        metavar="S",
        help="seconds between looks at an idle queue",
    )
    p.add_argument(
        "--grace-seconds",
        type=seconds,
        default=30.0,
        metavar="S",
        help="how long a drain waits for in-flight runs before handing them back",
    )

    p = command("agents", "the app's agent functions and the input each takes")
    p.add_argument("--json", action="store_true", help="a JSON array: name, description, schema")

    p = command("reap", "one reaper pass over runs whose lease expired; prints the counts")
    p.add_argument("--limit", type=limit_int, default=50, metavar="N", help="runs looked at")

    p = command("runs", "a table of runs, newest first")
    _filter_options(p)
    p.add_argument(
        "--meta",
        type=metadata_pair,
        action="append",
        metavar="KEY=VALUE",
        help="only runs whose request's metadata has KEY with this text value (repeatable)",
    )
    p.add_argument(
        "--since", type=duration, metavar="DURATION", help="only runs created within, e.g. 2h"
    )
    p.add_argument(
        "--until", type=duration, metavar="DURATION", help="only runs created before, e.g. 30m"
    )
    tree = p.add_mutually_exclusive_group()
    tree.add_argument("--parent", metavar="RUN", help="only the child runs of this run")
    tree.add_argument("--roots", action="store_true", help="only runs without a parent run")
    p.add_argument("--limit", type=limit_int, default=100, metavar="N", help="at most N runs")
    p.add_argument("--json", action="store_true", help="a JSON array of run objects")

    p = command("workers", "worker processes: state (dead when its heartbeat is overdue), slots")
    p.add_argument("--all", action="store_true", help="the stopped ones too")
    p.add_argument("--limit", type=limit_int, default=100, metavar="N", help="at most N workers")
    p.add_argument("--json", action="store_true", help="a JSON array of worker objects")
    p = command(
        "queues",
        "queues: paused or not, runs queued, running and waiting, tokens and cost of the "
        "last 24 h; pause or resume one",
    )
    p.add_argument("--json", action="store_true", help="a JSON array of queue objects")
    actions = p.add_subparsers(dest="queue_action", metavar="ACTION", parser_class=Parser)
    pause = actions.add_parser(
        "pause",
        help="workers claim no run of the queue until it is resumed (runs already running go on)",
        description="workers claim no run of the queue until it is resumed (runs already "
        "running go on); it still takes enqueues",
    )
    pause.add_argument("name", metavar="NAME", help="the queue")
    pause.add_argument("--by", default="", metavar="WHO", help="who paused it (shown in listings)")
    resume = actions.add_parser(
        "resume",
        help="workers claim the queue's runs again",
        description="workers claim the queue's runs again",
    )
    resume.add_argument("name", metavar="NAME", help="the queue")

    p = command(
        "concurrency",
        "concurrency keys: limit, runs running and queued; set a key's limit",
    )
    p.add_argument("--json", action="store_true", help="a JSON array of key objects")
    actions = p.add_subparsers(dest="concurrency_action", metavar="ACTION", parser_class=Parser)
    limit = actions.add_parser(
        "set",
        help="at most N runs of the key run at once, on every worker (none: no limit)",
        description="at most N runs with this concurrency key run at once, across every "
        "worker and host, from the next claim on (runs already running go on); 0 holds them "
        "queued, none removes the limit",
    )
    limit.add_argument("key", metavar="KEY", help="the concurrency key")
    limit.add_argument("limit", metavar="N", help="a whole number, 0 or more, or none")

    p = command("schedules", "cron schedules: next and last fire; pause, resume or delete one")
    p.add_argument("--json", action="store_true", help="a JSON array of schedule objects")
    actions = p.add_subparsers(dest="schedule_action", metavar="ACTION", parser_class=Parser)
    for name, what in (
        ("pause", "no tick of the schedule fires until it is resumed"),
        ("resume", "the schedule fires again from its next tick after now"),
        ("delete", "remove the schedule (the runs it enqueued stay)"),
    ):
        action = actions.add_parser(name, help=what, description=what)
        action.add_argument("name", metavar="NAME", help="the schedule")

    p = command("models", "every model: its limits, calls in flight and circuit")
    p.add_argument("--json", action="store_true", help="a JSON array of model objects")

    for name in ("status", "show"):
        p = command(name, "one run" + (" (the same as status)" if name == "show" else ""))
        p.add_argument("run_id", metavar="RUN", help="the run's id")
        p.add_argument(
            "--tree",
            action="store_true",
            help="the run and its child runs, theirs too, with their statuses",
        )
        p.add_argument("--json", action="store_true", help="the run as a JSON object")

    p = command("events", "a run's events")
    p.add_argument("run_id", metavar="RUN", help="the run's id")
    p.add_argument(
        "--after", type=sequence_int, default=-1, metavar="N", help="only sequences above N"
    )
    p.add_argument("--follow", action="store_true", help="stream new events until it ends")
    p.add_argument(
        "--json",
        action="store_true",
        help="a JSON array of event objects (with --follow: one JSON object per line)",
    )

    p = command(
        "cancel",
        "cancel a run that has not ended, or every run a filter matches (--status, --queue): "
        "prints the count and asks first",
    )
    p.add_argument("run_id", metavar="RUN", nargs="?", help="the run's id")
    _bulk_options(p, "cancel")

    p = command(
        "fork",
        "rerun a run from a step: a new queued run with the run's events before SEQUENCE "
        "(prints its id); refused if it would repeat a non-idempotent write",
    )
    p.add_argument("run_id", metavar="RUN", help="the run to fork (ended, or waiting for a person)")
    p.add_argument(
        "--at",
        type=positive_int,
        required=True,
        metavar="SEQUENCE",
        help="the first event not kept: the fork runs again from there",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (kept, run again, writes that would repeat) and store nothing",
    )
    p.add_argument(
        "--allow-repeat-writes",
        action="store_true",
        help="fork even if completed non-idempotent writes would run again",
    )
    p.add_argument("--model", metavar="M", help="the model the fork uses from there")
    p.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")

    p = command(
        "redrive",
        "send a dead-lettered run back to the queue with a fresh budget, or every dead letter "
        "a filter matches (--reason, --queue): prints the count and asks first",
    )
    p.add_argument("run_id", metavar="RUN", nargs="?", help="the run's id")
    _bulk_options(p, "redrive")
    p.add_argument(
        "--force",
        action="store_true",
        help="even if a non-idempotent write may have happened (its fence stands)",
    )
    p.add_argument(
        "--all-dead-letters",
        action="store_true",
        help="every dead-lettered run, except those whose non-idempotent fence stands",
    )

    p = command("purge", "delete ended runs, and their events, older than a duration")
    p.add_argument(
        "--older-than", type=duration, required=True, metavar="DURATION", help="e.g. 30d, 12h"
    )

    p = command("audit", "check every run and its events against the promises; 1 on a violation")
    p.add_argument(
        "--ledger", metavar="FILE", help="an external ledger: lines RUN_ID IDEMPOTENCY_KEY [TOKEN]"
    )
    p.add_argument(
        "--max-requeues",
        type=non_negative_int,
        metavar="N",
        help="override the app's requeue budget "
        f"(default: the app's, {DEFAULT_MAX_REQUEUES} unless it sets one)",
    )
    p.add_argument(
        "--stranded-after",
        type=seconds,
        metavar="S",
        help="a lease expired longer ago than S seconds is a violation (default: no such check)",
    )

    p = command("serve", "the HTTP API, the dashboard and /metrics (the web extra)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    p.add_argument("--port", type=port_int, default=8000, metavar="N", help="the TCP port")
    p.add_argument(
        "--public-read",
        action="store_true",
        help="reads need no token (writes still need $TENURE_API_TOKEN; without it: read-only)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer to this Host name, e.g. behind a reverse proxy (repeatable; "
        "also $TENURE_ALLOWED_HOSTS, comma-separated)",
    )
    p.add_argument("--otel", action="store_true", help="OpenTelemetry spans per run and step")
    p.add_argument(
        "--work",
        type=slots_int,
        metavar="N",
        help="also work the queue here with N slots (their segments show on /metrics; "
        "default: no worker)",
    )

    add_human_parsers(command)

    p = command("crashtest", "SIGKILL your app's workers at every crash point; 1 on a violation")
    p.add_argument(
        "--scenarios",
        required=True,
        metavar="FILE",
        help="a JSON array of objects: name plus the fields of a run request",
    )
    p.add_argument(
        "--points",
        metavar="LIST",
        help="comma-separated kinds: step, write-before, write-after, write-timeout, waiting, "
        "resume, drain, child (default: all)",
    )
    p.add_argument(
        "--deciders",
        type=whole_number(1, MAX_DECIDERS),
        default=3,
        metavar="K",
        help="processes deciding a waiting run at once",
    )
    p.add_argument("--json", action="store_true", help="the verdicts as a JSON array")

    p = command("demo", "the main job: scripted runs, two workers, one killed, an audit")
    p.add_argument(
        "--runs",
        type=whole_number(1, MAX_DEMO_RUNS),
        default=300,
        metavar="N",
        help="queued runs; four interactive runs are added",
    )
    p.add_argument("--concurrency", type=slots_int, default=8, metavar="N", help="per worker")
    p.add_argument(
        "--seed", type=non_negative_int, default=7, metavar="N", help="the workload's mix"
    )
    return parser
