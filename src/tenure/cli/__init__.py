"""`tenure`, the command line (SPEC §10): also `python -m tenure`.

Every user mistake ends in a one-line message and exit code 2 (bad usage: options, a
malformed script, an unknown tool or model) or 1 (the operation failed or found nothing: an
unknown run id, a database that cannot be reached or written); never in a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from tenure import InvalidRequest, TenureError
from tenure._command import CliError, Context, UsageError
from tenure.cli._commands import HANDLERS
from tenure.cli._output import error
from tenure.cli._parser import build, join_negative_values

__all__ = ["main"]


# Options that name a file: any bytes the file system allows.
_PATH_OPTIONS = frozenset({"script", "ledger", "values", "scenarios"})
_SHOWN = {"tools": "--tool", "queues": "--queue", "run_id": "RUN", "name": "NAME"}
# Commands that only read: on SQLite, a file that is not there is a mistake, not a new
# database. (`serve` checks it too, after its own usage checks.)
READ_ONLY = frozenset(
    {
        "runs",
        "status",
        "events",
        "audit",
        "pending",
        "models",
        "workers",
        "queues",
        "concurrency",
        "schedules",
    }
)
# Commands that need nothing of the app but its database (no tool, no model, no setting).
STORE_ONLY = frozenset(
    {"runs", "status", "events", "workers", "queues", "concurrency", "schedules"}
)
# Commands that run until stopped, riding out a database outage; every other one gives up
# on a PostgreSQL server that does not answer within seconds.
LONG_RUNNING = frozenset({"worker", "serve"})


def _check_text_arguments(args: argparse.Namespace) -> None:
    """Every text argument is UTF-8 (an argument that is not reaches Python as a lone
    surrogate, which no store can hold): refused here, before anything is opened."""
    for name, value in vars(args).items():
        if name in _PATH_OPTIONS:
            continue
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    option = _SHOWN.get(name, "--" + name.replace("_", "-"))
                    raise UsageError(f"{option}: not valid UTF-8 text") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build(HANDLERS)
    args = parser.parse_args(join_negative_values(sys.argv[1:] if argv is None else argv))
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    ctx = Context(
        args.app,
        args.database,
        existing=args.command in READ_ONLY,
        store_only=args.command in STORE_ONLY,
        one_shot=args.command not in LONG_RUNNING,
    )
    try:
        _check_text_arguments(args)
        code: int = args.handler(ctx, args)
    except CliError as exc:
        error(exc.message)
        return exc.code
    except InvalidRequest as exc:
        error(str(exc))
        return 2
    except TenureError as exc:
        error(str(exc))
        return 1
    except KeyboardInterrupt:
        error("interrupted")
        return 130
    except BrokenPipeError:
        # The reader went away (`tenure runs | head`): nothing left to say, and nobody to say
        # it to; point stdout at nothing so that the interpreter's final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:
        ctx.close()
    return code
