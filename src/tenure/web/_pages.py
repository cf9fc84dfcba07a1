"""The dashboard: server-rendered pages over the same state as the API.

Pages read with the browser's session (or anonymously with --public-read). Every form posts
back here with its CSRF token; a form never goes through the API, whose writes take a bearer
token only.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from tenure import RunStatus, TerminationReason, __version__
from tenure._errors import InvalidRequest
from tenure._fork import FORKABLE
from tenure._text import span
from tenure.agent._runviews import agent_call, parameters
from tenure.web import _overview, _views
from tenure.web._security import (
    CSRF_FIELD,
    MAX_ACTOR,
    NONCE_COOKIE,
    SESSION_COOKIE,
    Caller,
    Forbidden,
    Security,
)
from tenure.web._state import MAX_BULK_REDRIVE, Conflict, Web, audit, web_of

RUN_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
RunId = Annotated[str, Path(pattern=RUN_ID_PATTERN)]
PAGE_SIZE = 50
SESSION_MAX_AGE = 12 * 3600
# What a finished action says on the page it leads to; only these texts are ever shown.
DONE = {
    "redriven": "Redriven: the run is back in the queue.",
    "forced": "Redriven past a standing fence: the interrupted write may run again.",
    "cancelled": "Cancelled.",
    "forked": "Forked: this run is queued and runs again from the step it was forked at.",
    "approved": "Approved: the run goes on.",
    "denied": "Denied: the run ends approval_denied.",
    "submitted": "Submitted: the run goes on with your values.",
    "reaped": "Reaper pass done.",
    "paused": "Queue paused: workers claim none of its runs until it is resumed.",
    "resumed": "Queue resumed: workers claim its runs again.",
    "login": "Logged in.",
}


def _time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


def _ms(value: float | None) -> str:
    if value is None:
        return ""
    if value < 1:  # a fast local call: "0 ms" would read as not measured
        return f"{value:.2f} ms"
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s"


_env = Environment(
    loader=PackageLoader("tenure.web", "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["time"] = _time
_env.filters["short_id"] = _overview.short_id
_env.filters["span"] = span
_env.globals["relative"] = _overview.relative
_env.globals["scheduled"] = _overview.is_scheduled
_env.globals["duration"] = _overview.duration
_env.filters["ms"] = _ms
_env.filters["pretty"] = lambda v: json.dumps(v, indent=1, default=str, ensure_ascii=False)

router = APIRouter(include_in_schema=False)


def _nonce(request: Request) -> tuple[str, bool]:
    existing = Security.nonce_of(request)
    return (existing, False) if existing else (Security.new_nonce(), True)


def render(
    request: Request,
    template: str,
    status_code: int = 200,
    headers: Any = None,
    **context: Any,
) -> HTMLResponse:
    web: Web = web_of(request)
    nonce, fresh = _nonce(request)
    caller = web.security.caller(request)
    done = request.query_params.get("done", "")
    html = _env.get_template(template).render(
        request=request,
        caller=caller,
        web=web,
        csrf=web.security.csrf_token(nonce),
        csrf_field=CSRF_FIELD,
        done=DONE.get(done, ""),
        version=__version__,
        path=request.url.path,
        **context,
    )
    response = HTMLResponse(html, status_code=status_code, headers=headers)
    response.headers["Cache-Control"] = "no-store"
    if fresh:
        _cookie(request, response, NONCE_COOKIE, nonce, max_age=None)
    return response


def _cookie(
    request: Request, response: Response, name: str, value: str, max_age: int | None
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


def error_page(request: Request, status: int, message: str, headers: Any = None) -> Response:
    try:
        return render(request, "error.html", status, headers, status=status, message=message)
    except Exception:  # the error page itself must not fail with a trace
        return HTMLResponse("<!doctype html><title>error</title>error", status_code=status)


def _reader(request: Request) -> Caller | RedirectResponse:
    web = web_of(request)
    caller = web.security.caller(request)
    if caller.authenticated or web.security.public_read:
        return caller
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse("/login?" + urlencode({"next": target}), status_code=303)


def _operator(request: Request, csrf: str | None) -> Caller:
    """A dashboard write: a logged-in browser, same-origin, with this page's CSRF token."""
    web = web_of(request)
    web.security.check_csrf(request, csrf)
    if not web.security.writes_enabled:
        raise Forbidden("writes are disabled: the server was started without TENURE_API_TOKEN")
    caller = web.security.caller(request)
    if caller.via != "session":
        raise Forbidden("log in to act on runs")
    return caller


