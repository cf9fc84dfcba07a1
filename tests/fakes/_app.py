"""The fake service as a minimal ASGI application: one chat-completions route and a few
control routes (`/_fake/...`) that tests and benchmarks use to read counters and inject
faults, in-process or in another process alike.

Everything but the counters runs on the server's event loop; the counters and the fault
queue sit behind one lock because the in-process controls are called from other threads.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import json
import logging
import math
import random
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ._answers import Policy, Rendered, completion_body, lorem_policy, render, stream_chunks
from ._limits import Limiter, Refusal, output_limit, prompt_tokens

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

DEFAULT_MODEL = "fake-model"
# What a request without max_tokens reserves for its answer.
DEFAULT_MAX_TOKENS = 256
DEFAULT_ERROR_STATUS = 503
# The last request bodies kept for in-process tests to inspect.
RECEIVED_KEPT = 10_000
_DROPPED_LOG = "ASGI callable returned without completing response."


class _QuietDrops(logging.Filter):
    """A dropped connection is on purpose; uvicorn would log it as an application error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != _DROPPED_LOG


logging.getLogger("uvicorn.error").addFilter(_QuietDrops())


@dataclass(frozen=True)
class Latency:
    """Time to the first byte of an answer: `fixed` (low), `uniform` between low and high,
    or `lognormal` around the geometric mean of low and high, clipped to them."""

    kind: Literal["fixed", "uniform", "lognormal"] = "fixed"
    low: float = 0.0
    high: float = 0.0
    sigma: float = 0.6

    @classmethod
    def fixed(cls, seconds: float) -> Latency:
        return cls("fixed", seconds, seconds)

    @classmethod
    def uniform(cls, low: float, high: float) -> Latency:
        return cls("uniform", low, high)

    @classmethod
    def lognormal(cls, low: float, high: float, sigma: float = 0.6) -> Latency:
        return cls("lognormal", low, high, sigma)

    def sample(self, rng: random.Random) -> float:
        if self.kind == "uniform":
            return rng.uniform(self.low, self.high)
        if self.kind == "lognormal":
            median = math.sqrt(max(self.low, 1e-3) * max(self.high, 1e-3))
            return min(max(rng.lognormvariate(math.log(median), self.sigma), self.low), self.high)
        return self.low


@dataclass(frozen=True)
class ServiceConfig:
    """How the fake behaves. `rpm`/`tpm` None: no such limit. `policy` is a function of the
    request body, or "module:name" of one (the form a separate process can be given)."""

    rpm: float | None = None
    tpm: float | None = None
    latency: Latency = field(default_factory=Latency)
    chunk_interval: float = 0.0
    error_rate: float = 0.0
    error_status: int = DEFAULT_ERROR_STATUS
    seed: int = 0
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    model: str = DEFAULT_MODEL
    policy: Policy | str | None = None


@dataclass
class Stats:
    """What the service did. Tokens are counted for delivered answers only, by the minute
    (since the service started or was reset) in which the answer finished."""

    requests: int = 0
    answered: int = 0
    streamed: int = 0
    rate_limited: int = 0
    server_errors: int = 0
    dropped: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    tokens_by_minute: list[int] = field(default_factory=list)
    requests_by_minute: list[int] = field(default_factory=list)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Stats:
        return cls(**data)


@dataclass(frozen=True)
class Fault:
    kind: Literal["fail", "drop"]
    status: int = DEFAULT_ERROR_STATUS
    after_chunks: int = 0


Outcome = Literal["answered", "dropped", "failed", "abandoned"]


@dataclass
class _Call:
    """One admitted chat request on its way through the service."""

    body: dict[str, Any]
    prompt: int
    limit: int
    headers: Headers = field(default_factory=list)
    settled: bool = False

    @property
    def reserved(self) -> int:
        return self.prompt + self.limit

    @property
    def streamed(self) -> bool:
        return bool(self.body.get("stream"))


def resolve_policy(policy: Policy | str | None) -> Policy:
    if policy is None:
        return lorem_policy()
    if isinstance(policy, str):
        module, _, name = policy.partition(":")
        found: Policy = getattr(importlib.import_module(module), name)
        return found
    return policy


