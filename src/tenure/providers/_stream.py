"""A streamed chat completion put back together (pure: no I/O, no SDK).

The chunks of a stream (`chat.completion.chunk` objects, as JSON) are folded into the body of
the chat completion they stand for, so that a streamed answer is parsed by the same code as
an answer that was not streamed and gives the same `ModelReply`: text, tool calls, usage.
"""

from __future__ import annotations

import json
from typing import Any


class StreamAssembly:
    """Folds chunks in arrival order; `body()` is the chat-completion body they make up.

    Tool calls arrive as deltas keyed by `index`: the first delta of a call carries its id
    and function name, the rest carry pieces of its arguments, which are concatenated.
    Usage arrives in a last chunk without choices (`stream_options={"include_usage": true}`).
    """

    def __init__(self) -> None:
        self._model: str | None = None
        self._content: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._choices_seen = False

    def add(self, chunk: Any) -> str:
        """Folds one chunk in; returns the answer text it adds ("" if none)."""
        if not isinstance(chunk, dict):
            return ""
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self._model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return ""
        added: list[str] = []
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                added.append(self._add_choice(choice))
        return "".join(added)

    def _add_choice(self, choice: dict[str, Any]) -> str:
        self._choices_seen = True
        if isinstance(choice.get("finish_reason"), str):
            self._finish = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return ""
        if isinstance(delta.get("refusal"), str):
            self._refusal.append(delta["refusal"])
        for position, item in enumerate(delta.get("tool_calls") or []):
            if isinstance(item, dict):
                self._add_call(position, item)
        content = delta.get("content")
        if isinstance(content, str) and content:
            self._content.append(content)
            return content
        return ""

    def _add_call(self, position: int, item: dict[str, Any]) -> None:
        index = item.get("index")
        key = index if isinstance(index, int) else position
        call = self._calls.setdefault(key, {"id": None, "name": None, "arguments": []})
        if isinstance(item.get("id"), str) and item["id"] and call["id"] is None:
            call["id"] = item["id"]
        function = item.get("function")
        if not isinstance(function, dict):
            return
        # Some servers repeat the name on every delta of a call: the first one counts.
        if isinstance(function.get("name"), str) and function["name"] and call["name"] is None:
            call["name"] = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call["arguments"].append(arguments)
        elif arguments is not None:  # a server that sends the arguments as an object
            call["arguments"].append(json.dumps(arguments))

    def body(self) -> dict[str, Any]:
        """The chat-completion body; without any choice in the stream, a body without
        choices, which the parser reports as malformed."""
        body: dict[str, Any] = {"model": self._model, "usage": self._usage}
        if not self._choices_seen:
            return body
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._content)}
        if self._refusal:
            message["refusal"] = "".join(self._refusal)
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                }
                for _, call in sorted(self._calls.items())
            ]
        body["choices"] = [{"index": 0, "message": message, "finish_reason": self._finish}]
        return body
