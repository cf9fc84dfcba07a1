"""Tools: a Python function, its declared effect, and the JSON schema the model sees.

The schema comes from the function's type hints and docstring through pydantic, and the
same pydantic model validates the model's arguments before the tool runs: invalid arguments
go back to the model as an error result and never reach the function.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from tenure._errors import InvalidRequest, UnknownTool
from tenure._types import ToolContext, ToolEffect
from tenure.providers._base import ToolSpec

DEFAULT_TOOL_TIMEOUT = 60.0


class InvalidArguments(ValueError):
    """The model's arguments do not match the tool's schema."""


@dataclass(frozen=True)
class Tool:
    name: str
    fn: Callable[..., Any]
    effect: ToolEffect
    timeout: float
    description: str
    arguments: type[BaseModel]
    takes_context: bool

    @property
    def spec(self) -> ToolSpec:
        schema = self.arguments.model_json_schema()
        schema.pop("title", None)
        return ToolSpec(self.name, self.description, schema)

    def validate(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            parsed = self.arguments.model_validate(args)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            raise InvalidArguments(f"invalid arguments for {self.name}: {problems}") from None
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}

    def invoke(self, context: ToolContext, args: dict[str, Any]) -> Any:
        values = self.validate(args)
        if self.takes_context:
            return self.fn(context, **values)
        return self.fn(**values)


def make_tool(
    fn: Callable[..., Any],
    *,
    effect: ToolEffect | str = ToolEffect.READ_ONLY,
    timeout: float = DEFAULT_TOOL_TIMEOUT,
    name: str | None = None,
) -> Tool:
    tool_name = name or getattr(fn, "__name__", "")
    if not tool_name or not tool_name.replace("_", "a").replace("-", "a").isalnum():
        raise InvalidRequest(f"invalid tool name {tool_name!r}: use letters, digits, _ and -")
    if timeout <= 0:
        raise InvalidRequest(f"tool {tool_name}: timeout must be positive, got {timeout}")
    try:
        effect = ToolEffect(effect)
    except ValueError:
        choices = ", ".join(e.value for e in ToolEffect)
        raise InvalidRequest(
            f"tool {tool_name}: unknown effect {effect!r} (one of {choices})"
        ) from None
    hints = typing.get_type_hints(fn)
    params = list(inspect.signature(fn).parameters.values())
    takes_context = bool(params) and hints.get(params[0].name) is ToolContext
    if takes_context:
        params = params[1:]
    fields: dict[str, Any] = {}
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise InvalidRequest(f"tool {tool_name}: *args and **kwargs cannot be described")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, default)
    arguments = create_model(
        f"{tool_name}_arguments",
        __config__=ConfigDict(extra="forbid"),
        **fields,
    )
    doc = inspect.getdoc(fn) or ""
    description = doc.split("\n\n")[0].strip() or tool_name
    return Tool(
        name=tool_name,
        fn=fn,
        effect=effect,
        timeout=float(timeout),
        description=description,
        arguments=arguments,
        takes_context=takes_context,
    )


class Toolbox:
    """The tools registered on a Runtime, by name."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def add(self, tool: Tool) -> None:
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
        return [self._tools[n].spec for n in names if n in self._tools]
