"""Pure policies: backoff, the recovery decision, the reaper's decision, the drain."""

from __future__ import annotations

import random

import pytest

from tenure import _policy
from tenure._classify import classify, describe, retry_after
from tenure._errors import DatabaseUnavailable, ProviderError, RetryableError
from tenure._types import RETRYABLE_CLASSES, FailureClass, TerminationReason, ToolEffect

NON_IDEMPOTENT = ToolEffect.NON_IDEMPOTENT_WRITE


@pytest.mark.parametrize("n", range(8))
def test_backoff_is_jittered_within_half_to_full(n: int) -> None:
    rng = random.Random(n)
    d = min(30.0 * 2**n, 600.0)
    draws = [_policy.backoff(n, rng=rng) for _ in range(200)]
    assert all(d / 2 <= x <= d for x in draws)
    assert max(draws) - min(draws) > d / 10  # it really is jittered


def test_backoff_is_capped_and_configurable() -> None:
    assert _policy.backoff(50, base=1, cap=5, rng=random.Random(1)) <= 5
    assert 0.5 <= _policy.backoff(0, base=1, cap=5, rng=random.Random(1)) <= 1


def test_retry_after_is_a_floor_never_shortened_by_jitter() -> None:
    assert _policy.backoff(0, base=1, cap=2, retry_after=90) == 90
    assert 15 <= _policy.backoff(0, retry_after=1) <= 30  # a smaller Retry-After changes nothing


def test_recovery_order() -> None:
    # 1. a non-retryable class wins over everything
    v = _policy.recovery(FailureClass.AUTH, NON_IDEMPOTENT, 99, 3)
    assert v is not None and v.reason is TerminationReason.NOT_RETRYABLE and "auth" in v.why
    # 2. a standing non-idempotent fence, whatever the budget
    v = _policy.recovery(FailureClass.TIMEOUT, NON_IDEMPOTENT, 0, 3)
    assert v is not None and v.reason is TerminationReason.NOT_RETRYABLE
    v = _policy.recovery(FailureClass.TIMEOUT, NON_IDEMPOTENT, 3, 3)
    assert v is not None and v.reason is TerminationReason.NOT_RETRYABLE
    # 3. the budget
    v = _policy.recovery(FailureClass.TIMEOUT, ToolEffect.IDEMPOTENT_WRITE, 3, 3)
    assert v is not None and v.reason is TerminationReason.RETRIES_EXHAUSTED
    # 4. requeue
    assert _policy.recovery(FailureClass.TIMEOUT, None, 2, 3) is None
    assert _policy.recovery(FailureClass.RATE_LIMIT, ToolEffect.IDEMPOTENT_WRITE, 0, 3) is None


@pytest.mark.parametrize("cls", list(FailureClass))
def test_only_retryable_classes_are_retried(cls: FailureClass) -> None:
    requeued = _policy.recovery(cls, None, 0, 3) is None
    assert requeued == (cls in RETRYABLE_CLASSES)
    assert cls.is_retryable == (
        cls.value in {"connection", "timeout", "rate_limit", "server_error", "circuit_open"}
    )


def test_reaper_order() -> None:
    v = _policy.reap(NON_IDEMPOTENT, False, 99, 3)
    assert v is not None and v.reason is TerminationReason.NOT_RETRYABLE and "write" in v.why
    v = _policy.reap(None, False, 0, 3)
    assert v is not None and v.reason is TerminationReason.NOT_RETRYABLE
    assert "interactive" in v.why
    v = _policy.reap(ToolEffect.IDEMPOTENT_WRITE, True, 3, 3)
    assert v is not None and v.reason is TerminationReason.RETRIES_EXHAUSTED
    assert _policy.reap(ToolEffect.IDEMPOTENT_WRITE, True, 2, 3) is None
    assert _policy.reap(None, True, 0, 0) is not None  # a zero budget never requeues


def test_a_step_past_its_deadline_changes_the_reapers_words_not_its_decision() -> None:
    why = "step 3 (tool pay) ran past its deadline of 60 s"
    cases = [
        (NON_IDEMPOTENT, True, 0, False),  # dead-letter: the write may have happened
        (NON_IDEMPOTENT, True, 0, True),  # in doubt: the probe will tell
        (NON_IDEMPOTENT, True, 3, True),  # in doubt, budget spent: dead-letter
        (None, False, 0, False),  # interactive: nothing can re-execute it
        (None, True, 3, False),  # budget spent
    ]
    for effect, has_request, count, probe in cases:
        plain = _policy.reap(effect, has_request, count, 3, probe)
        said = _policy.reap(effect, has_request, count, 3, probe, step_deadline=why)
        assert type(said) is type(plain) and plain is not None and said is not None
        assert getattr(said, "reason", None) == getattr(plain, "reason", None)
        assert said.why.startswith(f"{why}, ") and "lease expired" not in said.why
        assert plain.why.startswith("lease expired")
    assert _policy.reap(None, True, 0, 3, step_deadline=why) is None  # a plain requeue


def test_drain() -> None:
    assert _policy.drain(None) is None
    assert _policy.drain(ToolEffect.IDEMPOTENT_WRITE) is None
    v = _policy.drain(NON_IDEMPOTENT)
    assert v is not None and v.reason is TerminationReason.NOT_RETRYABLE


def test_fence_lease_covers_the_tool_and_one_lease() -> None:
    assert _policy.fence_lease(900, 60) == 960


def test_classify() -> None:
    assert classify(ProviderError("auth", "401")) is FailureClass.AUTH
    assert classify(RetryableError("x")) is FailureClass.SERVER_ERROR
    assert classify(RetryableError("x", failure_class="rate_limit")) is FailureClass.RATE_LIMIT
    assert classify(TimeoutError()) is FailureClass.TIMEOUT
    assert classify(ConnectionRefusedError()) is FailureClass.CONNECTION
    assert classify(DatabaseUnavailable("locked")) is FailureClass.CONNECTION
    assert classify(KeyError("x")) is FailureClass.UNKNOWN
    assert classify(ValueError("x")) is FailureClass.UNKNOWN
    assert retry_after(ProviderError("rate_limit", "429", retry_after=3)) == 3
    assert retry_after(ValueError()) is None
    with pytest.raises(ValueError):
        ProviderError("not-a-class", "x")


def test_describe_is_one_short_line() -> None:
    text = describe(RuntimeError("first line\nsecond line"))
    assert text == "RuntimeError: first line"
    assert describe(KeyError()) == "KeyError"
    assert len(describe(RuntimeError("x" * 5000))) <= 500
