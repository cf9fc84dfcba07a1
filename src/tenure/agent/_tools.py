"""Tools: a Python function, its declared effect, and the JSON schema the model sees.

The schema comes from the function's type hints and docstring through pydantic, and the
same pydantic model validates the model's arguments before the tool runs: invalid arguments
go back to the model as an error result and never reach the function. A tool whose schema
is given as JSON (one an MCP server describes, `make_schema_tool`) is validated with
`jsonschema` against that schema instead.

An `async def` tool runs on the process's one event loop (`tenure._loop`): the slot thread
that runs the step waits for it, and past the tool's `timeout` the coroutine is cancelled.
A read's step result is then an error, as if the tool had raised; a write cut off before it
answered may have happened, so its step goes in doubt instead (`_steps.WriteInDoubt`).
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tenure import _loop
from tenure._errors import InvalidRequest, UnknownTool
from tenure._policy import check_seconds
from tenure._types import ToolContext, ToolEffect
from tenure.agent._human import Gate, make_gate
from tenure.providers._base import MALFORMED_ARGUMENTS_KEY, ToolSpec

# pydantic and jsonschema are imported where a tool is made or checked: importing tenure (and
# starting every `tenure` command) does not wait for them.
if TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic.fields import FieldInfo
    from pydantic_core import ErrorDetails

DEFAULT_TOOL_TIMEOUT = 60.0
_MAX_ECHO = 200

_PARAMETER_SECTIONS = frozenset({"args", "arguments", "parameters", "params"})
_OTHER_SECTIONS = frozenset(
    {
        "returns",
        "return",
        "yields",
        "yield",
        "raises",
        "examples",
        "example",
        "note",
        "notes",
        "see also",
        "warning",
        "warnings",
        "attributes",
        "references",
        "todo",
    }
)
_PARAMETER_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class InvalidArguments(ValueError):
    """The model's arguments do not match the tool's schema."""


@dataclass(frozen=True)
class Tool:
    name: str
    fn: Callable[..., Any]
    effect: ToolEffect
    timeout: float
    description: str
    # Exactly one of the two describes the arguments: a pydantic model built from the
    # function's signature, or a JSON schema given with the tool (`make_schema_tool`).
    arguments: type[BaseModel] | None
    takes_context: bool
    gate: Gate = field(default_factory=Gate)
    # Tells whether an interrupted write happened (SPEC §16): `probe(ctx, **args) -> Probe`.
    probe: Callable[..., Any] | None = None
    parameters: dict[str, Any] | None = None
    asynchronous: bool = False  # `fn` is a coroutine function: it runs on the loop thread

    @functools.cached_property
    def spec(self) -> ToolSpec:
        """Built once: every model turn of every run sends it, and pydantic's schema
        generation was a fifth of an agent step's own time. Shared: read it, never change
        its `parameters`."""
        if self.parameters is not None:
            return ToolSpec(self.name, self.description, self.parameters)
        assert self.arguments is not None
        return ToolSpec(self.name, self.description, openai_schema(self.arguments))

    def validate(self, args: dict[str, Any]) -> dict[str, Any]:
        """The arguments as the function's parameters take them; InvalidArguments if not.

        For a sensitive tool the error names the field and the rule it breaks, never the
        model's text: the error is stored in the tool event and shown without "reveal"."""
        from pydantic import ValidationError

        if MALFORMED_ARGUMENTS_KEY in args:
            raise InvalidArguments(
                f"invalid arguments for {self.name}: not a JSON object: "
                f"{self._echo(args[MALFORMED_ARGUMENTS_KEY])}; "
                "send the arguments as one JSON object that matches the tool's schema"
            )
        if self.parameters is not None:
            return self._validate_json(args, self.parameters)
        assert self.arguments is not None
        try:
            parsed = self.arguments.model_validate(args)
        except ValidationError as exc:
            problems = "; ".join(self._problem(e) for e in exc.errors())
            raise InvalidArguments(f"invalid arguments for {self.name}: {problems}") from None
        return {
            info.alias or field: getattr(parsed, field)
            for field, info in type(parsed).model_fields.items()
        }

    def _validate_json(self, args: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
        from jsonschema import Draft202012Validator

        problems = sorted(
            Draft202012Validator(schema).iter_errors(args), key=lambda e: list(e.path)
        )
        if problems:
            described = "; ".join(
                f"{'.'.join(str(p) for p in e.path) or 'arguments'}: "
                + (e.validator if self.gate.sensitive else e.message)
                for e in problems
            )
            raise InvalidArguments(f"invalid arguments for {self.name}: {described}")
        return dict(args)

    def _echo(self, raw: Any) -> str:
        if self.gate.sensitive:
            return "(its text is not shown: the tool is sensitive)"
        text = str(raw)
        return repr(text if len(text) <= _MAX_ECHO else text[:_MAX_ECHO] + "…")

    def _problem(self, error: ErrorDetails) -> str:
        if not self.gate.sensitive:
            where = ".".join(str(p) for p in error["loc"]) or "arguments"
            return f"{where}: {error['msg']}"
        # pydantic's message and a location's dict keys can quote the model's text; the
        # error type and the schema's own names cannot.
        assert self.arguments is not None
        names = _property_names(self.arguments.model_json_schema())
        parts = [str(p) if isinstance(p, int) or p in names else "?" for p in error["loc"]]
        return f"{'.'.join(parts) or 'arguments'}: {error['type']}"

    def invoke(self, context: ToolContext, args: dict[str, Any]) -> Any:
        return self.call(context, self.validate(args))

    def call(self, context: ToolContext, values: dict[str, Any]) -> Any:
        """The function on validated values (an async one on the loop, within its timeout)."""
        result = self.fn(context, **values) if self.takes_context else self.fn(**values)
        if not self.asynchronous:
            return result
        return _loop.run(result, timeout=self.timeout, what=f"tool {self.name!r}")


def make_tool(
    fn: Callable[..., Any],
    *,
    effect: ToolEffect | str = ToolEffect.READ_ONLY,
    timeout: float = DEFAULT_TOOL_TIMEOUT,
    name: str | None = None,
    requires_approval: bool = False,
    input_schema: type[BaseModel] | dict[str, Any] | None = None,
    sensitive: bool = False,
    approval_timeout: float | None = None,
    probe: Callable[..., Any] | None = None,
) -> Tool:
    from pydantic import (
        ConfigDict,
        PydanticSchemaGenerationError,
        PydanticUserError,
        create_model,
    )

    tool_name = _check_name(name or getattr(fn, "__name__", ""))
    timeout = check_seconds(f"tool {tool_name}: timeout", timeout)
    effect = _effect(tool_name, effect)
    _check_probe(tool_name, effect, probe)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise InvalidRequest(f"tool {tool_name}: cannot read its type hints: {exc}") from None
    params = list(inspect.signature(fn).parameters.values())
    takes_context = bool(params) and hints.get(params[0].name) is ToolContext
    if takes_context:
        params = params[1:]
    description, documented = parse_docstring(inspect.getdoc(fn) or "")
    fields: dict[str, Any] = {}
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise InvalidRequest(f"tool {tool_name}: *args and **kwargs cannot be described")
        fields[_field_name(param.name)] = _field(param, hints, documented.get(param.name))
    try:
        arguments = create_model(
            f"{tool_name}_arguments",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
        arguments.model_json_schema()
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError) as exc:
        raise InvalidRequest(
            f"tool {tool_name}: its parameters cannot be described: {exc}"
        ) from None
    return Tool(
        name=tool_name,
        fn=fn,
        effect=effect,
        timeout=float(timeout),
        description=description or tool_name,
        arguments=arguments,
        takes_context=takes_context,
        asynchronous=inspect.iscoroutinefunction(fn),
        gate=make_gate(
            tool_name,
            requires_approval=requires_approval,
            input_schema=input_schema,
            sensitive=sensitive,
            approval_timeout=approval_timeout,
        ),
        probe=probe,
    )


def _check_probe(name: str, effect: ToolEffect, probe: Callable[..., Any] | None) -> None:
    if probe is None:
        return
    if effect is not ToolEffect.NON_IDEMPOTENT_WRITE:
        raise InvalidRequest(
            f"tool {name}: a probe tells whether an interrupted non-idempotent write happened;"
            f" this tool is {effect}"
        )
    if not callable(probe):
        raise InvalidRequest(f"tool {name}: probe must be callable, got {probe!r}")


def _check_name(name: Any, what: str = "tool") -> str:
    if not isinstance(name, str) or not name.replace("_", "a").replace("-", "a").isalnum():
        raise InvalidRequest(f"invalid {what} name {name!r}: use letters, digits, _ and -")
    return name


def _effect(tool_name: str, effect: ToolEffect | str) -> ToolEffect:
    try:
        return ToolEffect(effect)
    except ValueError:
        choices = ", ".join(e.value for e in ToolEffect)
        raise InvalidRequest(
            f"tool {tool_name}: unknown effect {effect!r} (one of {choices})"
        ) from None


def make_schema_tool(
    fn: Callable[..., Any],
    *,
    name: str,
    description: str,
    parameters: dict[str, Any],
    effect: ToolEffect | str,
    timeout: float = DEFAULT_TOOL_TIMEOUT,
) -> Tool:
    """A tool whose arguments a JSON schema describes; `fn(context, **arguments)` runs it.

    For tools described elsewhere (an MCP server's `inputSchema`): the schema is shown to
    the model as given and validates the model's arguments with `jsonschema`.
    """
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    _check_name(name)
    timeout = check_seconds(f"tool {name}: timeout", timeout)
    effect = _effect(name, effect)
    if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
        raise InvalidRequest(f"tool {name}: its parameters must be an object JSON schema")
    try:
        Draft202012Validator.check_schema(parameters)
    except SchemaError as exc:
        raise InvalidRequest(f"tool {name}: invalid JSON schema: {exc.message}") from None
    schema = {"type": "object", "properties": {}, **parameters}
    return Tool(
        name=name,
        fn=fn,
        effect=effect,
        timeout=float(timeout),
        description=description or name,
        arguments=None,
        takes_context=True,
        parameters=schema,
        asynchronous=inspect.iscoroutinefunction(fn),
    )


def _field_name(name: str) -> str:
    from pydantic import BaseModel

    # pydantic reserves `_names` and warns about names that shadow BaseModel's own
    # attributes (`json`, `copy`, `schema` …): such a parameter gets another field name
    # and keeps its own as the alias, which is what the model sees and sends.
    if name.startswith("_") or hasattr(BaseModel, name):
        return f"param_{name.lstrip('_')}_{len(name)}"
    return name


def _field(param: inspect.Parameter, hints: dict[str, Any], doc: str | None) -> tuple[Any, Any]:
    from pydantic import Field
    from pydantic.fields import FieldInfo

    annotation = hints.get(param.name, Any)
    if _described(annotation):
        doc = None  # an explicit `Annotated[..., Field(description=...)]` wins
    default = param.default
    alias = param.name if _field_name(param.name) != param.name else None
    if isinstance(default, FieldInfo):
        # pydantic merges metadata from `Annotated` with the default's own settings, which
        # win; the function's default object itself is left untouched.
        extra: dict[str, Any] = {}
        if alias:
            extra["alias"] = alias
        if doc and not default.description:
            extra["description"] = doc
        if extra:
            annotation = typing.Annotated[annotation, Field(**extra)]
        return annotation, default
    if not doc and not alias:
        return annotation, (... if default is param.empty else default)
    info: FieldInfo = Field(
        ... if default is param.empty else default,
        alias=alias,
        description=doc or None,
    )
    return annotation, info


def _described(annotation: Any) -> bool:
    from pydantic.fields import FieldInfo

    if typing.get_origin(annotation) is not typing.Annotated:
        return False
    return any(isinstance(m, FieldInfo) and m.description for m in annotation.__metadata__)


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """A Google-style docstring: (the text before its sections, {parameter: description})."""
    text: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    param_indent: int | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        heading = stripped[:-1].strip().lower() if stripped.endswith(":") else None
        if indent == 0 and heading in _PARAMETER_SECTIONS | _OTHER_SECTIONS:
            section, current, param_indent = heading, None, None
            continue
        if section is not None and stripped and indent == 0:
            section = None  # text back at the margin closes the section
        if section is None:
            text.append(line)
            continue
        if section not in _PARAMETER_SECTIONS or not stripped:
            continue
        match = _PARAMETER_LINE.match(stripped)
        if match and (param_indent is None or indent <= param_indent):
            current, param_indent = match.group(1), indent
            params[current] = match.group(2).strip()
        elif current is not None:
            params[current] = f"{params[current]} {stripped}".strip()
    return "\n".join(text).strip(), {k: v for k, v in params.items() if v}


def openai_schema(arguments: type[BaseModel]) -> dict[str, Any]:
    """The arguments' JSON schema as chat-completion endpoints take it.

    pydantic puts nested models and enums under `$defs` and points at them with `$ref`
    (with the field's description beside the `$ref`). OpenAI takes that, but several
    compatible servers that compile schemas into grammars (llama.cpp, Ollama) do not follow
    references reliably, so each reference is inlined; only a model that contains itself
    keeps a `$defs` entry, since it cannot be inlined. Titles are dropped: the model reads
    names and descriptions, and titles only cost tokens.
    """
    schema = arguments.model_json_schema()
    inliner = _Inliner(schema.pop("$defs", {}))
    result: dict[str, Any] = inliner.resolve(schema, frozenset())
    result.setdefault("type", "object")
    result.setdefault("properties", {})
    if inliner.kept:
        result["$defs"] = inliner.kept
    return result


class _Inliner:
    """Inlines `$ref`s to `$defs` entries; `active` holds the definitions being expanded."""

    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs
        self.kept: dict[str, Any] = {}

    def resolve(self, node: Any, active: frozenset[str]) -> Any:
        if isinstance(node, list):
            return [self.resolve(item, active) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return self._reference(node, ref, active)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "title" and isinstance(value, str):
                continue
            if key == "properties" and isinstance(value, dict):
                out[key] = {prop: self.resolve(sub, active) for prop, sub in value.items()}
            else:
                out[key] = self.resolve(value, active)
        return out

    def _reference(self, node: dict[str, Any], ref: str, active: frozenset[str]) -> Any:
        name = ref.removeprefix("#/$defs/")
        siblings = {
            k: self.resolve(v, active) for k, v in node.items() if k not in ("$ref", "title")
        }
        if name in active or name not in self.defs:
            if name in self.defs and name not in self.kept:
                self.kept[name] = {}  # claimed before resolving, so recursion stops here
                self.kept[name] = self.resolve(self.defs[name], frozenset({name}))
            return {"$ref": ref, **siblings}
        return {**self.resolve(self.defs[name], active | {name}), **siblings}


def _differences(known: Tool, new: Tool) -> list[str]:
    """What a second registration would change, in the words of `Runtime.tool`."""
    if known.fn is not new.fn:
        return ["its function"]
    gate_a, gate_b = known.gate, new.gate
    pairs = {
        "effect": (known.effect, new.effect),
        "timeout": (known.timeout, new.timeout),
        "requires_approval": (gate_a.requires_approval, gate_b.requires_approval),
        "input_schema": (
            gate_a.input_model or gate_a.input_schema,
            gate_b.input_model or gate_b.input_schema,
        ),
        "sensitive": (gate_a.sensitive, gate_b.sensitive),
        "approval_timeout": (gate_a.approval_timeout, gate_b.approval_timeout),
        "probe": (known.probe, new.probe),
    }
    return [name for name, (a, b) in pairs.items() if a != b]


def _property_names(schema: Any) -> set[str]:
    """Every property name declared anywhere in a JSON schema."""
    if isinstance(schema, list):
        return set().union(*(_property_names(item) for item in schema))
    if not isinstance(schema, dict):
        return set()
    names: set[str] = set()
    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):
            names.update(value)
        names |= _property_names(value)
    return names


class Toolbox:
    """The tools registered on a Runtime, by name."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def add(self, tool: Tool) -> None:
        """Register a tool; a name registers once (again only as the very same tool), so
        that a second registration can never quietly change a tool's effect or fence."""
        known = self._tools.get(tool.name)
        if known is not None:
            different = _differences(known, tool)
            if different:
                raise InvalidRequest(
                    f"tool {tool.name!r} is already registered; a second registration under "
                    f"that name differs in {', '.join(different)} (use another name=)"
                )
            return
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def effect_of(self, name: str) -> ToolEffect:
        """A name that resolves to no tool is treated as a non-idempotent write (fail-closed)."""
        tool = self._tools.get(name)
        return tool.effect if tool else ToolEffect.NON_IDEMPOTENT_WRITE

    def check(self, names: Iterable[str]) -> None:
        for name in names:
            if name not in self._tools:
                raise UnknownTool(name)

    def specs(self, names: Iterable[str]) -> list[ToolSpec]:
        if not names:  # a run without tools (an empty tuple, usually)
            return []
        return [self._tools[n].spec for n in names if n in self._tools]
