"""RunRequest validation and its stored JSON form."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import Any

from tenure import _json
from tenure._errors import InvalidRequest, UnknownModel
from tenure._policy import MAX_ITERATIONS_CEILING
from tenure._types import RunRequest
from tenure.providers.scripted import parse_script

_FIELDS = {f.name for f in dataclasses.fields(RunRequest)}


def validate(
    request: Any,
    check_tools: Callable[[tuple[str, ...]], None],
    has_model: Callable[[str], bool],
) -> RunRequest:
    """The request, checked; a bad one raises InvalidRequest (a ValueError) naming the field."""
    if not isinstance(request, RunRequest):
        raise InvalidRequest(f"expected a RunRequest, got {type(request).__name__}")
    _check_shape(request)
    check_tools(tuple(request.tools))
    if not has_model(request.model):
        raise UnknownModel(request.model)
    if request.script is not None:
        parse_script(request.script)
    return request


def _check_shape(r: RunRequest, *, stored: bool = False) -> None:
    """Names and limits; metadata a dict, and JSON-serialisable unless it came from JSON
    (`stored`), which it then is by construction."""
    _check_names(r)
    _check_limits(r)
    _check_metadata(r, serialise=not stored)


def _check_names(r: RunRequest) -> None:
    if not isinstance(r.prompt, str) or not r.prompt.strip():
        raise InvalidRequest("prompt must be a non-empty string")
    if not isinstance(r.model, str) or not r.model:
        raise InvalidRequest("model must be a non-empty string")
    if not all(isinstance(t, str) and t for t in r.tools):
        raise InvalidRequest("tools must be a list of tool names")
    if len(set(r.tools)) != len(r.tools):
        raise InvalidRequest("tools lists a tool twice")
    if not isinstance(r.queue, str) or not r.queue or len(r.queue) > 200:
        raise InvalidRequest("queue must be a non-empty string of at most 200 characters")
    if r.idempotency_key is not None and (
        not isinstance(r.idempotency_key, str) or not r.idempotency_key
    ):
        raise InvalidRequest("idempotency_key must be a non-empty string or None")
    if r.system is not None and not isinstance(r.system, str):
        raise InvalidRequest("system must be a string or None")


def _check_limits(r: RunRequest) -> None:
    if (
        not isinstance(r.max_iterations, int)
        or isinstance(r.max_iterations, bool)
        or not 1 <= r.max_iterations <= MAX_ITERATIONS_CEILING
    ):
        raise InvalidRequest(
            f"max_iterations must be an integer from 1 to {MAX_ITERATIONS_CEILING}, "
            f"got {r.max_iterations!r}"
        )
    if r.max_tokens is not None and (not isinstance(r.max_tokens, int) or r.max_tokens <= 0):
        raise InvalidRequest("max_tokens must be a positive integer or None")
    if r.max_cost is not None and (
        not isinstance(r.max_cost, int | float) or not math.isfinite(r.max_cost) or r.max_cost <= 0
    ):
        raise InvalidRequest("max_cost must be a positive number or None")


def to_json(request: RunRequest) -> dict[str, Any]:
    data = dataclasses.asdict(request)
    data["tools"] = list(request.tools)
    return data


def _check_metadata(r: RunRequest, *, serialise: bool) -> None:
    if not isinstance(r.metadata, dict):
        raise InvalidRequest("metadata must be a dict")
    if not serialise:
        return
    try:
        json.dumps(r.metadata)
    except (TypeError, ValueError):
        raise InvalidRequest("metadata must be JSON-serialisable") from None


def from_json(raw: str | None) -> RunRequest:
    """A stored request; a corrupt one raises InvalidRequest (the run then fails for good)."""
    if raw is None:
        raise InvalidRequest("the run has no stored request")
    try:
        data = _json.loads(raw)
    except ValueError as exc:
        raise InvalidRequest(f"stored request is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidRequest("stored request is not a JSON object")
    unknown = set(data) - _FIELDS
    if unknown:
        raise InvalidRequest(f"stored request has unknown fields: {sorted(unknown)}")
    try:
        request = RunRequest(**data)
    except TypeError as exc:
        raise InvalidRequest(f"stored request is incomplete: {exc}") from None
    # A script is checked where it is played (a malformed one fails the run with
    # `configuration`).
    _check_shape(request, stored=True)
    return request


def dumps(data: dict[str, Any]) -> str:
    return _json.dumps(data)
