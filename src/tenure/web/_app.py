"""The web app: the JSON API, the dashboard and /metrics in one ASGI application."""

from __future__ import annotations

import logging
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tenure import Runtime, __version__
from tenure._errors import DecisionConflict, InvalidRequest, StoreError, TenureError
from tenure.web import _api, _pages
from tenure.web._metrics import Metrics, instrument
from tenure.web._security import HostCheck, Security
from tenure.web._state import Web, web_of

log = logging.getLogger("tenure.web")

_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)
_HEADERS = [
    (b"content-security-policy", _CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
]
HITL_METHODS = ("pending", "pending_calls", "approve", "submit_input")


class WritesNeedToken(ValueError):
    pass


class SecurityHeaders:
    """Every response: no framing, no sniffing, nothing loaded from anywhere but here."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def has_hitl(runtime: Runtime) -> bool:
    return all(callable(getattr(runtime, m, None)) for m in HITL_METHODS)


def _wants_html(request: Request) -> bool:
    path = request.url.path
    return not (path.startswith("/api") or path == "/metrics")


def _error(request: Request, status: int, message: str, headers: Any = None) -> Response:
    if _wants_html(request):
        return _pages.error_page(request, status, message, headers)
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return _error(request, exc.status_code, str(exc.detail), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        details = jsonable_encoder(
            [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        )
        first = details[0] if details else {}
        where = ".".join(str(p) for p in first.get("loc", []))
        message = f"invalid request: {where}: {first.get('msg', '')}".strip(": ")
        if _wants_html(request):
            return _pages.error_page(request, 422, message)
        return JSONResponse({"error": message, "detail": details}, status_code=422)

    @app.exception_handler(InvalidRequest)
    async def bad_request(request: Request, exc: InvalidRequest) -> Response:
        return _error(request, 400, str(exc))

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError) -> Response:
        log.warning("database error on %s %s: %s", request.method, request.url.path, exc)
        return _error(request, 503, f"database unavailable: {exc}")

    @app.exception_handler(DecisionConflict)
    async def conflict(request: Request, exc: DecisionConflict) -> Response:
        # A decision that lost its race, or a run that is not waiting (any more).
        return _error(request, 409, str(exc))

    @app.exception_handler(TenureError)
    async def tenure_error(request: Request, exc: TenureError) -> Response:
        return _error(request, 400, str(exc))

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> Response:
        # The trace goes to the server's log, never into a response.
        log.error("error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error(request, 500, "internal error (see the server log)")


def create_app(
    runtime: Runtime,
    *,
    token: str | None,
    public_read: bool = False,
    metrics: Metrics | None = None,
    tracing: Any = None,
    allowed_hosts: frozenset[str] | None = None,
) -> FastAPI:
    """The web app for `runtime`.

    Writes need `token` (sent as a bearer token); so do reads unless `public_read`. Without a
    token the app is read-only, which is only allowed with `public_read`. With
    `allowed_hosts`, a request whose `Host` is neither one of them nor an IP address is
    refused (400): `tenure serve` passes the names it serves (see `served_hosts`).
    """
    if not token and not public_read:
        raise WritesNeedToken(
            "TENURE_API_TOKEN is not set: set it to serve the API and dashboard (writes need "
            "it), or pass --public-read for a read-only server"
        )
    metrics = metrics or Metrics()
    instrument(runtime, metrics, tracing)
    metrics.watch_store(runtime.store)
    web = Web(runtime, Security(token, public_read=public_read), metrics, has_hitl(runtime))

    app = FastAPI(
        title="tenure",
        version=__version__,
        description="Durable LLM agent runs: inspect, operate and follow them.",
        openapi_url="/api/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    app.state.web = web
    if allowed_hosts is not None:
        app.add_middleware(HostCheck, allowed=allowed_hosts)
    app.add_middleware(SecurityHeaders)  # the outermost: a refused Host gets its headers too
    _handlers(app)
    app.include_router(_api.router)
    if web.hitl:
        app.include_router(_api.hitl_router)
    app.include_router(_pages.router)
    static = resources.files("tenure.web").joinpath("static")
    app.mount("/static", StaticFiles(directory=str(static)), name="static")

    @app.get("/metrics", include_in_schema=False)
    def prometheus(request: Request) -> Response:
        web_of(request).security.reader(request)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return HTMLResponse("", status_code=204)

    return app
