"""`tenure`, the command line (SPEC §10): also `python -m tenure`.

Every user mistake ends in a one-line message and exit code 2 (bad usage: options, a
malformed script, an unknown tool or model) or 1 (the operation failed or found nothing: an
unknown run id, a database that cannot be reached or written); never in a traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from tenure import InvalidRequest, TenureError
from tenure.cli._app import CliError, Context
from tenure.cli._commands import HANDLERS
from tenure.cli._output import error
from tenure.cli._parser import build

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build(HANDLERS)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    ctx = Context(args.app, args.database)
    try:
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
