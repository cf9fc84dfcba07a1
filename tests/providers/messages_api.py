"""The Messages API side of the loopback server in conftest.py: answers, errors, and the
checks the real API makes on a request's shape.

The checks matter because the mapping from tenure's journal to Anthropic's messages is
where a provider goes wrong: roles that do not alternate, a `tool_use` without its
`tool_result` in the very next user turn, an empty text block, an id the API refuses. A
request that breaks one gets the API's own 400, so a test sees it as the real API would.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from .conftest import Reply

CLAUDE = "claude-test-1"
API_KEY = "sk-ant-test"
_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")


def message(
    text: str | None = None,
    calls: list[tuple[str, Any]] | None = None,
    usage: dict[str, int] | None = None,
    model: str = CLAUDE,
) -> Reply:
    """A 200 answer: optional text, then one `tool_use` block per (name, input)."""
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    for name, args in calls or []:
        content.append(
            {"type": "tool_use", "id": f"toolu_{secrets.token_hex(6)}", "name": name, "input": args}
        )
    body = {
        "id": f"msg_{secrets.token_hex(6)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": usage if usage is not None else {"input_tokens": 10, "output_tokens": 5},
    }
    return Reply(body=body)


def api_error(status: int, kind: str, text: str, **headers: str) -> Reply:
    """An error as the Messages API sends it: `{"type": "error", "error": {...}}`."""
    body = {"type": "error", "error": {"type": kind, "message": text}}
    return Reply(
        status=status, body=body, headers={k.replace("_", "-"): v for k, v in headers.items()}
    )


def api_key(headers: dict[str, str]) -> str | None:
    """The key a request carries: `x-api-key`, or a bearer token (newer SDKs send that)."""
    bearer = headers.get("authorization", "")
    if bearer.lower().startswith("bearer "):
        return bearer[7:]
    return headers.get("x-api-key") or None


def check_request(body: Any, headers: dict[str, str]) -> str | None:
    """What the real API would refuse in this request, or None."""
    if api_key(headers) is None:
        return "x-api-key header is required"
    if not headers.get("anthropic-version"):
        return "anthropic-version header is required"
    if not isinstance(body, dict):
        return "body: expected an object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        return "max_tokens: Field required"
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        return "system: Input should be a valid string or list"
    return _check_tools(body.get("tools")) or _check_messages(body.get("messages"))


def _check_tools(tools: Any) -> str | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        return "tools: Input should be a valid list"
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not _NAME.match(str(tool.get("name", ""))):
            return f"tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"tools.{i}.input_schema.type: Input should be 'object'"
    return None


def _check_messages(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    expected = "user"
    open_calls: set[str] = set()
    seen_ids: set[str] = set()
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") != expected:
            return f"messages.{i}.role: roles must alternate between user and assistant"
        blocks = _blocks(msg.get("content"))
        if blocks is None:
            return f"messages.{i}.content: text content blocks must be non-empty"
        results = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
        if expected == "user":
            if open_calls - results:
                return f"messages.{i}: tool_use ids were found without tool_result blocks"
            if results - open_calls:
                return f"messages.{i}: unexpected tool_use_id found in tool_result blocks"
            open_calls = set()
        else:
            problem = _check_tool_uses(i, blocks, seen_ids)
            if problem:
                return problem
            open_calls = {b["id"] for b in blocks if b.get("type") == "tool_use"}
        expected = "assistant" if expected == "user" else "user"
    if open_calls:
        return "tool_use ids were found without tool_result blocks immediately after"
    return None


def _check_tool_uses(i: int, blocks: list[dict[str, Any]], seen_ids: set[str]) -> str | None:
    for b in blocks:
        if b.get("type") != "tool_use":
            continue
        tool_id = str(b.get("id", ""))
        if not _ID.match(tool_id):
            return f"messages.{i}.content: tool_use.id should match pattern '^[a-zA-Z0-9_-]+$'"
        if tool_id in seen_ids:
            return f"messages.{i}.content: tool_use ids must be unique"
        if not isinstance(b.get("input"), dict):
            return f"messages.{i}.content: tool_use.input: Input should be a valid dictionary"
        seen_ids.add(tool_id)
    return None


def _blocks(content: Any) -> list[dict[str, Any]] | None:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else None
    if not isinstance(content, list) or not content:
        return None
    for block in content:
        if not isinstance(block, dict):
            return None
        if block.get("type") == "text" and not str(block.get("text", "")).strip():
            return None
    return content
