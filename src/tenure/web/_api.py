"""The JSON API under /api (its OpenAPI schema at /api/openapi.json)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from anyio import to_thread
from fastapi import APIRouter, Body, Depends, Path, Query, Request
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tenure import Delta, Event, RunRequest, RunStatus, TerminationReason
from tenure._errors import InvalidRequest
from tenure._follow import Follower
from tenure._policy import MAX_DELAY_SECONDS
from tenure._requests import PRIORITY_MAX, PRIORITY_MIN
from tenure.web import _views
from tenure.web._security import Caller
from tenure.web._state import MAX_BULK_REDRIVE, Web, audit, web_of

log = logging.getLogger("tenure.web")

RUN_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
RunId = Annotated[str, Path(pattern=RUN_ID_PATTERN, description="a run id")]
Reveal = Annotated[
    bool, Query(description="show prompts, answers, arguments and submitted values (token only)")
]
# Text that goes into a column as it is: no control characters.
NAME_PATTERN = r"^[^\x00-\x1f\x7f]{1,200}$"
SSE_POLL_SECONDS = 0.25
# While a model call's text streams, its deltas are looked for this often.
SSE_DELTA_POLL_SECONDS = 0.05
SSE_KEEPALIVE_SECONDS = 15.0
DEAD_LETTER = Literal["retries_exhausted", "not_retryable"]

# Declares the scheme in the OpenAPI schema; the check itself is Security's.
bearer_scheme = HTTPBearer(auto_error=False, description="TENURE_API_TOKEN")


def _check_text(value: Any, where: str = "body") -> None:
    """Every string must be storable as UTF-8 (no lone surrogates, no NUL)."""
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidRequest(f"{where}: a string contains a NUL character")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRequest(f"{where}: a string is not valid Unicode text") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_text(k, where)
            _check_text(v, where)
    elif isinstance(value, list):
        for v in value:
            _check_text(v, where)


Bearer = Annotated[Any, Depends(bearer_scheme)]


def reader(request: Request, _: Bearer) -> Caller:
    return web_of(request).security.reader(request)


def writer(request: Request, _: Bearer) -> Caller:
    return web_of(request).security.writer(request)


def revealing(request: Request, reveal: bool) -> bool:
    """`reveal=true` is for token holders only, even when anyone may read."""
    if reveal:
        web_of(request).security.revealer(request)
    return reveal


Reader = Annotated[Caller, Depends(reader)]
Writer = Annotated[Caller, Depends(writer)]


class Text(BaseModel):
    """Strings checked to be storable."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        _check_text(value)
        return value


class EnqueueBody(Text):
    prompt: str | None = Field(
        None, min_length=1, max_length=200_000, description="what the agent should do"
    )
    agent: str | None = Field(
        None,
        pattern=NAME_PATTERN,
        description="an agent function of the app (GET /api/agents), instead of the "
        "built-in loop; prompt is then optional",
    )
    input: dict[str, Any] | None = Field(
        None, description="the agent function's input, checked against its input schema"
    )
    model: str = Field("default", pattern=NAME_PATTERN)
    tools: list[Annotated[str, Field(pattern=NAME_PATTERN)]] = Field(default_factory=list)
    max_iterations: int = Field(10, ge=1, le=10_000)
    queue: str = Field("default", pattern=NAME_PATTERN)
    idempotency_key: str | None = Field(None, pattern=NAME_PATTERN)
    metadata: dict[str, Any] = Field(default_factory=dict)
    script: list[dict[str, Any]] | None = None
    system: str | None = Field(None, max_length=200_000)
    max_tokens: int | None = Field(None, ge=1, le=10**12)
    max_cost: float | None = Field(None, gt=0, le=10**9)
    priority: int = Field(
        0, ge=PRIORITY_MIN, le=PRIORITY_MAX, description="a higher one is claimed first"
    )
    concurrency_key: str | None = Field(
        None,
        pattern=NAME_PATTERN,
        description="runs of one key are held to its limit (PUT /api/concurrency/{key}) and "
        "take turns with other keys",
    )
    delay: float = Field(
        0.0, ge=0, le=MAX_DELAY_SECONDS, description="seconds before it may be claimed"
    )


