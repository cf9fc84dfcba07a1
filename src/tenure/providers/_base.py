"""What a model provider is: one method that turns a transcript into the model's next turn."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tenure._types import RunRequest, Usage, direct_init

# A provider that received tool-call arguments that are not a JSON object hands the raw text
# on under this key, so that validation tells the model what went wrong (and the step goes
# on) instead of the provider failing the step.
MALFORMED_ARGUMENTS_KEY = "__tenure_malformed_arguments__"


@dataclass(frozen=True)
class Price:
    """USD per million tokens, for input (prompt) and output (completion) tokens."""

    input: float
    output: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000

    @classmethod
    def of(cls, value: Price | tuple[float, float]) -> Price:
        """A `Price`, or an `(input, output)` pair made into one."""
        if isinstance(value, Price):
            return value
        input_price, output_price = value
        return cls(float(input_price), float(output_price))


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it: name, description and a JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    args: dict[str, Any]


@direct_init
@dataclass(frozen=True)
class ModelReply:
    """The model's turn: a final answer (`text`, no calls) or tool calls."""

    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str = ""

    def message(self) -> dict[str, Any]:
        """The turn as an assistant message of the chat-completions format (journal form)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": json.dumps(call.args, separators=(",", ":")),
                    },
                }
                for call in self.tool_calls
            ]
        return message


@dataclass(frozen=True)
class ModelCall:
    """Everything a provider may use to produce the next turn of a run."""

    messages: list[dict[str, Any]]
    tools: list[ToolSpec]
    run_id: str
    attempt: int
    request: RunRequest
    # A streaming provider hands it each piece of answer text as it arrives.
    on_delta: Callable[[str], None] | None = None
    # Set when the segment lost its run mid-call: a provider stops waiting and raises
    # `tenure.Cancelled` (an HTTP provider closes its request).
    abort: threading.Event | None = None
    # How a provider that calls other providers (`Fallback`) calls one of them: through the
    # engine's capacity (SPEC §17), which skips a model whose circuit is open without
    # calling it. None: call the provider directly.
    through: Callable[[Provider, ModelCall], ModelReply] | None = None
    # How long the engine lets the call take: the model's `timeout` (SPEC §15). A provider
    # that waits on the event loop gives up after it. None: the provider's own timeout.
    timeout: float | None = None
    # An agent function's call (SPEC §20): how many model steps the run took before this one,
    # and the options its code passed (`ctx.model(..., temperature=0)`).
    turn: int | None = None
    options: dict[str, Any] = field(default_factory=dict)


_CALL_DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(ModelCall) if f.default is not dataclasses.MISSING
}


def new_call(**values: Any) -> ModelCall:
    """`ModelCall(**values)` without the frozen dataclass's `__init__` (an
    `object.__setattr__` per field, eleven of them, at every model step of every run): the
    same object, its defaults and a fresh `options` dict as the constructor gives."""
    call: ModelCall = object.__new__(ModelCall)
    fields = call.__dict__
    fields.update(_CALL_DEFAULTS)
    fields["options"] = {}
    fields.update(values)
    return call


class Provider(Protocol):
    def complete(self, call: ModelCall) -> ModelReply:
        """The next turn. Raise `tenure.ProviderError` (classified) when the call fails."""
        ...


def streams(provider: Provider) -> bool:
    """Whether a provider may hand its answer text to `ModelCall.on_delta` as it arrives.
    One that says `streams = False` costs a call no publisher at all; one that says nothing
    is taken to stream."""
    return bool(getattr(provider, "streams", True))


class AsyncProvider(Protocol):
    """A provider whose `complete` is a coroutine function: it is awaited on the process's
    event loop, cancelled when the run is lost (`tenure.Cancelled`) or past the model's
    timeout (a retryable `timeout` failure)."""

    async def complete(self, call: ModelCall) -> ModelReply: ...
