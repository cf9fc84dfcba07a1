"""What a model provider is: one method that turns a transcript into the model's next turn."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from tenure._types import RunRequest, Usage


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
    # Set when the segment lost its run mid-call: a provider stops waiting and raises
    # `tenure.Cancelled` (an HTTP provider closes its request).
    abort: threading.Event | None = None


class Provider(Protocol):
    def complete(self, call: ModelCall) -> ModelReply:
        """The next turn. Raise `tenure.ProviderError` (classified) when the call fails."""
        ...
