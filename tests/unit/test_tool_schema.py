"""Tool schemas: type hints and docstrings become the JSON schema the model sees, and the
model's arguments are validated against it before the tool runs."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import pytest
from pydantic import BaseModel, Field

import tenure
from tenure import EventKind, Outcome, RunRequest, ToolContext
from tenure.agent._human import validate_input
from tenure.agent._tools import (
    MALFORMED_ARGUMENTS_KEY,
    InvalidArguments,
    make_tool,
    parse_docstring,
)
from tenure.providers import ModelCall, ModelReply, ToolCall


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    """A postal address."""

    street: str
    city: str = Field(description="the city")


class Node(BaseModel):
    name: str
    children: list[Node] = []


def schema_of(fn: Callable[..., Any]) -> dict[str, Any]:
    return make_tool(fn).spec.parameters


def prop(fn: Callable[..., Any], name: str = "x") -> dict[str, Any]:
    properties: dict[str, Any] = schema_of(fn)["properties"]
    return properties[name]


# -- one test per type -----------------------------------------------------------------------


def test_str() -> None:
    def f(x: str) -> None: ...

    assert prop(f) == {"type": "string"}
    assert schema_of(f)["required"] == ["x"]


def test_int() -> None:
    def f(x: int) -> None: ...

    assert prop(f) == {"type": "integer"}


def test_float() -> None:
    def f(x: float) -> None: ...

    assert prop(f) == {"type": "number"}


def test_bool() -> None:
    def f(x: bool) -> None: ...

    assert prop(f) == {"type": "boolean"}


def test_literal() -> None:
    def f(x: Literal["fast", "slow"]) -> None: ...

    assert prop(f) == {"enum": ["fast", "slow"], "type": "string"}


def test_enum_is_inlined() -> None:
    def f(x: Color) -> None: ...

    schema = schema_of(f)
    assert prop(f) == {"enum": ["red", "blue"], "type": "string"}
    assert "$defs" not in schema


def test_list() -> None:
    def f(x: list[int]) -> None: ...

    assert prop(f) == {"items": {"type": "integer"}, "type": "array"}


def test_dict() -> None:
    def f(x: dict[str, float]) -> None: ...

    assert prop(f) == {"additionalProperties": {"type": "number"}, "type": "object"}


def test_optional_with_default() -> None:
    def f(x: Optional[str] = None) -> None: ...  # noqa: UP045 - the spelling under test

    assert prop(f) == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert "required" not in schema_of(f)


def test_union_none_without_default_is_required() -> None:
    def f(x: int | None) -> None: ...

    assert schema_of(f)["required"] == ["x"]


def test_pydantic_model_is_inlined_without_titles() -> None:
    def f(x: Address) -> None:
        """Ship.

        Args:
            x: where to
        """

    schema = schema_of(f)
    assert "$defs" not in schema
    assert prop(f) == {
        "description": "where to",
        "properties": {
            "street": {"type": "string"},
            "city": {"description": "the city", "type": "string"},
        },
        "required": ["street", "city"],
        "type": "object",
    }
    assert "title" not in json.dumps(schema)


def test_property_named_title_survives_title_stripping() -> None:
    def f(title: str) -> None: ...

    assert prop(f, "title") == {"type": "string"}


def test_recursive_model_keeps_defs() -> None:
    def f(x: Node) -> None: ...

    schema = schema_of(f)
    assert prop(f)["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
    assert set(schema["$defs"]) == {"Node"}
    assert schema["$defs"]["Node"]["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}


def test_object_schema_shape() -> None:
    def f() -> None: ...

    assert schema_of(f) == {"additionalProperties": False, "properties": {}, "type": "object"}


def test_context_parameter_is_not_in_the_schema() -> None:
    def f(ctx: ToolContext, x: int) -> None: ...

    tool = make_tool(f)
    assert tool.takes_context
    assert list(tool.spec.parameters["properties"]) == ["x"]


def test_parameter_named_like_a_basemodel_attribute() -> None:
    def f(json: str, copy: int = 1) -> None: ...

    tool = make_tool(f)
    assert list(tool.spec.parameters["properties"]) == ["json", "copy"]
    assert tool.validate({"json": "a"}) == {"json": "a", "copy": 1}


def test_to_openai_wraps_the_schema() -> None:
    def lookup(x: int) -> None:
        """Look something up."""

    wire = make_tool(lookup).spec.to_openai()
    assert wire["type"] == "function"
    assert wire["function"]["name"] == "lookup"
    assert wire["function"]["description"] == "Look something up."
    assert wire["function"]["parameters"]["properties"] == {"x": {"type": "integer"}}


# -- docstrings ------------------------------------------------------------------------------


def test_docstring_args_become_descriptions() -> None:
    def send(customer_id: str, amount_cents: int, note: str = "") -> None:
        """Send an invoice.

        The customer gets an email.

        Args:
            customer_id: The customer's id.
            amount_cents (int): Amount in cents,
                tax included.
            note: A line printed on the invoice.

        Returns:
            The invoice id.
        """

    tool = make_tool(send)
    props = tool.spec.parameters["properties"]
    assert tool.description == "Send an invoice.\n\nThe customer gets an email."
    assert props["customer_id"]["description"] == "The customer's id."
    assert props["amount_cents"]["description"] == "Amount in cents, tax included."
    assert props["note"] == {"default": "", "description": "A line printed on the invoice.",
                             "type": "string"}  # fmt: skip


def test_explicit_field_description_wins_over_the_docstring() -> None:
    def f(x: Annotated[int, Field(description="explicit")]) -> None:
        """F.

        Args:
            x: from the docstring
        """

    assert prop(f)["description"] == "explicit"


def test_parse_docstring_sections() -> None:
    text, params = parse_docstring(
        "Summary.\n\nArguments:\n    a: first\n    b: second\n      more\nRaises:\n    E: no\n"
    )
    assert text == "Summary."
    assert params == {"a": "first", "b": "second more"}


def test_tool_without_docstring_is_described_by_its_name() -> None:
    def ping() -> None: ...

    assert make_tool(ping).description == "ping"


# -- validation ------------------------------------------------------------------------------


def argued(x: int, mode: Literal["a", "b"] = "a", color: Color = Color.RED) -> None: ...


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({}, "x: Field required"),
        ({"x": "many"}, "x: Input should be a valid integer"),
        ({"x": 1, "mode": "c"}, "mode: Input should be 'a' or 'b'"),
        ({"x": 1, "color": "green"}, "color: Input should be 'red' or 'blue'"),
        ({"x": 1, "extra": True}, "extra: Extra inputs are not permitted"),
        ({MALFORMED_ARGUMENTS_KEY: '{"x": 1'}, "not a JSON object"),
    ],
)
def test_invalid_arguments_are_refused(args: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidArguments, match="invalid arguments for argued") as caught:
        make_tool(argued).validate(args)
    assert needle in str(caught.value)


def test_valid_arguments_are_converted() -> None:
    values = make_tool(argued).validate({"x": 3, "color": "blue"})
    assert values == {"x": 3, "mode": "a", "color": Color.BLUE}


def test_pydantic_model_argument_arrives_as_a_model() -> None:
    seen: list[Address] = []

    def ship(to: Address) -> None:
        seen.append(to)

    tool = make_tool(ship)
    context = ToolContext("r", 0, "r:1", 1, tenure.ToolEffect.READ_ONLY)
    tool.invoke(context, {"to": {"street": "Main St", "city": "Springfield"}})
    assert seen == [Address(street="Main St", city="Springfield")]


class Recorder:
    """A provider that calls a tool with the given arguments, then answers, and keeps
    every transcript it was shown."""

    def __init__(self, args: dict[str, Any]) -> None:
        self.args = args
        self.seen: list[list[dict[str, Any]]] = []

    def complete(self, call: ModelCall) -> ModelReply:
        self.seen.append(list(call.messages))
        if len(self.seen) == 1:
            return ModelReply(text=None, tool_calls=(ToolCall("c1", "charge", self.args),))
        return ModelReply(text="done")


@pytest.mark.parametrize(
    "args",
    [{"amount_cents": "lots"}, {}, {"amount_cents": 5, "currency": "EUR"},
     {MALFORMED_ARGUMENTS_KEY: "amount_cents=5"}],
)  # fmt: skip
def test_invalid_arguments_never_reach_the_tool(
    runtime: tenure.Runtime, args: dict[str, Any]
) -> None:
    calls: list[int] = []

    @runtime.tool(effect=tenure.ToolEffect.NON_IDEMPOTENT_WRITE)
    def charge(amount_cents: int) -> str:
        calls.append(amount_cents)
        return "charged"

    model = Recorder(args)
    runtime.add_model("m", model)
    result = runtime.run(RunRequest(prompt="charge", model="m", tools=["charge"]))

    assert result.outcome is Outcome.COMPLETED
    assert calls == []
    (tool_event,) = [e for e in runtime.events(result.run_id) if e.kind is EventKind.TOOL]
    assert tool_event.payload["result"] is None
    assert "invalid arguments for charge" in tool_event.payload["error"]
    # The model's next turn shows it the error, tied to its call.
    last = model.seen[1][-1]
    assert last["role"] == "tool"
    assert last["tool_call_id"] == "c1"
    assert "invalid arguments for charge" in json.loads(last["content"])["error"]
    run = runtime.status(result.run_id)
    assert run is not None
    assert run.pending_effect is None


class Opaque:
    """Not a type pydantic can describe."""


def test_a_parameter_type_that_cannot_be_described_is_refused() -> None:
    def f(x: Opaque) -> None: ...

    with pytest.raises(ValueError, match="tool f: its parameters cannot be described"):
        make_tool(f)


def test_a_type_hint_that_cannot_be_resolved_is_refused() -> None:
    def f(x: NoSuchType) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(ValueError, match="tool f: cannot read its type hints"):
        make_tool(f)


def test_var_arguments_are_refused() -> None:
    def f(*items: int) -> None: ...

    with pytest.raises(ValueError, match=r"\*args and \*\*kwargs"):
        make_tool(f)


def test_field_default_takes_the_docstring_description() -> None:
    default = Field(5, ge=1)

    def f(x: int = default) -> None:
        """F.

        Args:
            x: how many
        """

    assert prop(f) == {"default": 5, "description": "how many", "minimum": 1, "type": "integer"}
    assert default.description is None
    with pytest.raises(InvalidArguments, match="greater than or equal to 1"):
        make_tool(f).validate({"x": 0})


# -- a person's input: JSON Schema Draft 2020-12, through jsonschema ---------------------------

SIX_DIGITS = {
    "type": "object",
    "properties": {"code": {"type": "string", "pattern": "^[0-9]{6}$"}},
    "required": ["code"],
}
ORDER = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 5},
        "qty": {"type": "integer", "minimum": 1, "maximum": 9},
        "email": {"type": "string", "format": "email"},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "time"},
        "to": {
            "type": "object",
            "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["zip"],
        },
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    },
}


@pytest.mark.parametrize(
    ("schema", "values", "needle"),
    [
        (SIX_DIGITS, {"code": "12"}, "code: does not satisfy pattern '^[0-9]{6}$'"),
        (SIX_DIGITS, {}, "'code' is a required property"),
        (SIX_DIGITS, {"code": 123456}, "code: does not satisfy type 'string'"),
        (ORDER, {"name": "x"}, "name: does not satisfy minLength 2"),
        (ORDER, {"name": "xxxxxxx"}, "name: does not satisfy maxLength 5"),
        (ORDER, {"qty": 0}, "qty: does not satisfy minimum 1"),
        (ORDER, {"qty": 10}, "qty: does not satisfy maximum 9"),
        (ORDER, {"qty": True}, "qty: does not satisfy type 'integer'"),
        (ORDER, {"email": "no-at-sign"}, "email: does not satisfy format 'email'"),
        (ORDER, {"day": "2024-13-40"}, "day: does not satisfy format 'date'"),
        (ORDER, {"to": {}}, "to: 'zip' is a required property"),
        (ORDER, {"to": {"zip": "1"}}, "to.zip: does not satisfy pattern '^[0-9]{5}$'"),
        (ORDER, {"tags": ["a", "z"]}, "tags.1: does not satisfy enum ['a', 'b']"),
        (ORDER, {"tags": ["a", "b", "a"]}, "tags: does not satisfy maxItems 2"),
    ],
)
def test_input_is_validated_by_json_schema(
    schema: dict[str, Any], values: dict[str, Any], needle: str
) -> None:
    with pytest.raises(tenure.InvalidRequest) as caught:
        validate_input(schema, values)
    message = str(caught.value)
    assert message.startswith("invalid input: ") and needle in message
    for value in values.values():  # the rule is named, the value never
        if isinstance(value, str) and len(value) > 1:
            assert value not in message


def test_valid_input_keeps_only_declared_keys() -> None:
    values = {"name": "ada", "qty": 3, "email": "a@b.example", "day": "2024-02-29"}
    values |= {"at": "12:00:00Z"}  # RFC 3339, as Draft 2020-12 means it (not Draft 3's time)
    values |= {"to": {"zip": "12345"}, "tags": ["b"], "other": 1}
    kept = validate_input(ORDER, values)
    assert kept == {k: v for k, v in values.items() if k != "other"}
    assert validate_input(SIX_DIGITS, {"code": "123456"}) == {"code": "123456"}


@pytest.mark.parametrize(
    ("schema", "needle"),
    [
        ({"type": "object", "properties": {"a": {"type": "strng"}}}, "properties.a.type"),
        ({"type": "object", "properties": {"a": {"pattern": "("}}}, "properties.a.pattern"),
        ({"type": "object", "properties": {"a": {"minLength": -1}}}, "properties.a.minLength"),
        ({"type": "object", "properties": {"a": {}}, "required": "a"}, "required"),
        ({"type": "object", "properties": []}, "properties"),
    ],
)
def test_an_invalid_input_schema_is_refused_at_registration(
    tmp_path: Path, schema: dict[str, Any], needle: str
) -> None:
    rt = tenure.Runtime(f"sqlite:///{tmp_path / 'never-opened.db'}")
    with pytest.raises(ValueError, match="tool ask: input_schema is not a valid JSON Schema") as e:

        @rt.tool(input_schema=schema)
        def ask(a: str = "") -> None: ...

    assert needle in str(e.value)
    assert rt.tool_names == []


def test_a_stored_input_schema_that_is_invalid_is_a_clear_error() -> None:
    broken = {"type": "object", "properties": {"a": {"type": "strng"}}}
    with pytest.raises(tenure.InvalidRequest, match="input schema cannot be used"):
        validate_input(broken, {"a": "x"})
    dangling = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
    with pytest.raises(tenure.InvalidRequest, match="input schema cannot be used"):
        validate_input(dangling, {"a": "x"})


# -- a sensitive tool's arguments never appear in an error -------------------------------------

CARD = "4111 1111 1111 1111"


def pay_card(card: Annotated[str, Field(pattern=r"^[0-9 ]{19}$")], cvc: int) -> None: ...


@pytest.mark.parametrize(
    ("args", "needle", "echoed"),
    [
        ({MALFORMED_ARGUMENTS_KEY: f'{{"card": "{CARD}", "cvc": 737'}, "not a JSON object", True),
        ({"card": CARD, "cvc": "seven-3-7"}, "cvc: int_parsing", False),
        ({"card": CARD + "x", "cvc": 737}, "card: string_pattern_mismatch", False),
        ({"card": CARD, "cvc": 737, CARD: "0737"}, "?: extra_forbidden", True),
    ],
)
def test_a_sensitive_tools_argument_errors_name_the_rule_not_the_text(
    args: dict[str, Any], needle: str, echoed: bool
) -> None:
    with pytest.raises(InvalidArguments) as caught:
        make_tool(pay_card, sensitive=True).validate(args)
    message = str(caught.value)
    assert needle in message
    for part in ("4111", "1111", "737", "seven"):
        assert part not in message
    with pytest.raises(InvalidArguments) as plain:
        make_tool(pay_card).validate(args)  # not sensitive: the model is shown what it sent
    assert ("4111" in str(plain.value)) is echoed


# -- a name registers once ---------------------------------------------------------------------


def test_a_second_registration_under_a_name_is_refused(tmp_path: Path) -> None:
    rt = tenure.Runtime(f"sqlite:///{tmp_path / 'never-opened.db'}")

    def charge(amount: int) -> str:
        return "charged"

    def other(amount: int) -> str:
        return "other"

    rt.tool(effect=tenure.ToolEffect.NON_IDEMPOTENT_WRITE, timeout=5)(charge)
    # The very same function with the very same options: nothing changes, no error.
    rt.tool(effect=tenure.ToolEffect.NON_IDEMPOTENT_WRITE, timeout=5)(charge)
    with pytest.raises(ValueError, match=r"tool 'charge' is already registered.*effect"):
        rt.tool(effect=tenure.ToolEffect.READ_ONLY, timeout=5)(charge)
    with pytest.raises(ValueError, match=r"tool 'charge' is already registered.*timeout"):
        rt.tool(effect=tenure.ToolEffect.NON_IDEMPOTENT_WRITE)(charge)
    with pytest.raises(ValueError, match="differs in sensitive"):
        rt.tool(effect=tenure.ToolEffect.NON_IDEMPOTENT_WRITE, timeout=5, sensitive=True)(charge)
    with pytest.raises(ValueError, match=r"tool 'charge' is already registered.*its function"):
        rt.tool(effect=tenure.ToolEffect.NON_IDEMPOTENT_WRITE, timeout=5, name="charge")(other)
    assert rt.tool_names == ["charge"]
    assert rt.engine.tools.effect_of("charge") is tenure.ToolEffect.NON_IDEMPOTENT_WRITE


def test_a_tools_schema_is_built_once_not_at_every_model_turn() -> None:
    def lookup(order_id: str, limit: int = 3) -> str:
        """Look an order up.

        Args:
            order_id: the order's number
        """
        return order_id

    tool = make_tool(lookup)
    first = tool.spec
    assert tool.spec is first
    assert first.parameters["properties"]["order_id"]["description"] == "the order's number"
