"""Human in the loop: tools that wait for an approval or for typed input.

A tool may require a person's approval before it runs, or values only a person knows (its
`input_schema`). When the model calls such a tool, the whole turn is held before any of its
calls runs; the run waits without a lease and continues on any worker once decided.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tenure._errors import InvalidRequest
from tenure._policy import check_seconds
from tenure._types import RunStatus, ToolEffect
from tenure.agent._journal import Journal, PendingCall

# jsonschema and pydantic are imported where a schema is checked: importing tenure (and
# starting every `tenure` command) does not wait for them.
if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError as SchemaViolation
    from pydantic import BaseModel

    from tenure.agent._tools import Tool

# Keywords whose value is short enough to quote in an error; the rest are named only.
_QUOTED_RULES = frozenset(
    {
        "type",
        "enum",
        "const",
        "format",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
    }
)


@dataclass(frozen=True)
class Gate:
    """What a tool needs from a person before it runs."""

    requires_approval: bool = False
    input_schema: dict[str, Any] | None = None
    input_model: type[BaseModel] | None = None
    sensitive: bool = False
    approval_timeout: float | None = None

    @property
    def wants_input(self) -> bool:
        return self.input_schema is not None


def make_gate(
    tool_name: str,
    *,
    requires_approval: bool,
    input_schema: type[BaseModel] | dict[str, Any] | None,
    sensitive: bool,
    approval_timeout: float | None,
) -> Gate:
    if requires_approval and input_schema is not None:
        raise InvalidRequest(
            f"tool {tool_name}: a tool either requires approval or asks for input, not both"
        )
    if approval_timeout is not None:
        approval_timeout = check_seconds(f"tool {tool_name}: approval_timeout", approval_timeout)
    model: type[BaseModel] | None = None
    schema: dict[str, Any] | None = None
    if isinstance(input_schema, type) and issubclass(input_schema, _base_model()):
        model = input_schema
        schema = input_schema.model_json_schema()
    elif isinstance(input_schema, dict):
        schema = input_schema
    elif input_schema is not None:
        raise InvalidRequest(
            f"tool {tool_name}: input_schema must be a pydantic model or a JSON schema dict"
        )
    if schema is not None:
        _check_schema(tool_name, schema)
    return Gate(requires_approval, schema, model, sensitive, approval_timeout)


def _check_schema(tool_name: str, schema: dict[str, Any]) -> None:
    """Refuse a schema that is not valid JSON Schema, or that accepts anything: a person's
    input must have a declared shape."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = _where(exc.absolute_path, "input_schema")
        raise InvalidRequest(
            f"tool {tool_name}: input_schema is not a valid JSON Schema (Draft 2020-12): "
            f"{where}: {exc.message}"
        ) from None
    properties = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(properties, dict) or not properties:
        raise InvalidRequest(
            f"tool {tool_name}: input_schema must be an object schema that declares its "
            "properties (a schema that accepts anything is refused)"
        )


def declared_keys(schema: dict[str, Any]) -> set[str]:
    return set(schema.get("properties", {}))


def validate_input(
    schema: dict[str, Any], values: Any, model: type[BaseModel] | None = None
) -> dict[str, Any]:
    """The submitted values restricted to the schema's declared keys; InvalidRequest if bad.

    An error names the field and the rule it breaks, never the value: a person's input
    may be a secret, and the error text travels to logs and pages."""
    if not isinstance(values, dict):
        raise InvalidRequest("input values must be a JSON object")
    keys = declared_keys(schema)
    kept: dict[str, Any] = {k: v for k, v in values.items() if k in keys}
    if model is not None:
        from pydantic import ValidationError

        try:
            model.model_validate(kept)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise InvalidRequest(
                f"invalid input: {_where(first['loc'], 'input')}: {first['type']}"
            ) from None
        return kept
    problem = _first_violation(schema, kept)
    if problem is not None:
        raise InvalidRequest(f"invalid input: {problem}")
    return kept


def _first_violation(schema: dict[str, Any], values: dict[str, Any]) -> str | None:
    # The schema comes from the run's stored waiting state: it was checked when its tool
    # was registered, but a stored row is checked again rather than trusted.
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError, best_match
    from referencing.exceptions import Unresolvable

    try:
        Draft202012Validator.check_schema(schema)
        # The draft's own checker: a bare FormatChecker() mixes in Draft 3's `time`, which
        # refuses RFC 3339 times such as "12:00:00Z".
        validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
        error = best_match(validator.iter_errors(values))
    except (SchemaError, Unresolvable) as exc:
        raise InvalidRequest(f"the run's input schema cannot be used: {exc}") from None
    if error is None:
        return None
    if error.validator == "required" and not error.absolute_path:
        return str(error.message)  # names the missing property, from the schema itself
    return f"{_where(error.absolute_path, 'input')}: {_rule(error)}"


