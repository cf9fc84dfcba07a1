"""The engine's side of provider capacity (SPEC §17).

A call to a model registered with `Limits` reserves before it is made (one request, and its
estimated tokens: the prompt at four characters a token plus the call's output limit) with a
compare-and-set in the store, shared by every worker on the database, and settles the real
usage after (or gives the reservation back when the call fails). No capacity now: the call is
not made. A short wait (within `lease_seconds / 3`, while the lease keeper holds the lease) is
waited here; a longer one raises `Throttled` and the segment parks the run, uncharged.

A `rate_limit` failure carrying `Retry-After` opens the model's circuit in the store: every
worker then finds no capacity until it closes, and a `Fallback` skips the model.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tenure._classify import classify, retry_after
from tenure._errors import Cancelled, ProviderError, Throttled
from tenure._limits import Limits, capacity
from tenure._types import FailureClass
from tenure.providers._base import ModelCall, ModelReply, Provider
from tenure.store._base import Grant, Lease, ModelState, Store

if TYPE_CHECKING:
    from tenure._ladder import Segment

log = logging.getLogger("tenure")

CHARS_PER_TOKEN = 4
# The output a call is assumed to be allowed when its provider names no limit (`max_tokens`).
DEFAULT_OUTPUT_TOKENS = 1024
# The shortest wait between two looks at a model's capacity (never a busy loop).
MIN_WAIT_SECONDS = 0.02
# A call is granted only while its buckets keep this much of their refill. The provider
# counts a call when it arrives, a moment after the grant (the network, a busy client, other
# processes): callers that all wake the instant a bucket can pay would otherwise arrive just
# before the provider's bucket can. It costs a little of the burst, none of the rate.
HEADROOM_SECONDS = 1.0


def prompt_text(call: ModelCall) -> str:
    """What a provider counts as prompt: every message's text, the arguments of the tool
    calls it carries, and the tools offered."""
    pieces: list[str] = []
    for message in call.messages:
        content = message.get("content")
        if isinstance(content, str):
            pieces.append(content)
        elif isinstance(content, list):
            pieces.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
        for tool_call in message.get("tool_calls") or []:
            function = tool_call.get("function") if isinstance(tool_call, dict) else None
            if isinstance(function, dict):
                pieces.append(str(function.get("name", "")))
                pieces.append(str(function.get("arguments", "")))
    if call.tools:
        tools = [spec.to_openai() for spec in call.tools]
        pieces.append(json.dumps(tools, separators=(",", ":")))
    return "".join(pieces)


def estimate_tokens(call: ModelCall, provider: Any) -> int:
    """The tokens a call reserves: its prompt at four characters a token, plus its output
    limit (the provider's `max_tokens`, else `DEFAULT_OUTPUT_TOKENS`)."""
    output = getattr(provider, "max_tokens", None)
    if isinstance(output, bool) or not isinstance(output, int) or output < 1:
        output = DEFAULT_OUTPUT_TOKENS
    return max(1, math.ceil(len(prompt_text(call)) / CHARS_PER_TOKEN)) + output


class Capacity:
    """The models registered with limits, and how a segment calls them."""

    def __init__(self, store: Callable[[], Store]) -> None:
        self._store = store
        self._limits: dict[str, Limits] = {}
        # Providers registered under a limited name, by identity: how a `Fallback` member is
        # recognised as that model (the provider is kept so that its id is never reused).
        self._named: dict[int, tuple[Provider, str]] = {}
        self._registered: set[tuple[str, str]] = set()  # (database, model) rows written
        self._lock = threading.Lock()

    def add(self, name: str, provider: Provider, limits: Limits | None) -> None:
        with self._lock:
            self._named = {k: v for k, v in self._named.items() if v[1] != name}
            self._limits.pop(name, None)
            self._registered = {r for r in self._registered if r[1] != name}
            if limits is not None:
                self._limits[name] = limits
                self._named[id(provider)] = (provider, name)

    @property
    def active(self) -> bool:
        """Some model has limits: calls go through here."""
        return bool(self._limits)

    def limits(self) -> dict[str, Limits]:
        return dict(self._limits)

    def call(self, segment: Segment, provider: Provider, call: ModelCall) -> ModelReply:
        """Make the call when capacity allows: wait here while the wait is short (the lease
        keeper holds the lease), else raise `Throttled` for the segment to park the run."""
        model = call.request.model
        timeout = segment.engine.model_timeout(model)
        # An interactive run cannot be parked (no worker would pick it up): its caller waits.
        longest = timeout if segment.interactive else segment.lease_seconds / 3
        call = replace(call, through=lambda p, c: self._member(segment, timeout, p, c))
        waited = 0.0
        while True:
            try:
                return self._once(segment, model, provider, call, timeout, top=True)
            except Throttled as exc:
                wait = max(exc.wait, MIN_WAIT_SECONDS)
                if wait > longest or waited + wait > timeout:
                    raise
                if segment.abort_signal.wait(wait):
                    raise Cancelled(f"run {segment.run_id} was lost while it waited") from None
                waited += wait

    def _member(
        self, segment: Segment, timeout: float, provider: Provider, call: ModelCall
    ) -> ModelReply:
        """A `Fallback` member: through its model's capacity if it is a limited model,
        never waited for (the next member may answer now)."""
        named = self._named.get(id(provider))
        if named is None or named[0] is not provider:
            return provider.complete(call)
        return self._once(segment, named[1], provider, call, timeout, top=False)

    def _once(
        self,
        segment: Segment,
        model: str,
        provider: Provider,
        call: ModelCall,
        timeout: float,
        *,
        top: bool,
    ) -> ModelReply:
        limits = self._limits.get(model)
        if limits is None:
            return _complete(segment, provider, call, timeout, top)
        store = self._store()
        tokens = estimate_tokens(call, provider)
        # A reservation is held while its run holds its lease, and never longer than the
        # call may take plus one lease (for its end to be settled).
        hold = timeout + segment.lease_seconds
        grant = self._reserve(store, model, limits, segment.lease, tokens, hold)
        if grant.reservation is None:
            raise Throttled(model, grant.wait, circuit=grant.circuit_open)
        try:
            reply = _complete(segment, provider, call, timeout, top)
        except Exception as exc:
            _settle(store, model, grant.reservation, tokens)  # nothing was used
            wait = retry_after(exc)
            if classify(exc) is FailureClass.RATE_LIMIT and wait is not None:
                _open_circuit(store, model, wait)
                raise Throttled(model, wait, circuit=True) from exc
            raise
        used = reply.usage.input_tokens + reply.usage.output_tokens
        _settle(store, model, grant.reservation, tokens - used)
        return reply

    def _reserve(
        self, store: Store, model: str, limits: Limits, lease: Lease, tokens: int, hold: float
    ) -> Grant:
        key = (store.url, model)
        if key not in self._registered:
            store.set_model_limits(model, limits)
            self._registered.add(key)
        grant = store.reserve_capacity(model, lease, tokens, hold, HEADROOM_SECONDS)
        if grant is None:  # its row is gone (a database recreated under the same URL)
            store.set_model_limits(model, limits)
            grant = store.reserve_capacity(model, lease, tokens, hold, HEADROOM_SECONDS)
        if grant is None:
            raise ProviderError(FailureClass.CONFIGURATION, f"model {model!r} has no capacity row")
        return grant


def unused_model(name: str, limits: Limits, now: datetime) -> ModelState:
    """A model with limits that no call has used on this database yet: full buckets."""
    rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
    return ModelState(
        name=name,
        limits=limits,
        in_use=0,
        requests=None if rpm is None else capacity(rpm),
        tokens=None if tpm is None else capacity(tpm),
        circuit_open_until=None,
        now=now,
    )


def _complete(
    segment: Segment, provider: Provider, call: ModelCall, timeout: float, top: bool
) -> ModelReply:
    if not top:  # a Fallback member runs inside its chain's deadline
        return provider.complete(call)
    with segment.step_deadline(timeout):
        return provider.complete(call)


def _settle(store: Store, model: str, reservation: str, refund: float) -> None:
    # A settlement that cannot be stored must not fail a call that was made: the bucket
    # refills on its own and the reservation ends with its run's lease.
    try:
        store.settle_capacity(model, reservation, refund)
    except Exception as exc:
        log.warning("model %s: the call's usage could not be settled: %s", model, exc)


def _open_circuit(store: Store, model: str, seconds: float) -> None:
    try:
        store.open_circuit(model, seconds)
    except Exception as exc:
        log.warning("model %s: its circuit could not be opened: %s", model, exc)
    else:
        log.warning("model %s: rate limited; circuit open for %.1fs", model, seconds)
