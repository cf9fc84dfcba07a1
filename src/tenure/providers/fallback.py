"""A chain of providers tried in order (SPEC §12).

The next provider is tried only when the failure is retryable (`connection`, `timeout`,
`rate_limit`, `server_error`, `circuit_open`): another endpoint may well answer. A failure
that is not retryable (`auth`, `configuration`, `client_error`, `unknown`) says something is
wrong with the run or its setup, which another endpoint would not fix, so it is raised at once,
unchanged. When every provider failed, `FallbackExhausted` carries every attempt and is
classified (and carries `retry_after`) by the last one, so failure recovery treats the chain
as it would have treated that provider alone.

A member registered under its own name with `Limits` is called through the engine's capacity
(`ModelCall.through`, SPEC §17): one whose circuit is open, or that has no capacity now, is
skipped without being called. When no member could be called at all, the soonest one's
`Throttled` is raised, and the run is parked, uncharged, instead of failing.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence

from tenure._classify import classify, describe, retry_after
from tenure._errors import InvalidRequest, ProviderError, Throttled
from tenure.providers._base import ModelCall, ModelReply, Provider, streams

log = logging.getLogger("tenure")


class FallbackExhausted(ProviderError):
    """Every model of a chain failed; classified by the most recent attempt.

    It lives here rather than in `tenure._errors` because it classifies: the exception tree
    stays free of the classifier, which itself knows the tree.
    """

    def __init__(self, attempts: Sequence[BaseException]) -> None:
        if not attempts:
            raise ValueError("FallbackExhausted needs at least one attempt")
        last = attempts[-1]
        summary = "; ".join(f"{type(a).__name__}: {a}" for a in attempts)
        super().__init__(
            classify(last),
            f"all {len(attempts)} models failed: {summary}",
            retry_after=retry_after(last),
        )
        self.attempts = list(attempts)


class Fallback:
    """Tries each provider in order until one answers; see the module docstring."""

    def __init__(self, providers: Sequence[Provider]) -> None:
        if not providers:
            raise InvalidRequest("Fallback needs at least one provider")
        for provider in providers:
            if not callable(getattr(provider, "complete", None)):
                raise InvalidRequest(f"Fallback: {provider!r} is not a provider (no complete())")
            if inspect.iscoroutinefunction(provider.complete):
                raise InvalidRequest(
                    f"Fallback: {provider!r} is async; a chain takes synchronous providers"
                )
        self.providers: tuple[Provider, ...] = tuple(providers)

    @property
    def streams(self) -> bool:
        return any(streams(p) for p in self.providers)

    def complete(self, call: ModelCall) -> ModelReply:
        attempts: list[Exception] = []
        for index, provider in enumerate(self.providers):
            try:
                if call.through is not None:  # a model whose circuit is open is not called
                    return call.through(provider, call)
                return provider.complete(call)
            except Exception as exc:
                failure_class = classify(exc)
                if not failure_class.is_retryable:
                    raise
                attempts.append(exc)
                if index + 1 < len(self.providers):
                    log.info(
                        "run %s: model %d of %d failed (%s), trying the next: %s",
                        call.run_id,
                        index + 1,
                        len(self.providers),
                        failure_class,
                        describe(exc),
                    )
        if all(isinstance(a, Throttled) for a in attempts):
            # No model could be called at all: the run waits for the soonest, uncharged.
            raise min(attempts, key=lambda a: a.wait)  # type: ignore[attr-defined]
        raise FallbackExhausted(attempts) from attempts[-1]

    def close(self) -> None:
        """Close every provider that can be closed."""
        for provider in self.providers:
            close = getattr(provider, "close", None)
            if callable(close):
                close()

    def __repr__(self) -> str:
        return f"Fallback({list(self.providers)!r})"
