"""What every command gets, wherever it is written (`tenure.cli`, `tenure.demo`): the errors
that end a command in one line, and the Runtime it works with: `--app MODULE:ATTR` (the
user's, with its tools and models, found the way `celery -A` finds an app) or the built-in
demo app, on `--database`.

It imports nothing of the command line, the dashboard or the demo, so that each of them can
import it without importing the others."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from tenure import Runtime

DEFAULT_APP = "tenure.demo:app"
# How long a one-shot command waits for a PostgreSQL server that has not answered yet: long
# enough for a quick restart, short enough that a person or cron hears at once that it is
# down. Once it has answered, the store rides out an outage for its whole retry window.
ONE_SHOT_REACH_SECONDS = 3.0


class CliError(Exception):
    """A one-line message for the user and the exit code that goes with it."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class UsageError(CliError):
    def __init__(self, message: str) -> None:
        super().__init__(message, 2)


class NotFound(CliError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run with id {run_id!r}", 1)


def load_app(spec: str | None) -> Runtime:
    """The Runtime at `MODULE:ATTR` (ATTR defaults to `app`)."""
    spec = spec or DEFAULT_APP
    module_name, _, attr = spec.partition(":")
    # Said when the attribute is missing: the user may not know that `:app` was assumed.
    assumed = (
        "" if attr else f" (the attribute looked for when none is named; use {module_name}:ATTR)"
    )
    attr = attr or "app"
    if not module_name:
        raise UsageError(f"--app {spec!r}: expected MODULE:ATTR, e.g. myproject.agents:rt")
    # Like `celery -A`: modules of the current directory are importable.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise UsageError(f"--app {spec}: no module named {module_name!r}") from None
        raise
    found: Any = module
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise UsageError(
                f"--app {spec}: module {module_name!r} has no {attr!r}{assumed}"
            ) from None
    if not isinstance(found, Runtime):
        raise UsageError(f"--app {spec}: {attr} is a {type(found).__name__}, not a tenure.Runtime")
    return found


def require_sqlite_file(url: str) -> None:
    """A SQLite database named by `url` exists, or a one-line error naming its path.

    Checked before anything connects: connecting creates the file, so a misspelt path would
    read as an empty database ("no runs") and leave that empty file behind."""
    if not url.startswith("sqlite:"):
        return
    from tenure.store.sqlite import parse_url

    try:
        path = parse_url(url)[0]
    except ValueError:
        return  # opening the store says what is wrong with the URL
    if not os.path.exists(path):
        raise CliError(
            f"database file {path!r} does not exist (check the path; `tenure init` creates one)"
        )


class Context:
    """What every command gets: its arguments and, on first use, the app on its database.

    `existing`: the command only reads, so a SQLite file that is not there is an error
    rather than a new, empty database. `store_only`: the command reads only what the database
    holds, so without `--app` a bare Runtime does: the built-in demo app's tools cost a
    pydantic import and a model per tool, a third of such a command's start. `one_shot`: the
    command does its work and ends (not a worker or a server), so a PostgreSQL server that
    does not answer ends it within `ONE_SHOT_REACH_SECONDS`, in one line."""

    def __init__(
        self,
        app_spec: str | None,
        database: str | None,
        existing: bool = False,
        store_only: bool = False,
        one_shot: bool = False,
    ) -> None:
        self.app_spec = app_spec
        self.database = database
        self.existing = existing
        self.store_only = store_only
        self.one_shot = one_shot
        self._app: Runtime | None = None

    @property
    def app(self) -> Runtime:
        if self._app is None:
            app = Runtime() if self.store_only and not self.app_spec else load_app(self.app_spec)
            if self.database:
                app.use_database(self.database)
            if self.existing:
                require_sqlite_file(app.database_url)
            if self.one_shot:
                app._reach_seconds = ONE_SHOT_REACH_SECONDS
            self._app = app
        return self._app

    def close(self) -> None:
        if self._app is not None:
            self._app.close()