class LimitBody(Text):
    limit: int | None = Field(
        ...,
        ge=0,
        le=2**31 - 1,
        description="at most this many runs of the key running at once; null: no limit",
    )


class ScheduleBody(Text):
    cron: str = Field(..., max_length=200, description="minute hour day month weekday")
    timezone: str = Field("UTC", max_length=200, description="an IANA time zone name")
    request: EnqueueBody = Field(..., description="the run each tick enqueues (no delay)")


class BulkBody(Text):
    """What every bulk action takes: the queue filter, a bound, and the confirmed count."""

    queue: str | None = Field(None, pattern=NAME_PATTERN)
    limit: int = Field(100, ge=1, le=MAX_BULK_REDRIVE)
    dry_run: bool = False
    expected: int | None = Field(
        None,
        ge=0,
        le=MAX_BULK_REDRIVE,
        description="the count of a dry run that was confirmed: 409 if it differs now",
    )


class BulkRedriveBody(BulkBody):
    reason: DEAD_LETTER | None = Field(None, description="only this dead-letter reason")


ACTIVE_STATUS = Literal["queued", "running", "waiting_for_approval", "waiting_for_input"]


class BulkCancelBody(BulkBody):
    status: ACTIVE_STATUS | None = Field(None, description="only runs in this status")


class ForkBody(Text):
    at: int = Field(
        ge=1,
        le=2**53,
        description="the first of the run's events not kept: the fork runs again from there",
    )
    model: str | None = Field(None, pattern=NAME_PATTERN, description="the fork's model")
    allow_repeat_writes: bool = Field(
        False, description="fork even if completed non-idempotent writes would run again"
    )


class DecisionBody(Text):
    approved: bool
    note: str | None = Field(None, max_length=10_000)


class InputBody(Text):
    values: dict[str, Any]


router = APIRouter(prefix="/api")


# -- reads -------------------------------------------------------------------------------------


@router.get("/health", summary="The server and its database")
def health(request: Request) -> dict[str, Any]:
    web = web_of(request)
    version = web.store.schema_version()
    return {
        "status": "ok",
        "schema_version": version,
        "writes_enabled": web.security.writes_enabled,
        "public_read": web.security.public_read,
        "human_in_the_loop": web.hitl,
    }


@router.get("/counts", summary="How many runs there are, by status and by reason")
def counts(request: Request, caller: Reader) -> dict[str, Any]:
    return web_of(request).counts().to_json()


@router.get("/runs", summary="Runs, newest first, a page at a time")
def list_runs(
    request: Request,
    caller: Reader,
    status: RunStatus | None = None,
    reason: TerminationReason | None = None,
    queue: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None, Query(pattern=RUN_ID_PATTERN, description="next_cursor of the page before")
    ] = None,
    parent: Annotated[
        str | None, Query(pattern=RUN_ID_PATTERN, description="only this run's child runs")
    ] = None,
    roots: Annotated[bool, Query(description="only runs without a parent run")] = False,
    reveal: Reveal = False,
) -> dict[str, Any]:
    reveal = revealing(request, reveal)
    web = web_of(request)
    runs, next_cursor = web.page(status, reason, queue, limit, cursor, parent, roots)
    calls = web.agent_calls(runs)
    return {
        "runs": [_views.run_json(r, reveal=reveal, call=calls[r.id]) for r in runs],
        "next_cursor": next_cursor,
    }


@router.get("/runs/search", summary="Runs by metadata and creation time, newest first")
def search_runs(
    request: Request,
    caller: Reader,
    meta: Annotated[
        list[str] | None,
        Query(
            max_length=400,
            description="KEY=VALUE: the run's metadata has KEY with this "
            "text value (repeatable; all must hold)",
        ),
    ] = None,
    since: Annotated[
        float | None, Query(ge=0, description="created at most this many seconds ago")
    ] = None,
    until: Annotated[
        float | None, Query(ge=0, description="created at least this many seconds ago")
    ] = None,
    status: RunStatus | None = None,
    reason: TerminationReason | None = None,
    queue: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    reveal: Reveal = False,
) -> dict[str, Any]:
    reveal = revealing(request, reveal)
    web = web_of(request)
    metadata: dict[str, str] = {}
    for pair in meta or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidRequest(f"meta must be KEY=VALUE, got {pair!r}")
        metadata[key] = value
    runs = web.runtime.runs(
        status, reason, queue, limit, metadata=metadata or None, since=since, until=until
    )
    calls = web.agent_calls(runs)
    return {"runs": [_views.run_json(r, reveal=reveal, call=calls[r.id]) for r in runs]}


