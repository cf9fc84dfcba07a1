"""RunRequest validation and its stored JSON form."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from tenure import _json
from tenure._errors import InvalidRequest, UnknownModel
from tenure._policy import MAX_ITERATIONS_CEILING, MAX_NESTING_DEPTH
from tenure._types import RunRequest
from tenure.providers.scripted import parse_script

_FIELD_ORDER = tuple(f.name for f in dataclasses.fields(RunRequest))
_FIELDS = set(_FIELD_ORDER)


def validate(
    request: Any,
    check_tools: Callable[[tuple[str, ...]], None],
    has_model: Callable[[str], bool],
    check_agent: Callable[[str, dict[str, Any]], None] | None = None,
) -> RunRequest:
    """The request, checked; a bad one raises InvalidRequest (a ValueError) naming the field.
    `check_agent(name, input)` refuses an unknown agent function or an input its signature
    does not take."""
    if not isinstance(request, RunRequest):
        raise InvalidRequest(f"expected a RunRequest, got {type(request).__name__}")
    _check_shape(request)
    check_tools(tuple(request.tools))
    if request.agent is not None:
        if check_agent is None:
            raise InvalidRequest(f"unknown agent {request.agent!r}")
        check_agent(request.agent, request.input or {})
        # An agent function names its models at each step; the request's model is only
        # their default, checked where a step uses it.
        if request.model != "default" and not has_model(request.model):
            raise UnknownModel(request.model)
    elif not has_model(request.model):
        raise UnknownModel(request.model)
    if request.script is not None:
        parse_script(request.script)
    return request


@functools.cache
def _types() -> Any:
    """A pydantic model of every RunRequest field's type (values and limits are checked
    after); built on first use, so that importing tenure does not wait for pydantic."""
    from pydantic import BaseModel, ConfigDict

    class _Types(BaseModel):
        model_config = ConfigDict(strict=True, extra="forbid")

        prompt: str
        model: str
        tools: tuple[str, ...]
        max_iterations: int
        queue: str
        idempotency_key: str | None
        metadata: dict[str, Any]
        script: Any  # checked by parse_script, with messages that name the turn
        system: str | None
        max_tokens: int | None
        max_cost: float | int | None
        agent: str | None
        input: dict[str, Any] | None
        priority: int
        concurrency_key: str | None

    return _Types


def _plain_types(r: RunRequest) -> bool:
    """Whether every field has exactly a type that `_types()` accepts: the common case,
    checked without building a model. Anything else (a subclass, a wrong type) goes to
    pydantic, which accepts or refuses it with its own message, so this shortcut never
    accepts more."""
    return (
        type(r.prompt) is str
        and type(r.model) is str
        and type(r.queue) is str
        and type(r.max_iterations) is int
        and type(r.tools) is tuple
        and (not r.tools or all(type(t) is str for t in r.tools))
        and type(r.metadata) is dict
        and (not r.metadata or all(type(k) is str for k in r.metadata))
        and (r.idempotency_key is None or type(r.idempotency_key) is str)
        and (r.system is None or type(r.system) is str)
        and (r.max_tokens is None or type(r.max_tokens) is int)
        and (r.max_cost is None or type(r.max_cost) in (int, float))
        and r.agent is None
        and r.input is None
        and type(r.priority) is int
        and (r.concurrency_key is None or type(r.concurrency_key) is str)
    )


def _check_types(r: RunRequest) -> None:
    if _plain_types(r):
        return
    from pydantic import ValidationError

    try:
        _types().model_validate({f: getattr(r, f) for f in _FIELDS})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = first["loc"][0] if first["loc"] else "request"
        got = repr(first["input"])
        got = got if len(got) <= 60 else got[:57] + "..."
        raise InvalidRequest(f"{where}: {first['msg'].lower()}, got {got}") from None


def _check_shape(r: RunRequest, *, stored: bool = False) -> None:
    """Types, names and limits; metadata and script JSON that both stores hold alike, unless
    the request came from JSON (`stored`), which it then is by construction."""
    _check_types(r)
    _check_names(r)
    _check_limits(r)
    if not stored:
        _check_text(r)
        check_json_value("metadata", r.metadata)
        if r.script is not None:
            check_json_value("script", r.script)
        if r.input is not None:
            check_json_value("input", r.input)


def _check_text(r: RunRequest) -> None:
    for name in (
        "prompt",
        "model",
        "queue",
        "idempotency_key",
        "system",
        "agent",
        "concurrency_key",
    ):
        value = getattr(r, name)
        if value is not None:
            check_text(name, value)
    for tool in r.tools:
        check_text("tools", tool)


def check_text(name: str, value: str) -> None:
    """Text both stores keep as given: UTF-8 (no lone surrogate) and no NUL character."""
    if "\x00" in value:
        raise InvalidRequest(f"{name} must not contain a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(f"{name} is not valid UTF-8 text (a lone surrogate)") from None


# The longest queue name (both stores hold it as text; the API takes at most this).
MAX_QUEUE_NAME = 200
# The longest concurrency key, and the range of priorities (SPEC §22): wide enough for
# any scheme of levels, narrow enough that no one needs a bigger number to jump the queue.
MAX_CONCURRENCY_KEY = 200
PRIORITY_MIN = -100
PRIORITY_MAX = 100

_INT64 = range(-(2**63), 2**63)


def check_json_value(name: str, value: Any) -> None:
    """A value both stores hold alike as JSON: objects with text keys, lists, text, finite
    numbers, integers within 64 bits, booleans and null, nested at most MAX_NESTING_DEPTH
    deep. Walked without recursion, so a value nested thousands deep is refused, not a crash."""
    if not value and type(value) is dict:  # no metadata: the common case
        return
    stack: list[tuple[Any, int]] = [(value, 0)]
    push = stack.append
    while stack:
        item, depth = stack.pop()
        if isinstance(item, _CONTAINERS):
            if depth >= MAX_NESTING_DEPTH:
                raise InvalidRequest(f"{name} is nested more than {MAX_NESTING_DEPTH} levels deep")
            depth += 1
            for child in _children(name, item):
                push((child, depth))
        else:
            _check_scalar(name, item)


# What `check_json_value` walks into (a tuple: an `X | Y` union is built anew where written).
_CONTAINERS = (dict, list, tuple)


def _children(name: str, item: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> Iterable[Any]:
    if not isinstance(item, dict):
        return item
    for key in item:
        if not isinstance(key, str):
            raise InvalidRequest(f"{name} must be JSON-serialisable: key {key!r}")
        check_text(f"{name} key", key)
    return item.values()


def _check_scalar(name: str, item: Any) -> None:
    if isinstance(item, str):
        check_text(name, item)
    elif isinstance(item, bool) or item is None:
        return
    elif isinstance(item, int):
        if item not in _INT64:
            raise InvalidRequest(f"{name} holds an integer beyond 64 bits")
    elif isinstance(item, float):
        if not math.isfinite(item):
            raise InvalidRequest(f"{name} holds {item!r}, which JSON cannot hold")
    else:
        raise InvalidRequest(f"{name} must be JSON-serialisable: a {type(item).__name__} is not")


def _check_prompt(r: RunRequest) -> None:
    """A built-in run needs a prompt; an agent function's run needs the function's name."""
    if r.agent is not None:
        if not isinstance(r.agent, str) or not r.agent:
            raise InvalidRequest("agent must be a non-empty string or None")
    elif r.input is not None:
        raise InvalidRequest("input is the argument of an agent function: name it with agent=")
    elif not isinstance(r.prompt, str) or not r.prompt.strip():
        raise InvalidRequest("prompt must be a non-empty string")


def _check_names(r: RunRequest) -> None:
    _check_prompt(r)
    if not isinstance(r.model, str) or not r.model:
        raise InvalidRequest("model must be a non-empty string")
    if not all(t for t in r.tools):
        raise InvalidRequest("tools must be a list of tool names")
    if len(set(r.tools)) != len(r.tools):
        raise InvalidRequest("tools lists a tool twice")
    if not isinstance(r.queue, str) or not r.queue or len(r.queue) > MAX_QUEUE_NAME:
        raise InvalidRequest(
            f"queue must be a non-empty string of at most {MAX_QUEUE_NAME} characters"
        )
    if r.idempotency_key is not None and (
        not isinstance(r.idempotency_key, str) or not r.idempotency_key
    ):
        raise InvalidRequest("idempotency_key must be a non-empty string or None")
    if r.system is not None and not isinstance(r.system, str):
        raise InvalidRequest("system must be a string or None")
    check_concurrency_key(r.concurrency_key)


def check_concurrency_key(key: Any) -> None:
    if key is not None and (not isinstance(key, str) or not key or len(key) > MAX_CONCURRENCY_KEY):
        raise InvalidRequest(
            f"concurrency_key must be None or a non-empty string of at most "
            f"{MAX_CONCURRENCY_KEY} characters"
        )


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
    if (
        not isinstance(r.priority, int)
        or isinstance(r.priority, bool)
        or not PRIORITY_MIN <= r.priority <= PRIORITY_MAX
    ):
        raise InvalidRequest(
            f"priority must be an integer from {PRIORITY_MIN} to {PRIORITY_MAX}, got {r.priority!r}"
        )
    if r.max_tokens is not None and (not isinstance(r.max_tokens, int) or r.max_tokens <= 0):
        raise InvalidRequest("max_tokens must be a positive integer or None")
    if r.max_cost is not None and (
        not isinstance(r.max_cost, int | float) or not math.isfinite(r.max_cost) or r.max_cost <= 0
    ):
        raise InvalidRequest("max_cost must be a positive number or None")


def to_json(request: RunRequest) -> dict[str, Any]:
    """The request's fields as a JSON object. Shallow: it shares `metadata` and `script`
    with the request, and is meant to be encoded at once (a deep copy cost more than the
    rest of an enqueue)."""
    data = {name: getattr(request, name) for name in _FIELD_ORDER}
    data["tools"] = list(request.tools)
    if request.agent is None:  # a built-in run is stored as the version before agents did
        del data["agent"], data["input"]
    # Likewise a run with neither a priority nor a key (SPEC §22): as before they existed.
    if request.priority == 0:
        del data["priority"]
    if request.concurrency_key is None:
        del data["concurrency_key"]
    return data


# Requests decoded at claims, by their stored text (`claimed`). Emptied whole when full;
# a longer text is not kept (its decoding is mostly `loads`, which a cache would not spare).
_DECODED_MAX = 256
_DECODED_MAX_CHARS = 4096
_decoded: dict[str, RunRequest] = {}


def claimed(raw: str | None) -> RunRequest:
    """`from_json` of a claimed run's request, decoded and checked once per text: a worker
    meets the same texts over and over (a run's every segment; the runs of a schedule, a
    benchmark, a test), and decoding and checking one was several percent of a trivial
    run's CPU. The same text always decodes to an equal request, and a RunRequest is
    frozen; the runs of one text share it. An agent function's run is not kept: its
    `input` is handed to the function's code, which may change it."""
    if raw is None:
        return from_json(raw)
    request = _decoded.get(raw)
    if request is None:
        request = from_json(raw)  # raises for a text that is not a request: never kept
        if request.agent is None and len(raw) <= _DECODED_MAX_CHARS:
            if len(_decoded) >= _DECODED_MAX:
                _decoded.clear()
            _decoded[raw] = request
    return request


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
    missing = _REQUIRED.difference(data)
    if missing:
        raise InvalidRequest(f"stored request is incomplete: it lacks {sorted(missing)}")
    try:
        request = _built(data)
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"stored request is incomplete: {exc}") from None
    # A script is checked where it is played (a malformed one fails the run with
    # `configuration`). A row that enqueue wrote passes the one-expression look; one that
    # does not (written by hand, or by a version with other rules) gets every check, and
    # its first failure's message.
    if not _plainly_valid(request):
        _check_shape(request, stored=True)
    return request