def _reveal(request: Request, caller: Caller, reveal: bool) -> bool:
    if reveal:
        web_of(request).security.revealer(request)
    return reveal


# -- login -------------------------------------------------------------------------------------


def _safe_next(target: str | None) -> str:
    # Only a path of this site: never `//elsewhere` or a scheme.
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


@router.get("/login")
def login_page(request: Request, next: str | None = None) -> Response:
    return render(request, "login.html", next=_safe_next(next))


@router.post("/login")
def login(
    request: Request,
    token: Annotated[str, Form(max_length=4096)] = "",
    name: Annotated[str, Form(max_length=MAX_ACTOR)] = "",
    csrf: Annotated[str | None, Form()] = None,
    next: Annotated[str | None, Form()] = None,
) -> Response:
    security = web_of(request).security
    security.check_csrf(request, csrf)
    nonce = Security.nonce_of(request)
    if nonce is None or not security.token_ok(token):
        return render(
            request, "login.html", 401, error="That is not the API token.", next=_safe_next(next)
        )
    actor = "".join(ch for ch in name.strip() if ch.isprintable())[:MAX_ACTOR] or "operator"
    target = _safe_next(next)
    response = RedirectResponse(target, status_code=303)
    _cookie(
        request, response, SESSION_COOKIE, security.session_value(nonce, actor), SESSION_MAX_AGE
    )
    audit.info("dashboard login by %s", actor)
    return response


@router.post("/logout")
def logout(request: Request, csrf: Annotated[str | None, Form()] = None) -> Response:
    web_of(request).security.check_csrf(request, csrf)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


# -- runs --------------------------------------------------------------------------------------


def _filter(value: str | None, kind: type[RunStatus] | type[TerminationReason]) -> Any:
    if not value:
        return None
    try:
        return kind(value)
    except ValueError:
        raise InvalidRequest(f"unknown {kind.__name__} {value!r}") from None


# The runs list's "created within" choices: label, seconds.
SINCE_CHOICES = [("15 minutes", 900), ("an hour", 3600), ("a day", 86400), ("a week", 604800)]


def _metadata_filter(text: str | None) -> dict[str, str]:
    """`key=value` pairs, separated by commas: what a run's metadata must hold (text values).
    A pair without `=` is ignored, as an unknown filter is."""
    pairs = [part.partition("=") for part in (text or "").split(",")]
    return {k.strip(): v.strip() for k, sep, v in pairs if sep and k.strip()}


def _since_filter(text: str | None) -> float | None:
    allowed = {str(seconds): float(seconds) for _, seconds in SINCE_CHOICES}
    return allowed.get((text or "").strip())


