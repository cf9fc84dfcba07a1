"""What the fake service answers, as a chat completion or as a stream of chunks.

An answer policy is a plain function of the request body (the parsed JSON the SDK sent) to
an `Answer`: text, or tool calls. The same request gets the same answer, streamed or not,
with the same tool-call ids, so a test can compare the two paths.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ._limits import CHARS_PER_TOKEN, estimate_tokens

_FILLER = (
    "the quick brown fox jumps over a lazy dog while seven tired engineers argue about "
    "leases heartbeats and fences until the reaper wakes up and requeues every stale run"
)
LOREM = _FILLER.split()
DEFAULT_ANSWER_WORDS = 30
# Tool-call arguments arrive in pieces of this many characters, as providers split them.
ARGUMENT_PIECE_CHARS = 8
_WORD = re.compile(r"\s*\S+|\s+")


@dataclass(frozen=True)
class Answer:
    """The model's turn: `text`, or `tool_calls` as (tool name, arguments) pairs."""

    text: str | None = None
    tool_calls: Sequence[tuple[str, dict[str, Any]]] = ()


Policy = Callable[[dict[str, Any]], Answer]


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def lorem_policy(words: int = DEFAULT_ANSWER_WORDS) -> Policy:
    """Text only: a sentence that names the question, then `words` filler words."""

    def answer(body: dict[str, Any]) -> Answer:
        filler = " ".join(LOREM[i % len(LOREM)] for i in range(words))
        return Answer(text=f"You asked: {last_user_text(body)[:60]}. {filler}.")

    return answer


def tool_once_policy(
    args: dict[str, Any] | None = None, tool: str | None = None, then: Policy | None = None
) -> Policy:
    """Call a tool (`tool`, else the first offered) once, then answer with `then`.

    Once means: while the transcript holds no tool result yet. Without tools on offer it
    answers with `then` straight away.
    """
    after = then or lorem_policy()

    def answer(body: dict[str, Any]) -> Answer:
        offered = [t["function"]["name"] for t in body.get("tools") or []]
        answered = any(m.get("role") == "tool" for m in body.get("messages") or [])
        if not offered or answered:
            return after(body)
        return Answer(tool_calls=[(tool or offered[0], dict(args or {}))])

    return answer


@dataclass(frozen=True)
class Rendered:
    """An answer as it goes on the wire, cut to the request's output limit."""

    content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    completion_tokens: int


def render(answer: Answer, body: dict[str, Any], limit: int) -> Rendered:
    seed = json.dumps(body.get("messages"), sort_keys=True, default=str).encode()
    digest = hashlib.sha256(seed).hexdigest()
    calls: list[dict[str, Any]] = [
        {
            "id": f"call_{digest[:12]}_{index}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, separators=(",", ":"))},
        }
        for index, (name, args) in enumerate(answer.tool_calls)
    ]
    call_tokens = sum(
        estimate_tokens(c["function"]["name"] + c["function"]["arguments"]) for c in calls
    )
    text = answer.text
    finish = "tool_calls" if calls else "stop"
    if text is not None and not calls and estimate_tokens(text) > limit:
        text = text[: limit * CHARS_PER_TOKEN]
        finish = "length"
    tokens = call_tokens + (estimate_tokens(text) if text else 0)
    return Rendered(text, calls, finish, tokens)


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def completion_body(
    rendered: Rendered, *, ident: str, model: str, created: int, prompt: int
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": rendered.content}
    if rendered.tool_calls:
        message["tool_calls"] = rendered.tool_calls
    return {
        "id": ident,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": rendered.finish_reason}],
        "usage": usage(prompt, rendered.completion_tokens),
    }


def stream_chunks(
    rendered: Rendered,
    *,
    ident: str,
    model: str,
    created: int,
    prompt: int,
    include_usage: bool,
) -> list[dict[str, Any]]:
    """The `chat.completion.chunk` objects of a streamed answer, in order: the role, one
    chunk per word of text, each tool call's name then its arguments in pieces, the finish
    reason, then (when asked for) a chunk with no choices that carries the usage."""
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas.extend({"content": word} for word in _WORD.findall(rendered.content or ""))
    for index, call in enumerate(rendered.tool_calls):
        function = call["function"]
        head = {"index": index, "id": call["id"], "type": "function"}
        deltas.append({"tool_calls": [{**head, "function": {"name": function["name"]}}]})
        arguments = function["arguments"]
        for start in range(0, len(arguments), ARGUMENT_PIECE_CHARS):
            piece = arguments[start : start + ARGUMENT_PIECE_CHARS]
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    base: dict[str, Any] = {
        "id": ident,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
    }
    if include_usage:
        base["usage"] = None
    chunks = [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        for delta in deltas
    ]
    finish = {"index": 0, "delta": {}, "finish_reason": rendered.finish_reason}
    chunks.append({**base, "choices": [finish]})
    if include_usage:
        chunks.append({**base, "choices": [], "usage": usage(prompt, rendered.completion_tokens)})
    return chunks