@router.get("/runs/{run_id}", summary="One run")
def get_run(request: Request, run_id: RunId, caller: Reader, reveal: Reveal = False) -> Any:
    reveal = revealing(request, reveal)
    web = web_of(request)
    run = web.run(run_id)
    data = _views.run_json(run, reveal=reveal, call=web.agent_call(run_id))
    budget = web.runtime.budget(run_id)  # its tree's (SPEC §21)
    data["budget"] = None if budget is None else budget.to_json()
    # The tree the run is part of (SPEC §21), from its root: each run's id, parent, status.
    data["tree"] = _views.tree_json(web.tree(run))
    return data


@router.get(
    "/runs/{run_id}/steps",
    summary="An agent function's run: its steps by position (empty for a built-in run)",
)
def get_steps(
    request: Request, run_id: RunId, caller: Reader, reveal: Reveal = False
) -> list[dict[str, Any]]:
    reveal = revealing(request, reveal)
    web = web_of(request)
    web.run(run_id)
    return _views.steps_json(web.runtime.events(run_id), reveal=reveal)


@router.get("/agents", summary="The app's agent functions: name, description, input schema")
def agents(request: Request, caller: Reader) -> list[dict[str, Any]]:
    return web_of(request).runtime.agents()


@router.get("/runs/{run_id}/events", summary="A run's events after a sequence")
def get_events(
    request: Request,
    run_id: RunId,
    caller: Reader,
    after: Annotated[int, Query(ge=-1, le=2**62)] = -1,
    reveal: Reveal = False,
) -> list[dict[str, Any]]:
    reveal = revealing(request, reveal)
    web = web_of(request)
    web.run(run_id)
    return [_views.event_json(e, reveal=reveal) for e in web.runtime.events(run_id, after)]


