"""Failure classification (SPEC §3): which class a step's exception belongs to. Pure."""

from __future__ import annotations

import logging
import socket

from tenure._errors import DatabaseUnavailable, ProviderError
from tenure._policy import clamp_wait
from tenure._types import FailureClass


def classify(exc: BaseException) -> FailureClass:
    """The FailureClass of an exception; anything unrecognised is `unknown` (not retryable).

    Providers translate their SDK's exceptions into `ProviderError` at the source; this only
    knows tenure's own errors and the standard library's network errors.
    """
    if isinstance(exc, ProviderError):
        return exc.failure_class
    if isinstance(exc, DatabaseUnavailable):
        # The step's event was not stored, so the journal resumes before it; the write
        # path turns this into `unknown` itself (an unrecorded write is never retried).
        return FailureClass.CONNECTION
    if isinstance(exc, TimeoutError | socket.timeout):
        return FailureClass.TIMEOUT
    if isinstance(exc, ConnectionError):
        return FailureClass.CONNECTION
    return FailureClass.UNKNOWN


def retry_log_level(exc: BaseException) -> int:
    """The level of a loop's "failed, the next round retries" line: DEBUG for an outage the
    store has already told the log of, else WARNING."""
    if isinstance(exc, DatabaseUnavailable) and exc.logged:
        return logging.DEBUG
    return logging.WARNING


def retry_after(exc: BaseException) -> float | None:
    """The server's requested wait in seconds, when the failure carried one, clamped to
    `MAX_RETRY_AFTER_SECONDS` (a server's header is not ours to trust; NaN or infinity is the
    ceiling)."""
    if isinstance(exc, ProviderError) and exc.retry_after is not None:
        # A value that is not a number at all is a provider's bug: it fails recovery.
        return clamp_wait(float(exc.retry_after))
    return None


def describe(exc: BaseException) -> str:
    """A one-line description for the run row's `error` column (never raises)."""
    try:
        text = str(exc).strip()
    except Exception:  # an exception whose __str__ fails must not break recovery
        text = ""
    text = text.splitlines()[0] if text else ""
    if getattr(exc, "says_itself", False) and text:  # its text names what failed
        return text[:500]
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line[:500]
