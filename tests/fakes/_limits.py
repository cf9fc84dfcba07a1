"""The fake service's own rate limits: per-minute limits spread over a continuous bucket.

Providers do not count a minute window and then reset: they refill continuously, so a client
that sends its whole minute's allowance in the first second is refused most of it. Each
limit here is a bucket refilled at `limit / 60` per second that holds at most `limit / 10`
(the shape SPEC §17 gives the engine's own counters, so an engine configured with the same
limits never hears a 429).

Tokens are reserved when a request arrives (the prompt estimate plus its output limit) and
settled to the actual count when the answer is done, as providers account for them.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SECONDS_PER_MINUTE = 60.0
# A bucket holds a tenth of the per-minute limit: at 60 RPM, 6 at once, then one a second.
BURST_FRACTION = 0.1
CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Tokens in `text`, the usual rule of thumb: one per four characters, at least one."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def request_text(body: dict[str, Any]) -> str:
    """The text of a chat-completions request that counts as prompt: every message's content
    (plain or in parts), the arguments of tool calls it carries, and the offered tools."""
    pieces: list[str] = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            pieces.append(content)
        elif isinstance(content, list):
            pieces.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                pieces.append(str(function.get("name", "")))
                pieces.append(str(function.get("arguments", "")))
    tools = body.get("tools")
    if tools:
        pieces.append(json.dumps(tools, separators=(",", ":")))
    return "".join(pieces)


def prompt_tokens(body: dict[str, Any]) -> int:
    return estimate_tokens(request_text(body))


def output_limit(body: dict[str, Any], default: int) -> int:
    """The request's own cap on output tokens, else the service's default."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return default


class Bucket:
    """One per-minute limit, refilled continuously; `take` never blocks.

    A request larger than the bucket is admitted only when the bucket is full and leaves it
    in debt, so large requests are slowed but never starved.
    """

    def __init__(self, per_minute: float, clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute <= 0:
            raise ValueError(f"a per-minute limit must be positive, got {per_minute}")
        self.per_minute = per_minute
        self.rate = per_minute / SECONDS_PER_MINUTE
        self.capacity = max(per_minute * BURST_FRACTION, 1.0)
        self._clock = clock
        self._level = self.capacity
        self._at = clock()

    def level(self) -> float:
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._at) * self.rate)
        self._at = now
        return self._level

    def wait_for(self, amount: float) -> float:
        """Seconds until `amount` could be taken (0 if now)."""
        needed = min(amount, self.capacity) - self.level()
        return max(needed, 0.0) / self.rate

    def take(self, amount: float) -> None:
        self.level()
        self._level -= amount

    def give_back(self, amount: float) -> None:
        """Return part of a reservation (negative: charge more than was reserved)."""
        self.level()
        self._level = min(self.capacity, self._level + amount)


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused, and how long the client should wait."""

    limit: str  # "requests" or "tokens"
    per_minute: float
    requested: int
    retry_after: float


class Limiter:
    """Requests-per-minute and tokens-per-minute, checked together: a request is admitted
    only when both buckets can pay, so a refusal never consumes either."""

    def __init__(
        self,
        rpm: float | None,
        tpm: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.requests = Bucket(rpm, clock) if rpm else None
        self.tokens = Bucket(tpm, clock) if tpm else None

    def admit(self, tokens: int) -> Refusal | None:
        waits: list[tuple[float, str, Bucket, int]] = []
        if self.requests is not None:
            waits.append((self.requests.wait_for(1), "requests", self.requests, 1))
        if self.tokens is not None:
            waits.append((self.tokens.wait_for(tokens), "tokens", self.tokens, tokens))
        worst = max(waits, default=None, key=lambda w: w[0])
        if worst is not None and worst[0] > 0:
            wait, limit, bucket, requested = worst
            return Refusal(limit, bucket.per_minute, requested, wait)
        for _, _, bucket, amount in waits:
            bucket.take(amount)
        return None

    def settle(self, reserved: int, actual: int) -> None:
        if self.tokens is not None and reserved != actual:
            self.tokens.give_back(reserved - actual)

    def remaining(self) -> dict[str, int]:
        left: dict[str, int] = {}
        if self.requests is not None:
            left["requests"] = max(int(self.requests.level()), 0)
        if self.tokens is not None:
            left["tokens"] = max(int(self.tokens.level()), 0)
        return left