@router.get(
    "/runs/{run_id}/events/stream",
    summary="Server-sent events: a run's events as they are written, until it ends",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
def stream_events(
    request: Request,
    run_id: RunId,
    caller: Reader,
    after: Annotated[int, Query(ge=-1, le=2**62)] = -1,
    reveal: Reveal = False,
) -> StreamingResponse:
    reveal = revealing(request, reveal)
    web = web_of(request)
    web.run(run_id)
    last_id = request.headers.get("last-event-id", "")
    if last_id.isdigit():
        after = max(after, int(last_id))
    return StreamingResponse(
        _follow(request, web, run_id, after, reveal),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _follow(
    request: Request, web: Web, run_id: str, after: int, reveal: bool
) -> AsyncIterator[str]:
    """Events as `event` messages (with their sequence as id, for a resume), the text of a
    streaming model call in flight as `delta` messages between them (SPEC §18), `end`."""
    # In a thread: on PostgreSQL, following opens a listening connection.
    follower = await to_thread.run_sync(Follower, web.runtime.store, run_id, after)
    try:
        quiet = 0.0
        while not await request.is_disconnected():
            # Never waits in the thread (a stream must not hold one of the few threads
            # while it idles): the waiting is the sleep below, shorter while text streams.
            items, status = await to_thread.run_sync(follower.poll, 0.0)
            for item in items:
                yield _message(item, run_id, reveal)
            if status is None or status.is_terminal:
                ended = str(status) if status else "purged"
                yield f"event: end\ndata: {json.dumps({'status': ended})}\n\n"
                return
            streaming = any(isinstance(item, Delta) for item in items)
            pause = SSE_DELTA_POLL_SECONDS if streaming else SSE_POLL_SECONDS
            await asyncio.sleep(pause)
            quiet = 0.0 if items else quiet + pause
            if quiet >= SSE_KEEPALIVE_SECONDS:
                quiet = 0.0
                yield ": keep-alive\n\n"
    finally:
        # Not awaited: the client may have left, and this generator is being cancelled.
        follower.close()


def _message(item: Event | Delta, run_id: str, reveal: bool) -> str:
    if isinstance(item, Delta):
        # Model text is content: hidden unless revealed, like the `llm` event's; its length
        # still shows that the call is making progress.
        data = item.to_json(run_id) | {"chars": len(item.text)}
        if not reveal:
            data["text"] = _views.HIDDEN
        return f"event: delta\ndata: {json.dumps(data)}\n\n"
    shown = json.dumps(_views.event_json(item, reveal=reveal), default=str)
    return f"id: {item.sequence}\nevent: event\ndata: {shown}\n\n"


@router.get(
    "/runs/{run_id}/redrive-plan",
    summary="Dry run of a redrive: the non-idempotent writes already done, what would run next",
)
def redrive_plan(
    request: Request, run_id: RunId, caller: Reader, reveal: Reveal = False
) -> dict[str, Any]:
    reveal = revealing(request, reveal)
    return web_of(request).plan(run_id, reveal=reveal).to_json()


@router.get(
    "/runs/{run_id}/fork-plan",
    summary="Dry run of a fork: the events kept, the steps run again, the writes that would repeat",
)
def fork_plan(
    request: Request,
    run_id: RunId,
    caller: Reader,
    at: Annotated[int, Query(ge=1, le=2**53, description="the first event not kept")],
) -> dict[str, Any]:
    return web_of(request).fork_plan(run_id, at).to_json()


@router.get("/leases", summary="Live leases, by the worker that holds them")
def leases(request: Request, caller: Reader) -> list[dict[str, Any]]:
    return [h.to_json() for h in web_of(request).leases()]


@router.get(
    "/queues",
    summary="Per queue: paused or not; runs queued (ready, backing off), running, waiting; "
    "the oldest ready wait",
)
def queues(request: Request, caller: Reader) -> list[dict[str, Any]]:
    web = web_of(request)
    return [q.to_json() for q in web.queues(web.store.now())]


@router.get(
    "/workers",
    summary="Workers: state (running, stopping, stopped, dead), host, pid, queues, slots, "
    "last seen (their own heartbeat); lease owners without a row, by their leases",
)
def workers(request: Request, caller: Reader) -> list[dict[str, Any]]:
    web = web_of(request)
    return [w.to_json() for w in web.workers(web.store.now())]


@router.get(
    "/concurrency",
    summary="Concurrency keys: limit, runs running and queued, runs waiting for the key",
)
def concurrency(request: Request, caller: Reader) -> list[dict[str, Any]]:
    return [k.to_json() for k in web_of(request).runtime.concurrency_keys()]


@router.get("/schedules", summary="Cron schedules: next and last fire, runs fired, paused")
def schedules(request: Request, caller: Reader) -> list[dict[str, Any]]:
    return [s.to_json() for s in web_of(request).runtime.schedules()]


# -- writes ------------------------------------------------------------------------------------


@router.post("/runs", status_code=201, summary="Enqueue a run")
def enqueue(request: Request, caller: Writer, body: EnqueueBody) -> dict[str, Any]:
    web = web_of(request)
    fields = body.model_dump(exclude={"delay"})
    fields["prompt"] = fields["prompt"] or ""
    run_id = web.runtime.enqueue(RunRequest(**fields), delay=body.delay)
    audit.info("enqueue %s by %s (%s)", run_id, caller.actor, caller.via)
    return {"id": run_id}


# A queue name may hold a slash: the path converter takes the whole rest of the path.
QueueName = Annotated[str, Path(pattern=NAME_PATTERN, description="a queue's name")]


@router.post(
    "/queues/{queue:path}/pause",
    summary="Pause a queue: workers claim none of its runs until it is resumed (runs already "
    "running go on); audited",
)
def pause_queue(request: Request, queue: QueueName, caller: Writer) -> dict[str, Any]:
    changed = web_of(request).pause_queue(queue, caller)
    return {"queue": queue, "paused": True, "changed": changed}


@router.post(
    "/queues/{queue:path}/resume",
    summary="Resume a paused queue: workers claim its runs again; audited",
)
def resume_queue(request: Request, queue: QueueName, caller: Writer) -> dict[str, Any]:
    changed = web_of(request).resume_queue(queue, caller)
    return {"queue": queue, "paused": False, "changed": changed}


Key = Annotated[str, Path(pattern=NAME_PATTERN, description="a concurrency key")]
ScheduleName = Annotated[str, Path(pattern=NAME_PATTERN, description="a schedule's name")]


@router.put(
    "/concurrency/{key:path}",
    summary="Set (or with null remove) a concurrency key's limit; audited",
)
def set_concurrency_limit(
    request: Request, key: Key, caller: Writer, body: LimitBody
) -> dict[str, Any]:
    changed = web_of(request).runtime.set_concurrency_limit(key, body.limit)
    audit.warning("concurrency limit %r = %s by %s (%s)", key, body.limit, caller.actor, caller.via)
    return {"key": key, "limit": body.limit, "changed": changed}


@router.put(
    "/schedules/{name:path}",
    summary="Store or change a cron schedule; audited",
)
def put_schedule(
    request: Request, name: ScheduleName, caller: Writer, body: ScheduleBody
) -> dict[str, Any]:
    fields = body.request.model_dump(exclude={"delay"})
    fields["prompt"] = fields["prompt"] or ""
    schedule = web_of(request).runtime.schedule(
        name, cron=body.cron, request=RunRequest(**fields), timezone=body.timezone
    )
    audit.warning("schedule %r %s by %s (%s)", name, body.cron, caller.actor, caller.via)
    return schedule.to_json()


@router.post("/schedules/{name:path}/pause", summary="Pause a schedule; audited")
def pause_schedule(request: Request, name: ScheduleName, caller: Writer) -> dict[str, Any]:
    changed = web_of(request).runtime.pause_schedule(name)
    audit.warning("pause schedule %r by %s (%s)", name, caller.actor, caller.via)
    return {"name": name, "paused": True, "changed": changed}


@router.post("/schedules/{name:path}/resume", summary="Resume a schedule; audited")
def resume_schedule(request: Request, name: ScheduleName, caller: Writer) -> dict[str, Any]:
    changed = web_of(request).runtime.resume_schedule(name)
    audit.warning("resume schedule %r by %s (%s)", name, caller.actor, caller.via)
    return {"name": name, "paused": False, "changed": changed}


@router.delete("/schedules/{name:path}", summary="Delete a schedule; audited")
def delete_schedule(request: Request, name: ScheduleName, caller: Writer) -> dict[str, Any]:
    changed = web_of(request).runtime.delete_schedule(name)
    audit.warning("delete schedule %r by %s (%s)", name, caller.actor, caller.via)
    return {"name": name, "deleted": changed}


@router.post("/runs/{run_id}/cancel", summary="Cancel a run that has not ended")
def cancel(request: Request, run_id: RunId, caller: Writer) -> dict[str, Any]:
    web_of(request).cancel(run_id, caller)
    return {"id": run_id, "cancelled": True}


@router.post("/runs/{run_id}/redrive", summary="Send a dead-lettered run back to the queue")
def redrive(
    request: Request,
    run_id: RunId,
    caller: Writer,
    force: Annotated[
        bool, Query(description="even though a non-idempotent write may have happened")
    ] = False,
) -> dict[str, Any]:
    plan = web_of(request).redrive(run_id, force, caller)
    return {"id": run_id, "redriven": True, "forced": plan.needs_force, "plan": plan.to_json()}


@router.post(
    "/runs/{run_id}/fork",
    status_code=201,
    summary="Rerun a run from a step: a new queued run with its events before `at`",
)
def fork(request: Request, run_id: RunId, caller: Writer, body: ForkBody) -> dict[str, Any]:
    fork_id, plan = web_of(request).fork(
        run_id, body.at, body.model, body.allow_repeat_writes, caller
    )
    return {
        "id": fork_id,
        "forked_from": {"run_id": run_id, "sequence": body.at},
        "plan": plan.to_json(),
    }


@router.post(
    "/redrive",
    summary="Redrive dead-letters in bulk (capped; fences without a probe are skipped; audited)",
)
def redrive_many(
    request: Request, caller: Writer, body: Annotated[BulkRedriveBody, Body()]
) -> dict[str, Any]:
    reason = TerminationReason(body.reason) if body.reason else None
    return web_of(request).redrive_many(
        reason, body.queue, body.limit, caller, dry_run=body.dry_run, expected=body.expected
    )


@router.post(
    "/cancel",
    summary="Cancel in bulk the runs not yet ended a filter matches (capped; each by its own "
    "guarded cancel; audited)",
)
def cancel_many(
    request: Request, caller: Writer, body: Annotated[BulkCancelBody, Body()]
) -> dict[str, Any]:
    status = RunStatus(body.status) if body.status else None
    return web_of(request).cancel_many(
        status, body.queue, body.limit, caller, dry_run=body.dry_run, expected=body.expected
    )


@router.post("/reap", summary="One reaper pass over runs whose lease expired")
def reap(
    request: Request, caller: Writer, limit: Annotated[int, Query(ge=1, le=1000)] = 50
) -> dict[str, int]:
    report = web_of(request).runtime.reap(limit)
    audit.info(
        "reap by %s: requeued %d, dead-lettered %d, skipped %d",
        caller.actor,
        report.requeued,
        report.dead_lettered,
        report.skipped,
    )
    return {
        "requeued": report.requeued,
        "dead_lettered": report.dead_lettered,
        "skipped": report.skipped,
    }


# -- human in the loop (registered only when the runtime has it) ---------------------------------

hitl_router = APIRouter(prefix="/api")


@hitl_router.get(
    "/pending",
    summary="Runs waiting for a person, with the calls they hold and why they were made",
)
def pending(
    request: Request,
    caller: Reader,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    reveal: Reveal = False,
) -> list[dict[str, Any]]:
    reveal = revealing(request, reveal)
    web = web_of(request)
    rt: Any = web.runtime
    out = []
    for run in rt.pending(limit=limit):
        data = _views.run_json(run, reveal=reveal, call=web.agent_call(run.id))
        data["pending_calls"] = [c.to_json() for c in web.held_calls(run.id, caller, reveal=reveal)]
        context = web.held_context(run.id, caller, reveal=reveal)
        data["context"] = context.to_json() if context is not None else None
        out.append(data)
    return out


@hitl_router.get("/runs/{run_id}/pending-calls", summary="The calls a waiting run holds")
def pending_calls(
    request: Request, run_id: RunId, caller: Reader, reveal: Reveal = False
) -> list[dict[str, Any]]:
    reveal = revealing(request, reveal)
    web = web_of(request)
    web.run(run_id)
    return [c.to_json() for c in web.held_calls(run_id, caller, reveal=reveal)]


@hitl_router.post("/runs/{run_id}/decision", summary="Approve or deny a run's held calls")
def decide(request: Request, run_id: RunId, caller: Writer, body: DecisionBody) -> dict[str, Any]:
    web = web_of(request)
    web.run(run_id)
    rt: Any = web.runtime
    rt.approve(run_id, body.approved, decided_by=caller.actor, note=body.note)
    audit.warning(
        "%s %s by %s (%s)",
        "approve" if body.approved else "deny",
        run_id,
        caller.actor,
        caller.via,
    )
    return {"id": run_id, "approved": body.approved, "decided_by": caller.actor}


@hitl_router.post("/runs/{run_id}/input", summary="Submit the values a waiting run asked for")
def submit_input(
    request: Request, run_id: RunId, caller: Writer, body: InputBody
) -> dict[str, Any]:
    web = web_of(request)
    web.run(run_id)
    rt: Any = web.runtime
    rt.submit_input(run_id, body.values, submitted_by=caller.actor)
    audit.warning("input for %s by %s (%s)", run_id, caller.actor, caller.via)
    return {"id": run_id, "submitted_by": caller.actor}
