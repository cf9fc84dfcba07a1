"""Turning database rows into Run and Event records; shared by every dialect."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from tenure import _json
from tenure._types import (
    Event,
    EventKind,
    FailureClass,
    Run,
    RunStatus,
    TerminationReason,
    ToolEffect,
)

Time = Callable[[Any], datetime | None]


def epoch_to_datetime(value: Any) -> datetime | None:
    if value is None:
        return None
    return datetime.fromtimestamp(float(value), tz=UTC)


def aware(value: Any) -> datetime | None:
    if value is None:
        return None
    assert isinstance(value, datetime)
    return value.astimezone(UTC)


def _required(time: Time, value: Any) -> datetime:
    converted = time(value)
    assert converted is not None
    return converted


def run_from_row(row: Sequence[Any], time: Time) -> Run:
    """A row of `{run_columns}, request` (request may be NULL)."""
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
        request,
    ) = row
    return Run(
        id=run_id,
        queue=queue,
        status=RunStatus(status),
        termination_reason=TerminationReason(reason) if reason else None,
        request=_decode_request(request),
        idempotency_key=idempotency_key,
        claimed_by=claimed_by,
        lease_expires=time(lease_expires),
        lease_token=int(lease_token),
        requeue_count=int(requeue_count),
        available_at=_required(time, available_at),
        pending_effect=ToolEffect(pending_effect) if pending_effect else None,
        attempt=int(attempt),
        error_class=FailureClass(error_class) if error_class else None,
        error=error,
        output=output,
        input_tokens=int(input_tokens),
        output_tokens=int(output_tokens),
        cost=float(cost),
        created_at=_required(time, created_at),
        started_at=time(started_at),
        finished_at=time(finished_at),
        updated_at=_required(time, updated_at),
        waiting=_waiting_view(waiting),
        wait_deadline=time(wait_deadline),
    )


def _waiting_view(raw: Any) -> dict[str, Any] | None:
    """What a waiting run waits for, with the arguments of sensitive calls hidden."""
    if raw is None:
        return None
    data = json.loads(raw) if isinstance(raw, str) else raw
    calls = [{**c, "args": "<hidden>"} if c.get("sensitive") else c for c in data.get("calls", [])]
    return {**data, "calls": calls}


def _decode_request(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    if isinstance(raw, dict):
        return raw
    try:
        decoded = json.loads(raw)
    except ValueError:
        return {"_corrupt": str(raw)[:200]}
    return decoded if isinstance(decoded, dict) else {"_corrupt": str(raw)[:200]}


def event_from_row(row: Sequence[Any], time: Time) -> Event:
    run_id, sequence, attempt, kind, payload, created_at, lease_token = row
    return Event(
        run_id=run_id,
        sequence=int(sequence),
        attempt=int(attempt),
        kind=EventKind(kind),
        payload=payload if isinstance(payload, dict) else _json.loads(payload),
        created_at=_required(time, created_at),
        lease_token=int(lease_token),
    )
