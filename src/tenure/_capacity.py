"""The engine's side of provider capacity (SPEC §17).

A call to a model registered with `Limits` reserves before it is made (one request, and its
estimated tokens: the prompt at four characters a token plus the call's output limit) with a
compare-and-set in the store, shared by every worker on the database, and settles the real
usage after (or gives the reservation back when the call fails). No capacity now: the call is
not made. A short wait (within `lease_seconds / 3`, while the lease keeper holds the lease) is
waited here; a longer one raises `Throttled` and the segment parks the run, uncharged.

A `rate_limit` failure carrying `Retry-After` opens the model's circuit in the store, with or
without limits: every worker then finds no capacity until it closes, and a `Fallback` skips
the model. A model without limits pays nothing for its circuit while it stays closed: its
state is read from the store for all models at once, at most every `CIRCUIT_RECHECK_SECONDS`
per process, and only a throttle costs a write.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
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
    from tenure._steps import Steps

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
# How long a process trusts what it last read of the circuits before a call to a model
# without limits reads them again (one statement for every model, whatever the number of
# calls in between). A circuit another worker opens may be missed for this long: a call made
# meanwhile meets the provider's own 429, which parks its run (uncharged) just the same.
CIRCUIT_RECHECK_SECONDS = 1.0


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
    """The registered models' limits and circuits, and how a segment calls them."""

    def __init__(self, store: Callable[[], Store]) -> None:
        self._store = store
        self._limits: dict[str, Limits] = {}
        self._models: set[str] = set()
        # Providers registered under a name, by identity: how a `Fallback` member is
        # recognised as that model (the provider is kept so that its id is never reused).
        self._named: dict[int, tuple[Provider, str]] = {}
        self._registered: set[tuple[str, str]] = set()  # (database, model) rows written
        # The circuits known open (model -> monotonic time it closes) and when they were
        # last read from the store (None: never): for the models without limits.
        self._circuits: dict[str, float] = {}
        self._circuits_read: float | None = None
        self._lock = threading.Lock()

    def add(self, name: str, provider: Provider, limits: Limits | None) -> None:
        with self._lock:
            self._named = {k: v for k, v in self._named.items() if v[1] != name}
            self._limits.pop(name, None)
            self._registered = {r for r in self._registered if r[1] != name}
            self._models.add(name)
            self._named[id(provider)] = (provider, name)
            if limits is not None:
                self._limits[name] = limits

    def limits(self) -> dict[str, Limits]:
        return dict(self._limits)

    def names(self) -> set[str]:
        """Every registered model, with limits or not."""
        return set(self._models)

    def forget_circuits(self) -> None:
        """Another database: its circuits are read afresh at the next call."""
        with self._lock:
            self._circuits = {}
            self._circuits_read = None

    def call(
        self,
        steps: Steps,
        provider: Provider,
        call: ModelCall,
        *,
        timeout_of: Callable[[str], float],
        interactive: bool,
    ) -> ModelReply:
        """Make the call when capacity allows: wait here while the wait is short (the lease
        keeper holds the lease), else raise `Throttled` for the segment to park the run.
        `timeout_of(model)` is how long a model's call may take."""
        model = call.request.model
        timeout = timeout_of(model)
        # An interactive run cannot be parked (no worker would pick it up): its caller waits.
        longest = timeout if interactive else steps.lease_seconds / 3
        if call.through is None:  # the segment sets it when it makes the call (no copy)
            call = replace(call, through=lambda p, c: self.member(steps, p, c, timeout_of))
        waited = 0.0
        while True:
            try:
                return self._once(steps, model, provider, call, timeout, top=True)
            except Throttled as exc:
                wait = max(exc.wait, MIN_WAIT_SECONDS)
                if wait > longest or waited + wait > timeout:
                    raise
                if steps.abort.wait(wait):
                    raise Cancelled(f"run {steps.run_id} was lost while it waited") from None
                waited += wait

    def member(
        self,
        steps: Steps,
        provider: Provider,
        call: ModelCall,
        timeout_of: Callable[[str], float],
    ) -> ModelReply:
        """A `Fallback` member (`ModelCall.through`): through its model's capacity and
        circuit if it is registered under a name, never waited for (the next member may
        answer now), within the chain's deadline."""
        named = self._named.get(id(provider))
        if named is None or named[0] is not provider:
            return provider.complete(call)
        timeout = timeout_of(call.request.model)
        return self._once(steps, named[1], provider, call, timeout, top=False)

    def _once(
        self,
        steps: Steps,
        model: str,
        provider: Provider,
        call: ModelCall,
        timeout: float,
        *,
        top: bool,
    ) -> ModelReply:
        limits = self._limits.get(model)
        if limits is None:
            return self._unlimited(steps, model, provider, call, timeout, top)
        store = self._store()
        tokens = estimate_tokens(call, provider)
        # A reservation is held while its run holds its lease, and never longer than the
        # call may take plus one lease (for its end to be settled).
        hold = timeout + steps.lease_seconds
        grant = self._reserve(store, model, limits, steps.lease, tokens, hold)
        if grant.reservation is None:
            raise Throttled(model, grant.wait, circuit=grant.circuit_open)
        try:
            reply = _complete(steps, provider, call, timeout, top)
        except Exception as exc:
            _settle(store, model, grant.reservation, tokens)  # nothing was used
            wait = _requested_wait(exc)
            if wait is not None:
                self._trip(store, model, wait)
                raise Throttled(model, wait, circuit=True) from exc
            raise
        used = reply.usage.input_tokens + reply.usage.output_tokens
        _settle(store, model, grant.reservation, tokens - used)
        return reply

    def _unlimited(
        self,
        steps: Steps,
        model: str,
        provider: Provider,
        call: ModelCall,
        timeout: float,
        top: bool,
    ) -> ModelReply:
        """A model without limits: nothing is counted, but its circuit is shared."""
        closed_in = self._circuit_wait(model)
        if closed_in > 0:
            raise Throttled(model, closed_in, circuit=True)
        try:
            return _complete(steps, provider, call, timeout, top)
        except Exception as exc:
            wait = _requested_wait(exc)
            # A zero Retry-After opens nothing: the failure goes through recovery's backoff.
            if wait:
                self._trip(self._store(), model, wait)
                raise Throttled(model, wait, circuit=True) from exc
            raise

    def _circuit_wait(self, model: str) -> float:
        """Seconds until the model's circuit closes (0: closed), as last read from the store;
        read again (every model's at once) when that is older than `CIRCUIT_RECHECK_SECONDS`."""
        now = time.monotonic()
        read = self._circuits_read  # no lock on the normal path: a stale look only reads
        if read is None or now - read >= CIRCUIT_RECHECK_SECONDS:
            self._read_circuits(now)
        closes = self._circuits.get(model)
        return 0.0 if closes is None else max(closes - time.monotonic(), 0.0)

    def _read_circuits(self, now: float) -> None:
        with self._lock:
            read = self._circuits_read
            if read is not None and now - read < CIRCUIT_RECHECK_SECONDS:
                return  # another thread has just read them
            self._circuits_read = now  # the others go by what is known meanwhile
        try:
            found = self._store().open_circuits()
        except Exception as exc:  # the call itself will meet the store's trouble
            log.warning("the models' circuits could not be read: %s", exc)
            return
        with self._lock:
            # Known, not yet stored (a trip whose write failed), is kept as well.
            known = {m: t for m, t in self._circuits.items() if t > now}
            for name, seconds in found.items():
                known[name] = max(known.get(name, 0.0), now + seconds)
            self._circuits = known  # replaced whole: a reader without the lock sees one

    def _trip(self, store: Store, model: str, seconds: float) -> None:
        """A rate limit with Retry-After: the circuit opens for every worker (in the store)
        and for this process at once (in what it knows)."""
        closes = time.monotonic() + seconds
        with self._lock:
            known = dict(self._circuits)  # replaced whole: a reader without the lock sees one
            known[model] = max(known.get(model, 0.0), closes)
            self._circuits = known
        _open_circuit(store, model, seconds)

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


def _requested_wait(exc: Exception) -> float | None:
    """A rate limit's Retry-After in seconds; None for any other failure, or for a wait that
    is not a number (a provider's bug, left to failure recovery, which reports it)."""
    if classify(exc) is not FailureClass.RATE_LIMIT:
        return None
    try:
        return retry_after(exc)
    except (TypeError, ValueError):
        return None


def unused_model(name: str, limits: Limits | None, now: datetime) -> ModelState:
    """A model that has no row on this database yet (no call used its limits, its circuit
    never opened): full buckets, a closed circuit."""
    limits = Limits() if limits is None else limits
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
    steps: Steps, provider: Provider, call: ModelCall, timeout: float, top: bool
) -> ModelReply:
    if not top:  # a Fallback member runs inside its chain's deadline
        return provider.complete(call)
    # `step_deadline` without its context object (every run's model step passes here).
    steps.begin_step(timeout, f"model {call.request.model}")
    try:
        return provider.complete(call)
    finally:
        steps.step = None


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
