"""The public names of SPEC §9 and §14, pinned."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import tenure

EXPECTED = {
    "AgentContext",
    "ChildFailed",
    "ChildHandle",
    "Cancelled",
    "DatabaseUnavailable",
    "DecisionConflict",
    "Delta",
    "Event",
    "EventKind",
    "FailureClass",
    "FallbackExhausted",
    "ForkPlan",
    "ForkRefused",
    "ForkedFrom",
    "InvalidRequest",
    "Limits",
    "ModelReply",
    "Outcome",
    "Probe",
    "ProviderError",
    "ReapReport",
    "RetryableError",
    "Run",
    "RunRequest",
    "RunResult",
    "RunStatus",
    "Runtime",
    "StoreError",
    "TenureError",
    "TerminationReason",
    "ToolContext",
    "ToolEffect",
    "ToolFailed",
    "UnknownModel",
    "UnknownTool",
    "Usage",
    "__version__",
    "providers",
}


# Subpackages that `import tenure` loads; a public name that is neither one of these nor in
# `__all__` fails the test below (as httpx pins its namespace).
SUBMODULES = {"agent", "providers", "runtime", "store"}


def test_the_namespace_holds_nothing_unlisted() -> None:
    import subprocess
    import sys

    # A fresh interpreter: other tests import more of tenure (cli, web) into this one.
    code = "import tenure; print(' '.join(n for n in vars(tenure) if not n.startswith('_')))"
    names = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               check=True).stdout.split())  # fmt: skip
    assert names - set(tenure.__all__) <= SUBMODULES, names - set(tenure.__all__) - SUBMODULES
    assert set(tenure.__all__) <= names | {"__version__"}


def test_all_is_pinned() -> None:
    assert set(tenure.__all__) == EXPECTED
    for name in tenure.__all__:
        assert hasattr(tenure, name), name


def test_enum_values_are_the_specs() -> None:
    assert [s.value for s in tenure.RunStatus] == [
        "queued", "running", "waiting_for_approval", "waiting_for_input",
        "waiting_for_children", "completed", "failed", "cancelled",
    ]  # fmt: skip
    assert [r.value for r in tenure.TerminationReason] == [
        "completed", "max_iterations", "budget_exhausted", "policy_denied", "approval_denied",
        "provider_failed", "cancelled", "retries_exhausted", "not_retryable",
    ]  # fmt: skip
    assert [o.value for o in tenure.Outcome] == [
        "completed", "failed", "cancelled", "requeued", "lease_lost",
        "awaiting_approval", "awaiting_input", "sleeping", "awaiting_children",
    ]  # fmt: skip
    assert [c.value for c in tenure.FailureClass] == [
        "connection", "timeout", "rate_limit", "auth", "configuration", "client_error",
        "server_error", "circuit_open", "unknown",
    ]  # fmt: skip
    assert [e.value for e in tenure.ToolEffect] == [
        "read_only", "idempotent_write", "non_idempotent_write",
    ]  # fmt: skip
    assert tenure.ToolEffect.NON_IDEMPOTENT_WRITE == "non_idempotent_write"
    for enum in (tenure.RunStatus, tenure.TerminationReason, tenure.Outcome, tenure.ToolEffect):
        for member in enum:
            assert member.name == member.value.upper()


def test_runtime_methods() -> None:
    for name in (
        "tool", "agent", "agents", "add_model", "enqueue", "run", "run_queued", "work", "cancel",
        "status",
        "events", "runs", "reap", "redrive", "purge", "close", "__enter__", "__exit__",
        "stream",
        # SPEC §22
        "set_concurrency_limit", "concurrency_keys", "schedule", "schedules",
        "pause_schedule", "resume_schedule", "delete_schedule", "fire_schedules",
    ):  # fmt: skip
        assert callable(getattr(tenure.Runtime, name)), name
    assert list(inspect.signature(tenure.Runtime.work).parameters)[1:4] == [
        "concurrency", "queues", "burst",
    ]  # fmt: skip
    params = inspect.signature(tenure.Runtime).parameters
    for name in ("lease_seconds", "max_requeues", "backoff_base", "backoff_cap"):
        assert name in params


def test_records_are_frozen_dataclasses_with_the_spec_fields() -> None:
    run_fields = [f.name for f in dataclasses.fields(tenure.Run)]
    assert run_fields == [
        "id", "queue", "status", "termination_reason", "request", "idempotency_key",
        "claimed_by", "lease_expires", "lease_token", "requeue_count", "available_at",
        "pending_effect", "attempt", "error_class", "error", "output", "input_tokens",
        "output_tokens", "cost", "created_at", "started_at", "finished_at", "updated_at",
        "waiting", "wait_deadline", "fence_probe", "forked_from", "parent_id", "root_id",
        "priority", "concurrency_key",  # SPEC §22
        "damaged",
    ]  # fmt: skip
    assert [f.name for f in dataclasses.fields(tenure.Event)] == [
        "run_id", "sequence", "attempt", "kind", "payload", "created_at", "lease_token",
        "damaged",
    ]  # fmt: skip
    assert [f.name for f in dataclasses.fields(tenure.RunResult)] == [
        "outcome", "run_id", "output", "steps", "error", "usage",
    ]  # fmt: skip
    assert [f.name for f in dataclasses.fields(tenure.ToolContext)] == [
        "run_id", "attempt", "idempotency_key", "fencing_token", "effect",
        "abort",  # SPEC §15: what `cancelled` and `raise_if_cancelled()` read
    ]  # fmt: skip
    assert callable(tenure.ToolContext.raise_if_cancelled)
    assert isinstance(tenure.ToolContext.cancelled, property)
    # SPEC §18: what `Runtime.stream` yields between events.
    assert [f.name for f in dataclasses.fields(tenure.Delta)] == ["sequence", "text"]
    for cls in (
        tenure.Run, tenure.Event, tenure.RunResult, tenure.ReapReport, tenure.ToolContext,
        tenure.Delta,
    ):  # fmt: skip
        assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_errors_form_the_documented_tree() -> None:
    assert issubclass(tenure.InvalidRequest, ValueError)
    assert issubclass(tenure.UnknownTool, tenure.InvalidRequest)
    assert issubclass(tenure.UnknownModel, tenure.InvalidRequest)
    assert issubclass(tenure.RetryableError, tenure.ProviderError)
    assert issubclass(tenure.FallbackExhausted, tenure.ProviderError)
    assert issubclass(tenure.DatabaseUnavailable, tenure.StoreError)
    for cls in (tenure.InvalidRequest, tenure.ProviderError, tenure.StoreError):
        assert issubclass(cls, tenure.TenureError)


def test_scripted_takes_no_arguments() -> None:
    tenure.providers.Scripted()


def test_runtime_is_a_context_manager(tmp_path: object) -> None:
    with tenure.Runtime(f"sqlite:///{tmp_path}/x.db") as rt:
        assert rt.runs() == []


@pytest.mark.parametrize(
    ("url", "path"),
    [("sqlite:///relative.db", "relative.db"), ("sqlite:////abs/path.db", "/abs/path.db")],
)
def test_sqlite_urls_follow_the_sqlalchemy_convention(url: str, path: str) -> None:
    from tenure.store.sqlite import parse_url

    assert parse_url(url)[0] == path