@router.get("/")
def runs_page(
    request: Request,
    status: str | None = None,
    reason: str | None = None,
    queue: Annotated[str | None, Query(max_length=200)] = None,
    cursor: Annotated[str | None, Query(pattern=RUN_ID_PATTERN)] = None,
    q: Annotated[str | None, Query(max_length=128)] = None,
    meta: Annotated[str | None, Query(max_length=400)] = None,
    since: Annotated[str | None, Query(max_length=12)] = None,
    reveal: bool = False,
) -> Response:
    caller = _reader(request)
    if isinstance(caller, Response):
        return caller
    web = web_of(request)
    reveal = _reveal(request, caller, reveal)
    s, r = _filter(status, RunStatus), _filter(reason, TerminationReason)
    query = {k: v for k, v in {"status": status, "reason": reason, "queue": queue}.items() if v}
    search = (q or "").strip()
    metadata, within = _metadata_filter(meta), _since_filter(since)
    if search:
        runs, next_url = web.search(search, PAGE_SIZE), None
    elif metadata or within:
        # A search by metadata or time: the newest matches, no further pages.
        runs, next_url = (
            web.runtime.runs(
                s, r, queue or None, PAGE_SIZE, metadata=metadata or None, since=within
            ),
            None,
        )
    else:
        runs, next_cursor = web.page(s, r, queue or None, PAGE_SIZE, cursor)
        next_url = "/?" + urlencode({**query, "cursor": next_cursor}) if next_cursor else None
    now = web.store.now()
    counts = web.counts()
    concurrency = web.runtime.concurrency_keys()
    return render(
        request,
        "runs.html",
        runs=runs,
        counts=counts,
        statuses=[str(x) for x in RunStatus],
        reasons=[str(x) for x in TerminationReason],
        status=status or "",
        reason=reason or "",
        queue=queue or "",
        q=search,
        meta=meta or "",
        since=since or "",
        since_choices=SINCE_CHOICES,
        next_url=next_url,
        first_page=cursor is None,
        now=now,
        reveal=reveal,
        prompts=web.prompts(runs) if reveal else {},
        agents=web.agent_calls(runs),
        in_flight=web.in_flight(runs),
        reveal_url="/?" + urlencode({**query, "q": search, "reveal": "true"}),
        bulk=bulk_actions(s, r, queue or None) if not search else [],
        bulk_query=urlencode(query),
        queues=web.queues(now),
        concurrency=concurrency,
        full_keys={k.key for k in concurrency if k.full},
        schedules=web.runtime.schedules(),
        finished_chart=_overview.svg_bars(
            web.finished(now), title="runs finished per minute, by outcome"
        ),
        depth_chart=_overview.svg_line(list(web.depth_history), title="runs queued over time"),
    )


@router.get("/runs/{run_id}")
def run_page(request: Request, run_id: RunId, reveal: bool = False) -> Response:
    caller = _reader(request)
    if isinstance(caller, Response):
        return caller
    web = web_of(request)
    reveal = _reveal(request, caller, reveal)
    run = web.run(run_id)
    events = web.runtime.events(run_id)
    now = web.store.now()
    backoff_until = run.available_at if run.status is RunStatus.QUEUED else None
    if backoff_until is not None and backoff_until <= now:
        backoff_until = None
    # Enqueued with a delay: scheduled, not backing off after a failure.
    scheduled_for = backoff_until if _overview.is_scheduled(run, now) else None
    if scheduled_for is not None:
        backoff_until = None
    calls: list[_views.HeldCall] = []
    context = None
    if web.hitl and run.status in (RunStatus.WAITING_FOR_APPROVAL, RunStatus.WAITING_FOR_INPUT):
        calls = web.held_calls(run_id, caller, reveal=reveal)
        context = web.held_context(run_id, caller, reveal=reveal)
    call = agent_call(events[0]) if events else None
    tree = web.tree(run)
    return render(
        request,
        "run.html",
        run=run,
        call=call,
        tree=_views.tree_rows(tree) if len(tree) > 1 else [],
        data=_views.run_json(run, reveal=reveal, call=call),
        budget=web.runtime.budget(run_id),
        agent_steps=_views.step_rows(events, reveal=reveal) if call is not None else [],
        steps=_views.timeline(events, reveal=reveal),
        last_sequence=events[-1].sequence if events else -1,
        in_flight=events[-1] if events and run.status is RunStatus.RUNNING else None,
        now=now,
        backoff_until=backoff_until,
        scheduled_for=scheduled_for,
        reveal=reveal,
        calls=calls,
        context=context,
        fields=_fields,
        forkable=run.status in FORKABLE,
    )