def _rule(error: SchemaViolation) -> str:
    if error.validator == "required":
        return str(error.message)
    if error.validator in _QUOTED_RULES:
        return f"does not satisfy {error.validator} {error.validator_value!r}"
    return f"does not satisfy {error.validator}"


def _base_model() -> type[BaseModel]:
    from pydantic import BaseModel

    return BaseModel


def _where(path: Any, whole: str) -> str:
    return ".".join(str(p) for p in path) or whole


# -- the gate: whether a model turn waits for a person (pure decisions) --------------------


@dataclass(frozen=True)
class Hold:
    """A model turn held for a person, before any of its calls runs."""

    status: RunStatus
    turn: int  # the sequence of the `llm` event that made the calls
    calls: list[dict[str, Any]]  # what the waiting record shows of each call

    @property
    def kind(self) -> str:
        return "approval" if self.status is RunStatus.WAITING_FOR_APPROVAL else "input"

    @property
    def timeout(self) -> float | None:
        """The shortest approval timeout any of its tools declares."""
        timeouts = [c["approval_timeout"] for c in self.calls if c["approval_timeout"]]
        return min(timeouts) if timeouts else None


def needs_approval(tool: Tool | None, approve_writes: bool) -> bool:
    if tool is None:
        return False
    return tool.gate.requires_approval or (approve_writes and tool.effect.is_write)


def decided_values(decision: str | None, turn: int) -> dict[str, Any] | None:
    """A person's submitted values for `turn`, from the raw decision the run continues with."""
    parsed = json.loads(decision) if decision else None
    if isinstance(parsed, dict) and parsed.get("turn") == turn:
        values = parsed.get("values")
        return values if isinstance(values, dict) else None
    return None


def _kind(tool: Tool | None, approve_writes: bool) -> str:
    if needs_approval(tool, approve_writes):
        return "approval"
    return "input" if tool is not None and tool.gate.wants_input else "none"


def hold(
    journal: Journal,
    tools: Sequence[Tool | None],
    decision: str | None,
    *,
    approve_writes: bool,
) -> Hold | None:
    """Whether the pending turn waits for a person: the whole turn, before any call runs.
    `tools` are the pending calls' tools (None: not available to the run)."""
    if not journal.pending:
        return None
    turn = journal.pending[0].llm_sequence
    kinds = [_kind(t, approve_writes) for t in tools]
    if "approval" in kinds and turn not in journal.approvals:
        status = RunStatus.WAITING_FOR_APPROVAL
    elif "input" in kinds and (
        turn not in journal.inputs or decided_values(decision, turn) is None
    ):
        status = RunStatus.WAITING_FOR_INPUT
    else:
        return None
    calls = [
        _held_call(p, t, kind) for p, t, kind in zip(journal.pending, tools, kinds, strict=True)
    ]
    return Hold(status, turn, calls)


def _held_call(pending: PendingCall, tool: Tool | None, kind: str) -> dict[str, Any]:
    return {
        "call_id": pending.call.id,
        "tool": pending.call.name,
        "effect": str(tool.effect if tool else ToolEffect.NON_IDEMPOTENT_WRITE),
        "args": pending.call.args,
        "kind": kind,
        "sensitive": bool(tool and tool.gate.sensitive),
        "input_schema": tool.gate.input_schema if tool and kind == "input" else None,
        "approval_timeout": tool.gate.approval_timeout if tool else None,
    }


def refusal(
    journal: Journal, pending: PendingCall, tool: Tool | None, approve_writes: bool
) -> str | None:
    """A denied approval goes back to the model as the call's result."""
    if not needs_approval(tool, approve_writes):
        return None
    decision = journal.approvals.get(pending.llm_sequence, {})
    if decision.get("approved"):
        return None
    who = decision.get("decided_by", "a person")
    note = decision.get("note")
    return f"denied by {who}" + (f": {note}" if note else "")


def with_input(pending: PendingCall, tool: Tool, decision: str | None) -> dict[str, Any]:
    """The model's arguments overlaid with a person's values (declared keys only)."""
    if not tool.gate.wants_input:
        return pending.call.args
    values = decided_values(decision, pending.llm_sequence) or {}
    return {**pending.call.args, **values}