def error_body(message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class Service:
    """The ASGI application and its state."""

    def __init__(self, config: ServiceConfig, clock: Callable[[], float] = time.monotonic):
        self.config = config
        self.policy = resolve_policy(config.policy)
        self.limiter = Limiter(config.rpm, config.tpm, clock)
        self.received: deque[dict[str, Any]] = deque(maxlen=RECEIVED_KEPT)
        self._clock = clock
        self._rng = random.Random(config.seed)
        self._lock = threading.Lock()
        self._faults: deque[Fault] = deque()
        self._stats = Stats()
        self._epoch = clock()
        self._ids = itertools.count(1)
        # Called with each stream chunk just before it is sent (a benchmark times deltas
        # from here); on the service's event loop, so it must be quick.
        self.on_chunk: Callable[[dict[str, Any]], None] | None = None

    # -- controls (any thread) -------------------------------------------------------------

    def stats(self) -> Stats:
        with self._lock:
            return Stats.from_json(json.loads(json.dumps(self._stats.to_json())))

    def reset(self) -> None:
        """Counters to zero and pending faults forgotten; the limits keep their state."""
        with self._lock:
            self._stats = Stats(in_flight=self._stats.in_flight)
            self._faults.clear()
            self._epoch = self._clock()

    def fail_next(self, count: int = 1, status: int = 500) -> None:
        with self._lock:
            self._faults.extend(Fault("fail", status=status) for _ in range(count))

    def drop_next(self, count: int = 1, after_chunks: int = 0) -> None:
        """The next `count` answers lose their connection after `after_chunks` stream chunks
        (an answer that is not streamed: after its headers)."""
        with self._lock:
            self._faults.extend(Fault("drop", after_chunks=after_chunks) for _ in range(count))

    # -- ASGI ------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        raw = await _read_body(receive)
        method, path = scope["method"], scope["path"]
        if method == "POST" and path.endswith("/chat/completions"):
            await self._chat(raw, send)
        elif path.startswith("/_fake/"):
            await self._control(method, path.removeprefix("/_fake/"), raw, send)
        else:
            body = error_body(f"no route {method} {path}", "invalid_request_error", None)
            await _send_json(send, 404, body)

    async def _control(self, method: str, action: str, raw: bytes, send: Send) -> None:
        args: dict[str, Any] = json.loads(raw) if raw else {}
        if method == "GET" and action == "stats":
            await _send_json(send, 200, self.stats().to_json())
            return
        if method == "POST" and action in ("fail", "drop", "reset"):
            if action == "fail":
                self.fail_next(int(args.get("count", 1)), int(args.get("status", 500)))
            elif action == "drop":
                self.drop_next(int(args.get("count", 1)), int(args.get("after_chunks", 0)))
            else:
                self.reset()
            await _send_json(send, 200, {"ok": True})
            return
        await _send_json(send, 404, error_body(f"no control {method} {action}", "fake", None))

    async def _chat(self, raw: bytes, send: Send) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            message = "We could not parse the JSON body of your request."
            await _send_json(send, 400, error_body(message, "invalid_request_error", None))
            return
        call = _Call(body, prompt_tokens(body), output_limit(body, self.config.default_max_tokens))
        refusal, fault = self._admit(call)
        if refusal is not None:
            await self._refuse(send, refusal, call.headers)
            return
        try:
            await asyncio.sleep(self.config.latency.sample(self._rng))
            await self._answer(call, send, fault)
        finally:
            self._settle(call, "abandoned")

    def _admit(self, call: _Call) -> tuple[Refusal | None, Fault | None]:
        with self._lock:
            self._stats.requests += 1
            self.received.append(call.body)
            refusal = self.limiter.admit(call.reserved)
            fault = None
            if refusal is not None:
                self._stats.rate_limited += 1
                call.settled = True
            else:
                self._stats.in_flight += 1
                self._stats.peak_in_flight = max(self._stats.peak_in_flight, self._stats.in_flight)
                _bump(self._stats.requests_by_minute, self._minute(), 1)
                fault = self._faults.popleft() if self._faults else None
            call.headers = self._limit_headers()
            return refusal, fault

    def _settle(self, call: _Call, outcome: Outcome, completion: int = 0) -> None:
        """Settles the call's tokens and counts it, once. Called before the last byte of the
        answer goes out, so a client that has its answer finds the counters up to date."""
        if call.settled:
            return
        call.settled = True
        # A dropped answer was generated all the same: it is charged in full.
        actual = call.prompt + completion if outcome in ("answered", "dropped") else 0
        with self._lock:
            self._stats.in_flight -= 1
            self.limiter.settle(call.reserved, actual)
            if outcome == "failed":
                self._stats.server_errors += 1
            elif outcome == "dropped":
                self._stats.dropped += 1
            elif outcome == "answered":
                self._stats.answered += 1
                self._stats.streamed += call.streamed
                self._stats.prompt_tokens += call.prompt
                self._stats.completion_tokens += completion
                _bump(self._stats.tokens_by_minute, self._minute(), actual)

    def _minute(self) -> int:
        return int((self._clock() - self._epoch) // 60)

    def _limit_headers(self) -> Headers:
        headers: Headers = []
        remaining = self.limiter.remaining()
        for name, bucket in (("requests", self.limiter.requests), ("tokens", self.limiter.tokens)):
            if bucket is not None:
                headers.append((f"x-ratelimit-limit-{name}".encode(), b"%d" % bucket.per_minute))
                headers.append((f"x-ratelimit-remaining-{name}".encode(), b"%d" % remaining[name]))
        return headers

    async def _refuse(self, send: Send, refusal: Refusal, headers: Headers) -> None:
        unit = "RPM" if refusal.limit == "requests" else "TPM"
        message = (
            f"Rate limit reached for {self.config.model} in organization org-fake on "
            f"{refusal.limit} per min ({unit}): Limit {refusal.per_minute:g}, "
            f"Requested {refusal.requested}. Please try again in {refusal.retry_after:.3f}s."
        )
        headers = [
            *headers,
            (b"retry-after", str(max(1, math.ceil(refusal.retry_after))).encode()),
            (b"retry-after-ms", str(math.ceil(refusal.retry_after * 1000)).encode()),
        ]
        body = error_body(message, refusal.limit, "rate_limit_exceeded")
        await _send_json(send, 429, body, headers)

    async def _answer(self, call: _Call, send: Send, fault: Fault | None) -> None:
        if fault is None and self._rng.random() < self.config.error_rate:
            fault = Fault("fail", status=self.config.error_status)
        if fault is not None and fault.kind == "fail":
            self._settle(call, "failed")
            message = "The server had an error while processing your request."
            await _send_json(send, fault.status, error_body(message, "server_error", None))
            return
        rendered = render(self.policy(call.body), call.body, call.limit)
        drop_after = fault.after_chunks if fault is not None else None
        if call.streamed:
            await self._stream(call, send, rendered, drop_after)
        else:
            await self._whole(call, send, rendered, drop_after)

    def _identity(self) -> dict[str, Any]:
        return {
            "ident": f"chatcmpl-fake{next(self._ids)}",
            "model": self.config.model,
            "created": int(time.time()),
        }

    async def _whole(self, call: _Call, send: Send, rendered: Rendered, drop: int | None) -> None:
        payload = completion_body(rendered, prompt=call.prompt, **self._identity())
        data = json.dumps(payload).encode()
        if drop is not None:
            self._settle(call, "dropped", rendered.completion_tokens)
            # The body never comes: the client sees the connection close under it.
            await _start(send, 200, "application/json", [*call.headers, _length(data)])
            return
        self._settle(call, "answered", rendered.completion_tokens)
        await _send_bytes(send, 200, data, "application/json", call.headers)

    async def _stream(self, call: _Call, send: Send, rendered: Rendered, drop: int | None) -> None:
        options = call.body.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        chunks = stream_chunks(
            rendered, prompt=call.prompt, include_usage=include_usage, **self._identity()
        )
        headers = [*call.headers, (b"cache-control", b"no-cache")]
        await _start(send, 200, "text/event-stream", headers)
        for index, chunk in enumerate(chunks):
            if drop is not None and index >= drop:
                break
            if index and self.config.chunk_interval:
                await asyncio.sleep(self.config.chunk_interval)
            line = b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
            if self.on_chunk is not None:
                self.on_chunk(chunk)
            await send({"type": "http.response.body", "body": line, "more_body": True})
        if drop is not None:
            self._settle(call, "dropped", rendered.completion_tokens)
            return
        self._settle(call, "answered", rendered.completion_tokens)
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


def _bump(counts: list[int], index: int, amount: int) -> None:
    if len(counts) <= index:
        counts.extend([0] * (index + 1 - len(counts)))
    counts[index] += amount


async def _read_body(receive: Receive) -> bytes:
    parts: list[bytes] = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


def _length(data: bytes) -> tuple[bytes, bytes]:
    return (b"content-length", b"%d" % len(data))


async def _start(send: Send, status: int, content_type: str, headers: Headers) -> None:
    headers = [(b"content-type", content_type.encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def _send_bytes(
    send: Send, status: int, data: bytes, content_type: str, headers: Headers
) -> None:
    await _start(send, status, content_type, [*headers, _length(data)])
    await send({"type": "http.response.body", "body": data})


async def _send_json(
    send: Send, status: int, payload: dict[str, Any], headers: Headers | None = None
) -> None:
    data = json.dumps(payload).encode()
    await _send_bytes(send, status, data, "application/json", headers or [])
