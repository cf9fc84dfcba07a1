"""Human in the loop: tools that wait for an approval or for typed input.

A tool may require a person's approval before it runs, or values only a person knows (its
`input_schema`). When the model calls such a tool, the whole turn is held before any of its
calls runs; the run waits without a lease and continues on any worker once decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from tenure._errors import InvalidRequest
from tenure._policy import check_seconds

_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "array": list,
    "object": dict,
}


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
    if isinstance(input_schema, type) and issubclass(input_schema, BaseModel):
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
    """Refuse a schema that accepts anything: a person's input must have a declared shape."""
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
    """The submitted values restricted to the schema's declared keys; InvalidRequest if bad."""
    if not isinstance(values, dict):
        raise InvalidRequest("input values must be a JSON object")
    keys = declared_keys(schema)
    kept: dict[str, Any] = {k: v for k, v in values.items() if k in keys}
    if model is not None:
        try:
            model.model_validate(kept)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "input"
            raise InvalidRequest(f"invalid input: {where}: {first['msg']}") from None
        return kept
    for name in schema.get("required", []):
        if name not in kept:
            raise InvalidRequest(f"invalid input: {name}: field required")
    for name, value in kept.items():
        _check_value(name, schema["properties"][name], value)
    return kept


def _check_value(name: str, spec: dict[str, Any], value: Any) -> None:
    if "enum" in spec and value not in spec["enum"]:
        raise InvalidRequest(f"invalid input: {name}: must be one of {spec['enum']}")
    kind = spec.get("type")
    if kind is None:
        return
    expected = _JSON_TYPES.get(kind)
    bad_bool = kind in ("integer", "number") and isinstance(value, bool)
    if expected is not None and (bad_bool or not isinstance(value, expected)):
        raise InvalidRequest(f"invalid input: {name}: expected {kind}")
