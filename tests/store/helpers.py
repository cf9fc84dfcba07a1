"""Small builders for the store conformance suite (no SQL: only the Store protocol)."""

from __future__ import annotations

import json
import time

from tenure._requests import new_run_id
from tenure._types import EventKind, TerminationReason, ToolEffect
from tenure.store import Claimed, Lease, NewEvent, NewRun, Settlement, Store
from tenure.store._base import StaleRun

REQUEST = json.dumps({"prompt": "hi", "script": [{"say": "ok"}]})
SHORT_LEASE = 0.2


def new_run(
    queue: str = "default",
    *,
    key: str | None = None,
    delay: float = 0.0,
    request: str | None = REQUEST,
) -> NewRun:
    return NewRun(
        run_id=new_run_id(),
        queue=queue,
        request=request,
        idempotency_key=key,
        delay=delay,
        events=(NewEvent(EventKind.REQUEST, {"prompt": "hi"}),),
    )


def as_enqueued(request: dict[str, object], key: str | None = None) -> NewRun:
    """A run shaped as `Runtime.enqueue` makes it: one `request` event whose payload is the
    stored request's own text (PostgreSQL then sends that text once)."""
    text = json.dumps(request, separators=(",", ":"))
    event = NewEvent(EventKind.REQUEST, request, text)
    return NewRun(new_run_id(), "default", text, key, events=(event,))


def enqueue(store: Store, **kwargs: object) -> str:
    run_id, created = store.enqueue(new_run(**kwargs))  # type: ignore[arg-type]
    assert created
    return run_id


def claim_one(store: Store, owner: str = "worker:a", lease: float = 30.0) -> Claimed:
    claimed = store.claim(owner, None, lease, 1)
    assert len(claimed) == 1, claimed
    return claimed[0]


def step(kind: EventKind = EventKind.LLM, **payload: object) -> NewEvent:
    return NewEvent(kind, dict(payload))


def expire(seconds: float = SHORT_LEASE) -> None:
    """Let a lease of `seconds` run out (the database clock moves; nothing is mocked)."""
    time.sleep(seconds + 0.15)


def stale_for(store: Store, run_id: str) -> StaleRun:
    found = [s for s in store.stale_runs(100) if s.run_id == run_id]
    assert found, f"{run_id} is not stale"
    return found[0]


def completed(output: str = "done") -> Settlement:
    from tenure._types import RunStatus

    return Settlement(
        RunStatus.COMPLETED,
        TerminationReason.COMPLETED,
        output=output,
        events=(NewEvent(EventKind.ASSEMBLED, {"output": output}),),
    )


def lease_of(claimed: Claimed) -> Lease:
    return claimed.lease


WRITE = ToolEffect.NON_IDEMPOTENT_WRITE