_DEFAULTS = {
    f.name: f.default
    for f in dataclasses.fields(RunRequest)
    if f.default is not dataclasses.MISSING
}
_FACTORIES = {
    f.name: f.default_factory
    for f in dataclasses.fields(RunRequest)
    if f.default_factory is not dataclasses.MISSING
}
_REQUIRED = _FIELDS - set(_DEFAULTS) - set(_FACTORIES)


def _built(data: dict[str, Any]) -> RunRequest:
    """`RunRequest(**data)` for `data` of known fields, none required missing, without the
    frozen dataclass's `__init__` (a call of `object.__setattr__` per field made it the
    largest part of reading a stored request); its `__post_init__` runs as it would."""
    values = {**_DEFAULTS, **data}
    for name, factory in _FACTORIES.items():
        if name not in data:
            values[name] = factory()
    request: RunRequest = object.__new__(RunRequest)
    request.__dict__.update(values)
    request.__post_init__()
    return request


def _plainly_valid(r: RunRequest) -> bool:
    """Whether `_check_shape(r, stored=True)` accepts `r`, for the common built-in run, in
    one expression: never True for a request that it would refuse (anything unusual is
    False, and the full checks decide)."""
    return (
        _plain_types(r)
        and r.prompt.strip() != ""
        and r.model != ""
        and all(r.tools)
        and len(set(r.tools)) == len(r.tools)
        and 0 < len(r.queue) <= MAX_QUEUE_NAME
        and (r.idempotency_key is None or r.idempotency_key != "")
        and (r.concurrency_key is None or 0 < len(r.concurrency_key) <= MAX_CONCURRENCY_KEY)
        and 1 <= r.max_iterations <= MAX_ITERATIONS_CEILING
        and PRIORITY_MIN <= r.priority <= PRIORITY_MAX
        and (r.max_tokens is None or r.max_tokens > 0)
        and (r.max_cost is None or (math.isfinite(r.max_cost) and r.max_cost > 0))
    )


