"""Turning database rows into Run and Event records; shared by every dialect."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from tenure import _json
from tenure._types import (
    Event,
    EventKind,
    FailureClass,
    ForkedFrom,
    Run,
    RunStatus,
    TerminationReason,
    ToolEffect,
)

Time = Callable[[Any], datetime | None]


# What a damaged row shows for a timestamp that cannot be read: far outside every real one.
UNREADABLE_TIME = datetime(1, 1, 1, tzinfo=UTC)


def epoch_to_datetime(value: Any) -> datetime | None:
    if value is None:
        return None
    return datetime.fromtimestamp(float(value), tz=UTC)


def aware(value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValueError(f"not a timestamp Python can hold: {value!r}")
    return value.astimezone(UTC)


class _Reader:
    """Decodes one row field by field; a field that cannot be decoded gets a stand-in and
    a note, so that one damaged row never takes a listing, a page or the audit down."""

    def __init__(self, time: Time) -> None:
        self._time = time
        self.problems: list[str] = []

    def field(self, name: str, decode: Callable[[Any], Any], raw: Any, stand_in: Any) -> Any:
        try:
            return decode(raw)
        except Exception as exc:
            self.problems.append(f"{name}: {_short(exc)} ({str(raw)[:40]!r})")
            return stand_in

    def time(self, name: str, raw: Any) -> datetime | None:
        value: datetime | None = self.field(name, self._time, raw, None)
        return value

    def required_time(self, name: str, raw: Any) -> datetime:
        value: datetime | None = self.field(name, self._time, raw, UNREADABLE_TIME)
        return UNREADABLE_TIME if value is None else value

    @property
    def damaged(self) -> str | None:
        return "; ".join(self.problems) if self.problems else None


def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:120]}" if text else type(exc).__name__


def _optional(kind: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda raw: kind(raw) if raw else None


def run_from_row(row: Sequence[Any], time: Time) -> Run:
    """A row of `{run_columns}, request` (request may be NULL). A field that cannot be
    decoded is None (a required time: UNREADABLE_TIME) and named in `Run.damaged`."""
    (
        run_id,
        queue,
        status,
        reason,
        idempotency_key,
        claimed_by,
        lease_expires,
        lease_token,
        requeue_count,
        available_at,
        pending_effect,
        attempt,
        error_class,
        error,
        output,
        input_tokens,
        output_tokens,
        cost,
        created_at,
        started_at,
        finished_at,
        updated_at,
        waiting,
        wait_deadline,
        fence_probe,
        forked_from_id,
        forked_from_sequence,
        parent_id,
        root_id,
        priority,
        concurrency_key,
        request,
    ) = row
    r = _Reader(time)
    return Run(
        id=run_id,
        queue=queue,
        status=r.field("status", RunStatus, status, RunStatus.FAILED),
        termination_reason=r.field(
            "termination_reason", _optional(TerminationReason), reason, None
        ),
        request=_decode_request(request),
        idempotency_key=idempotency_key,
        claimed_by=claimed_by,
        lease_expires=r.time("lease_expires", lease_expires),
        lease_token=r.field("lease_token", int, lease_token, 0),
        requeue_count=r.field("requeue_count", int, requeue_count, 0),
        available_at=r.required_time("available_at", available_at),
        pending_effect=r.field("pending_effect", _optional(ToolEffect), pending_effect, None),
        attempt=r.field("attempt", int, attempt, 0),
        error_class=r.field("error_class", _optional(FailureClass), error_class, None),
        error=error,
        output=output,
        input_tokens=r.field("input_tokens", int, input_tokens, 0),
        output_tokens=r.field("output_tokens", int, output_tokens, 0),
        cost=r.field("cost", float, cost, 0.0),
        created_at=r.required_time("created_at", created_at),
        started_at=r.time("started_at", started_at),
        finished_at=r.time("finished_at", finished_at),
        updated_at=r.required_time("updated_at", updated_at),
        waiting=r.field("waiting", _waiting_view, waiting, None),
        wait_deadline=r.time("wait_deadline", wait_deadline),
        fence_probe=bool(fence_probe),
        forked_from=r.field(
            "forked_from", _forked_from, (forked_from_id, forked_from_sequence), None
        ),
        parent_id=parent_id,
        root_id=root_id,
        priority=r.field("priority", int, priority, 0),
        concurrency_key=concurrency_key,
        damaged=r.damaged,
    )


def _forked_from(raw: tuple[Any, Any]) -> ForkedFrom | None:
    run_id, sequence = raw
    return None if run_id is None else ForkedFrom(str(run_id), int(sequence))


def _waiting_view(raw: Any) -> dict[str, Any] | None:
    """What a waiting run waits for, with the arguments of sensitive calls hidden."""
    if raw is None:
        return None
    data = _json.loads(raw) if isinstance(raw, str) else raw
    calls = [{**c, "args": "<hidden>"} if c.get("sensitive") else c for c in data.get("calls", [])]
    return {**data, "calls": calls}


def _decode_request(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    if isinstance(raw, dict):
        return raw
    try:
        decoded = _json.loads(raw)
    except (ValueError, RecursionError):
        return {"_corrupt": str(raw)[:200]}
    return decoded if isinstance(decoded, dict) else {"_corrupt": str(raw)[:200]}


def _payload(raw: Any) -> dict[str, Any]:
    value = raw if isinstance(raw, dict) else _json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError(f"a JSON {type(value).__name__}, not an object")
    return value


def event_from_row(row: Sequence[Any], time: Time) -> Event:
    """An event row. A payload that cannot be decoded becomes `{"damaged": why}` and, like
    any other field that cannot be decoded, is named in `Event.damaged`."""
    run_id, sequence, attempt, kind, payload, created_at, lease_token = row
    r = _Reader(time)
    decoded: dict[str, Any] = r.field("payload", _payload, payload, {})
    created = r.required_time("created_at", created_at)
    event_kind = r.field("kind", EventKind, kind, EventKind.REQUEST)
    damaged = r.damaged
    return Event(
        run_id=run_id,
        sequence=int(sequence),
        attempt=r.field("attempt", int, attempt, 0),
        kind=event_kind,
        payload={"damaged": damaged} if damaged else decoded,
        created_at=created,
        lease_token=r.field("lease_token", int, lease_token, 0),
        damaged=damaged,
    )