@router.post("/runs/{run_id}/cancel")
def cancel_form(
    request: Request, run_id: RunId, csrf: Annotated[str | None, Form()] = None
) -> Response:
    caller = _operator(request, csrf)
    web_of(request).cancel(run_id, caller)
    return RedirectResponse(f"/runs/{quote(run_id)}?done=cancelled", status_code=303)


# -- bulk cancel and redrive of the runs a filter matches -----------------------------------


def bulk_actions(
    status: RunStatus | None, reason: TerminationReason | None, queue: str | None
) -> list[str]:
    """The bulk actions the runs list offers for its filters: cancel when it lists runs that
    may not have ended (and something narrows it), redrive when it lists dead letters."""
    actions = []
    if reason is None and (status is None or not status.is_terminal) and (status or queue):
        actions.append("cancel")
    failed = status is RunStatus.FAILED or (status is None and reason is not None)
    if failed and (reason is None or reason.is_dead_letter):
        actions.append("redrive")
    return actions


def _bulk_plan(
    web: Web,
    caller: Caller,
    action: str,
    status: RunStatus | None,
    reason: TerminationReason | None,
    queue: str | None,
) -> dict[str, Any]:
    """What a bulk action would do now: a dry run."""
    if action not in bulk_actions(status, reason, queue):
        raise InvalidRequest(f"no bulk {action or 'action'} for this filter")
    if action == "cancel":
        plan = web.cancel_many(status, queue, MAX_BULK_REDRIVE, caller, dry_run=True)
        return {"ids": plan["would_cancel"], "skipped": [], "more": plan["more"]}
    plan = web.redrive_many(reason, queue, MAX_BULK_REDRIVE, caller, dry_run=True)
    return {"ids": plan["would_redrive"], "skipped": plan["skipped_fenced"], "more": plan["more"]}


def _bulk_confirm(
    request: Request,
    caller: Caller,
    action: str,
    status: str,
    reason: str,
    queue: str,
    notice: str = "",
    status_code: int = 200,
) -> Response:
    web = web_of(request)
    s, r = _filter(status, RunStatus), _filter(reason, TerminationReason)
    plan = _bulk_plan(web, caller, action, s, r, queue or None)
    return render(
        request,
        "bulk_confirm.html",
        status_code,
        action=action,
        plan=plan,
        status=status,
        reason=reason,
        queue=queue,
        notice=notice,
        max_bulk=MAX_BULK_REDRIVE,
        back="/?"
        + urlencode(
            {k: v for k, v in (("status", status), ("reason", reason), ("queue", queue)) if v}
        ),
    )