def dumps(data: dict[str, Any]) -> str:
    return _json.dumps(data)


def dumps_checked(data: dict[str, Any]) -> str:
    """`to_json` of a request that `validate` accepted: everything in it is JSON as it
    stands (text is UTF-8, numbers finite and within 64 bits, keys text), so orjson writes
    it without the fallbacks `_json.dumps` keeps for values that are not."""
    try:
        return orjson.dumps(data).decode()
    except orjson.JSONEncodeError:  # nested deeper than orjson goes
        return _json.dumps(data)


_last_id = (0, 0)  # (milliseconds, counter) of the last id this process made
_id_lock = threading.Lock()


def new_run_id() -> str:
    """A UUID version 7 (RFC 9562): 48 bits of Unix milliseconds, a 12-bit counter, then 62
    random bits.

    Ids that grow with time keep the rows and events of runs enqueued together on the same
    few database pages, where random ids would scatter every batch's writes over the whole
    table; and they sort by age. Within one process they also sort in the order they were
    made (RFC 9562's dedicated counter: an id made in the same millisecond as the one
    before takes that one's counter plus one; a new millisecond starts it at a random
    value below 1024), so that runs one process enqueued in the same millisecond, whose
    `available_at` are equal, are claimed in that order (SPEC §22: then by id)."""
    global _last_id
    ms = time.time_ns() // 1_000_000
    bits = int.from_bytes(os.urandom(8), "big")
    with _id_lock:
        last_ms, last_counter = _last_id
        if ms <= last_ms:  # the same millisecond, or the clock stepped back
            ms, counter = last_ms, last_counter + 1
            if counter > 0xFFF:  # 4096 ids in one millisecond: borrow the next one
                ms, counter = ms + 1, 0
        else:
            counter = bits >> 54  # 10 random bits: room to count on
        _last_id = (ms, counter)
    rand_b = bits & ((1 << 62) - 1)
    value = ms << 80 | 0x7 << 76 | counter << 64 | 0x2 << 62 | rand_b  # version 7, variant
    h = f"{value:032x}"  # str(uuid.UUID(int=value)) builds and checks an object first
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
