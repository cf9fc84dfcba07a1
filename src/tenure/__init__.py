"""tenure: durable LLM agent runs.

Leases with heartbeats, a reaper for dead workers, retries by failure class with backoff,
dead-letters with reasons, and a write fence so that a non-idempotent tool write runs at
most once, whatever crashes.
"""

from tenure import providers
from tenure._errors import (
    Cancelled,
    ChildFailed,
    DatabaseUnavailable,
    DecisionConflict,
    ForkRefused,
    InvalidRequest,
    ProviderError,
    RetryableError,
    StoreError,
    TenureError,
    ToolFailed,
    UnknownModel,
    UnknownTool,
)
from tenure._fork import ForkPlan
from tenure._limits import Limits
from tenure._types import (
    Delta,
    Event,
    EventKind,
    FailureClass,
    ForkedFrom,
    Outcome,
    Probe,
    ReapReport,
    Run,
    RunRequest,
    RunResult,
    RunStatus,
    TerminationReason,
    ToolContext,
    ToolEffect,
    Usage,
)
from tenure.agent._functions import AgentContext, ChildHandle
from tenure.providers._base import ModelReply
from tenure.providers.fallback import FallbackExhausted
from tenure.runtime import Runtime

__version__ = "0.1.0"

__all__ = [
    "AgentContext",
    "Cancelled",
    "ChildFailed",
    "ChildHandle",
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
]