@router.get("/bulk")
def bulk_confirm_page(
    request: Request,
    action: Annotated[str, Query(max_length=20)] = "",
    status: Annotated[str, Query(max_length=40)] = "",
    reason: Annotated[str, Query(max_length=40)] = "",
    queue: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    caller = _reader(request)
    if isinstance(caller, Response):
        return caller
    return _bulk_confirm(request, caller, action, status, reason, queue)


@router.post("/bulk")
def bulk_form(
    request: Request,
    csrf: Annotated[str | None, Form()] = None,
    action: Annotated[str, Form(max_length=20)] = "",
    status: Annotated[str, Form(max_length=40)] = "",
    reason: Annotated[str, Form(max_length=40)] = "",
    queue: Annotated[str, Form(max_length=200)] = "",
    expected: Annotated[int, Form(ge=0, le=MAX_BULK_REDRIVE)] = 0,
) -> Response:
    caller = _operator(request, csrf)
    web = web_of(request)
    s, r = _filter(status, RunStatus), _filter(reason, TerminationReason)
    if action not in bulk_actions(s, r, queue or None):
        raise InvalidRequest(f"no bulk {action or 'action'} for this filter")
    try:
        if action == "cancel":
            result = web.cancel_many(s, queue or None, MAX_BULK_REDRIVE, caller, expected=expected)
            done, changed = result["cancelled"], result["changed"]
            skipped: list[str] = []
        else:
            result = web.redrive_many(r, queue or None, MAX_BULK_REDRIVE, caller, expected=expected)
            done, changed = result["redriven"], result["refused"]
            skipped = result["skipped_fenced"]
    except Conflict as exc:
        # The runs that match moved since they were counted: count again, confirm again.
        return _bulk_confirm(
            request, caller, action, status, reason, queue, notice=str(exc.detail), status_code=409
        )
    return render(
        request,
        "bulk_done.html",
        action=action,
        acted=done,
        changed=changed,
        skipped=skipped,
        more=result["more"],
        back="/?"
        + urlencode(
            {k: v for k, v in (("status", status), ("reason", reason), ("queue", queue)) if v}
        ),
    )


# -- queues ------------------------------------------------------------------------------------


def _queue_form(request: Request, csrf: str | None, queue: str, pause: bool) -> Response:
    caller = _operator(request, csrf)
    web = web_of(request)
    if pause:
        web.pause_queue(queue, caller)
    else:
        web.resume_queue(queue, caller)
    return RedirectResponse(f"/?done={'paused' if pause else 'resumed'}", status_code=303)


@router.post("/queues/pause")
def pause_queue_form(
    request: Request,
    csrf: Annotated[str | None, Form()] = None,
    queue: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    return _queue_form(request, csrf, queue, pause=True)


@router.post("/queues/resume")
def resume_queue_form(
    request: Request,
    csrf: Annotated[str | None, Form()] = None,
    queue: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    return _queue_form(request, csrf, queue, pause=False)


# -- agent functions ---------------------------------------------------------------------------


@router.get("/agents")
def agents_page(request: Request) -> Response:
    caller = _reader(request)
    if isinstance(caller, Response):
        return caller
    agents = [
        {**a, "parameters": parameters(a["input_schema"])} for a in web_of(request).runtime.agents()
    ]
    return render(request, "agents.html", agents=agents)


# -- dead letters and redrive ------------------------------------------------------------------


@router.get("/dead-letters")
def dead_letters_page(
    request: Request,
    reason: str | None = None,
    queue: Annotated[str | None, Query(max_length=200)] = None,
    cursor: Annotated[str | None, Query(pattern=RUN_ID_PATTERN)] = None,
) -> Response:
    caller = _reader(request)
    if isinstance(caller, Response):
        return caller
    web = web_of(request)
    r = _filter(reason, TerminationReason)
    if r is not None and not r.is_dead_letter:
        raise InvalidRequest(f"{r} is not a dead-letter reason")
    # Failed runs, newest first, of which the dead letters are shown (a run that failed
    # max_iterations or budget_exhausted is no dead letter); the cursor pages the failed runs.
    page, next_cursor = web.page(RunStatus.FAILED, r, queue or None, PAGE_SIZE, cursor)
    runs = [run for run in page if run.is_dead_letter]
    query = {k: v for k, v in {"reason": reason, "queue": queue}.items() if v}
    next_url = (
        "/dead-letters?" + urlencode({**query, "cursor": next_cursor}) if next_cursor else None
    )
    return render(
        request,
        "dead_letters.html",
        runs=runs,
        now=web.store.now(),
        counts=web.counts(),
        reason=reason or "",
        queue=queue or "",
        next_url=next_url,
        max_bulk=MAX_BULK_REDRIVE,
    )


@router.get("/runs/{run_id}/redrive")
def redrive_page(request: Request, run_id: RunId, reveal: bool = False) -> Response:
    caller = _reader(request)
    if isinstance(caller, Response):
        return caller
    reveal = _reveal(request, caller, reveal)
    web = web_of(request)
    return render(
        request,
        "redrive.html",
        run=web.run(run_id),
        plan=web.plan(run_id, reveal=reveal),
        reveal=reveal,
    )


@router.post("/runs/{run_id}/redrive")
def redrive_form(
    request: Request,
    run_id: RunId,
    csrf: Annotated[str | None, Form()] = None,
    force: Annotated[bool, Form()] = False,
) -> Response:
    caller = _operator(request, csrf)
    plan = web_of(request).redrive(run_id, force, caller)
    done = "forced" if plan.needs_force else "redriven"
    return RedirectResponse(f"/runs/{quote(run_id)}?done={done}", status_code=303)


@router.get("/runs/{run_id}/fork")
def fork_page(request: Request, run_id: RunId, at: Annotated[int, Query(ge=1)]) -> Response:
    """What forking the run at `at` would do, shown before an operator confirms it."""
    caller = _reader(request)
    if isinstance(caller, Response):
        return caller
    web = web_of(request)
    return render(
        request,
        "fork.html",
        run=web.run(run_id),
        plan=web.fork_plan(run_id, at),
    )


@router.post("/runs/{run_id}/fork")
def fork_form(
    request: Request,
    run_id: RunId,
    at: Annotated[int, Form(ge=1)],
    csrf: Annotated[str | None, Form()] = None,
    allow_repeat_writes: Annotated[bool, Form()] = False,
) -> Response:
    caller = _operator(request, csrf)
    fork_id, _ = web_of(request).fork(run_id, at, None, allow_repeat_writes, caller)
    return RedirectResponse(f"/runs/{quote(fork_id)}?done=forked", status_code=303)


@router.post("/dead-letters/redrive")
def bulk_redrive_form(
    request: Request,
    csrf: Annotated[str | None, Form()] = None,
    reason: Annotated[str, Form()] = "",
    queue: Annotated[str, Form(max_length=200)] = "",
    limit: Annotated[int, Form(ge=1, le=MAX_BULK_REDRIVE)] = 100,
    dry_run: Annotated[bool, Form()] = False,
) -> Response:
    caller = _operator(request, csrf)
    r = _filter(reason, TerminationReason)
    if r is not None and not r.is_dead_letter:
        raise InvalidRequest(f"{r} is not a dead-letter reason")
    result = web_of(request).redrive_many(r, queue or None, limit, caller, dry_run=dry_run)
    return render(request, "bulk_result.html", result=result, reason=reason, queue=queue)


# -- maintenance and leases --------------------------------------------------------------------


@router.get("/workers")
@router.get("/leases")
def leases_page(request: Request) -> Response:
    caller = _reader(request)
    if isinstance(caller, Response):
        return caller
    web = web_of(request)
    now = web.store.now()
    return render(
        request,
        "leases.html",
        holders=web.leases(),
        workers=web.workers(now),
        models=web.runtime.models(),
        now=now,
    )


@router.post("/reap")
def reap_form(request: Request, csrf: Annotated[str | None, Form()] = None) -> Response:
    caller = _operator(request, csrf)
    report = web_of(request).runtime.reap()
    audit.info(
        "reap by %s (%s): requeued %d, dead-lettered %d, skipped %d",
        caller.actor,
        caller.via,
        report.requeued,
        report.dead_lettered,
        report.skipped,
    )
    return render(request, "reaped.html", report=report)


# -- human in the loop -------------------------------------------------------------------------


def _fits(kind: str, enum: Any, value: Any) -> bool:
    """Whether the model's proposed value can start a field of this kind."""
    if value is None:
        return False
    if isinstance(enum, list):
        return value in enum
    if kind in ("integer", "number"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    return kind == "json" or isinstance(value, str)


def _fields(schema: Any, proposed: Any = None) -> list[dict[str, Any]]:
    """Form fields for the properties of an input's JSON schema, each with the value the
    model proposed for it when that value fits the field."""
    if not isinstance(schema, dict):
        return []
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    proposed = proposed if isinstance(proposed, dict) else {}
    fields = []
    for name, spec in props.items():
        spec = spec if isinstance(spec, dict) else {}
        kind = spec.get("type", "string")
        kind = kind if kind in ("string", "integer", "number", "boolean") else "json"
        value = proposed.get(name)
        fields.append(
            {
                "name": str(name),
                "type": kind,
                "enum": spec.get("enum"),
                "required": name in required,
                "description": spec.get("description", ""),
                "proposed": value if _fits(kind, spec.get("enum"), value) else None,
            }
        )
    return fields


def _parse_values(schema: Any, form: dict[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for field in _fields(schema):
        name, kind = field["name"], field["type"]
        raw = form.get(f"value.{name}")
        if kind == "boolean":
            values[name] = raw is not None
            continue
        if raw is None or (raw == "" and not field["required"]):
            continue
        try:
            if kind == "integer":
                values[name] = int(raw)
            elif kind == "number":
                values[name] = float(raw)
            elif kind == "json":
                values[name] = json.loads(raw)
            else:
                values[name] = raw
        except ValueError:
            raise InvalidRequest(f"{name}: expected {kind}, got {raw!r}") from None
    return values


@router.get("/pending")
def pending_page(request: Request, reveal: bool = False) -> Response:
    caller = _reader(request)
    if isinstance(caller, Response):
        return caller
    web = web_of(request)
    if not web.hitl:
        raise InvalidRequest("this runtime has no human-in-the-loop support")
    reveal = _reveal(request, caller, reveal)
    rt: Any = web.runtime
    items = [
        (
            run,
            web.held_calls(run.id, caller, reveal=reveal),
            web.held_context(run.id, caller, reveal=reveal),
        )
        for run in rt.pending(limit=100)
    ]
    hidden = any(
        any(call.hidden for call in calls) or (context is not None and context.hidden)
        for _, calls, context in items
    )
    return render(
        request, "pending.html", items=items, reveal=reveal, hidden=hidden, fields=_fields
    )


@router.post("/runs/{run_id}/decision")
def decision_form(
    request: Request,
    run_id: RunId,
    csrf: Annotated[str | None, Form()] = None,
    decision: Annotated[str, Form()] = "",
    note: Annotated[str, Form(max_length=10_000)] = "",
) -> Response:
    caller = _operator(request, csrf)
    web = web_of(request)
    if not web.hitl or decision not in ("approve", "deny"):
        raise InvalidRequest("decide with approve or deny")
    web.run(run_id)
    rt: Any = web.runtime
    approved = decision == "approve"
    rt.approve(run_id, approved, decided_by=caller.actor, note=note or None)
    audit.warning("%s %s by %s (%s)", decision, run_id, caller.actor, caller.via)
    done = "approved" if approved else "denied"
    return RedirectResponse(f"/runs/{quote(run_id)}?done={done}", status_code=303)


@router.post("/runs/{run_id}/input")
async def input_form(request: Request, run_id: RunId) -> Response:
    # The field names come from the tool's schema, so the form is read whole here; the
    # database work then runs on a worker thread like every other route's.
    form = await request.form()
    values_form = {k: v for k, v in form.items() if isinstance(v, str)}
    return await run_in_threadpool(_submit_input, request, run_id, values_form)


def _submit_input(request: Request, run_id: str, values_form: dict[str, str]) -> Response:
    caller = _operator(request, values_form.get(CSRF_FIELD))
    web = web_of(request)
    if not web.hitl:
        raise InvalidRequest("this runtime has no human-in-the-loop support")
    web.run(run_id)
    rt: Any = web.runtime
    calls = [c for c in rt.pending_calls(run_id) if c.get("kind") == "input"]
    schema = calls[0].get("input_schema") if calls else None
    values = _parse_values(schema, values_form)
    rt.submit_input(run_id, values, submitted_by=caller.actor)
    audit.warning("input for %s by %s (%s)", run_id, caller.actor, caller.via)
    return RedirectResponse(f"/runs/{quote(run_id)}?done=submitted", status_code=303)
