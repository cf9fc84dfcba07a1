"""`tenure serve`: the API, the dashboard and /metrics of the app on one port."""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import socket
import sys
import threading
from typing import Any

from tenure._command import CliError, Context, UsageError, require_sqlite_file
from tenure._text import without_password
from tenure.cli._output import err

# What the web extra brings: a base install that lacks one of them cannot serve.
WEB_EXTRA_MODULES = frozenset(
    {
        "fastapi",
        "starlette",
        "uvicorn",
        "jinja2",
        "multipart",
        "python_multipart",
        "prometheus_client",
    }
)
TOKEN_VARIABLE = "TENURE_API_TOKEN"
HOSTS_VARIABLE = "TENURE_ALLOWED_HOSTS"
_HOST_NAME = re.compile(r"^[a-z0-9_.:-]+$")
GRACEFUL_SHUTDOWN_SECONDS = 3
# Shorter tokens are accepted with a warning: guessing is the only attack on them.
MIN_TOKEN_LENGTH = 16
# uvicorn's own default.
LISTEN_BACKLOG = 2048


def serve(ctx: Context, args: argparse.Namespace) -> int:
    uvicorn, create_app, writes_need_token = _web_extra()
    tracing = _tracing(args.otel)
    token = os.environ.get(TOKEN_VARIABLE, "").strip() or None
    hosts = _allowed_hosts(args.host, args.allowed_host)
    # A server on a misspelt path would show an empty dashboard and queue runs that no worker
    # reads: refused like the commands that only read. Checked before `create_app`, which
    # connects, and not when it is about to refuse to serve without a token (a usage error).
    if token or args.public_read:
        require_sqlite_file(ctx.app.database_url)
    try:
        app = create_app(
            ctx.app,
            token=token,
            public_read=args.public_read,
            tracing=tracing,
            allowed_hosts=hosts,
        )
    except writes_need_token as exc:
        raise UsageError(str(exc)) from None
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("tenure").setLevel(logging.INFO)
    mode = _access_mode(token, args.public_read)
    # Bound before anything is said or started: a port in use is one line, not a
    # "serving on" line followed by uvicorn's own report of the failure.
    sock = _listen(args.host, args.port)
    where = without_password(ctx.app.database_url)
    err.print(f"tenure serve on http://{args.host}:{args.port} for {where}: {mode}")
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then re-raises the signal to the
    # handler it found: this one, so that a requested stop exits 0 like `tenure worker`.
    stopped: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stopped.append(signum))
    worker = ctx.app.worker(args.work) if args.work else None
    thread = threading.Thread(target=worker.run, name="tenure-worker") if worker else None
    if worker is not None and thread is not None:
        err.print(f"{worker.identity}: concurrency {args.work}, in this process")
        thread.start()
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        proxy_headers=False,
        # An event stream follows its run until the run ends: a stop does not wait that long.
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        if worker is not None and thread is not None:
            worker.stop()  # drains: in-flight runs get the worker's grace period
            thread.join()
    err.print("tenure serve stopped")
    return 0


def _web_extra() -> tuple[Any, Any, type[Exception]]:
    """uvicorn, `create_app` and `WritesNeedToken`, or one line naming the extra to install."""
    try:
        import uvicorn

        from tenure.web import WritesNeedToken, create_app
    except ImportError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in WEB_EXTRA_MODULES:
            raise
        raise CliError(
            f"tenure serve needs the web extra ({missing} is not installed): "
            "pip install 'tenure[web]'"
        ) from None
    return uvicorn, create_app, WritesNeedToken


def _tracing(wanted: bool) -> Any:
    if not wanted:
        return None
    try:
        from tenure.web._otel import Tracing
    except ImportError:
        raise CliError("--otel needs the otel extra: pip install 'tenure[otel]'") from None
    return Tracing()


def _access_mode(token: str | None, public_read: bool) -> str:
    """What the served API allows without a token; warns about a short token."""
    if token is None:
        return "read-only (no token)"
    if len(token) < MIN_TOKEN_LENGTH:
        err.print(
            f"warning: {TOKEN_VARIABLE} is short ({len(token)} characters); "
            "use 32 random characters or more"
        )
    if public_read:
        return "anyone may read; writes need the bearer token"
    return "reads and writes need the bearer token"


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on `host:port`, or a one-line error saying why not."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:
        raise CliError(f"cannot listen on {host}:{port}: {_reason(exc)}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        raise CliError(f"cannot listen on {host}:{port}: {_reason(exc)}") from None
    sock.set_inheritable(True)
    return sock


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[0].lower() + exc.strerror[1:]
    return str(exc)


def _allowed_hosts(bound: str, given: list[str]) -> frozenset[str]:
    """The Host names to answer to: the served ones, --allowed-host and $TENURE_ALLOWED_HOSTS."""
    from tenure.web._security import host_name, served_hosts

    names = []
    for value in [*given, *os.environ.get(HOSTS_VARIABLE, "").split(",")]:
        if not value.strip():
            continue
        name = host_name(value)
        if name is None or not _HOST_NAME.match(name):
            raise UsageError(f"allowed host {value!r} is not a host name")
        names.append(name)
    return served_hosts(bound, names)
