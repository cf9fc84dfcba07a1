"""A provider for Anthropic's Messages API (SPEC §12), on the official `anthropic` SDK.

Install with the optional extra `tenure[anthropic]`. The run's transcript is kept in
tenure's journal form (chat-completions messages: `system`, `user`, `assistant` with
`tool_calls`, `tool`); this module maps it to a Messages API request on every call and maps
the answer back, so a journal written under one provider resumes under another (a
`Fallback` from Claude to an OpenAI-compatible model and back).

Every failure leaves this module as a `ProviderError` whose `FailureClass` (SPEC §3) decides
whether the run is retried:

    connection refused, dropped, reset ........ connection     (retryable)
    connect/read/write timeout, 408 ........... timeout        (retryable)
    429 ....................................... rate_limit     (retryable, Retry-After kept)
    529 overloaded, 500, 502, 503, 504, other
    5xx, a malformed body ..................... server_error   (retryable)
    401, 403 .................................. auth
    404 naming the model, no usable base_url .. configuration
    400 (also "prompt is too long"), 404,
    409, 413, 422 ............................. client_error   (not retryable)
    anything else ............................. unknown

A context that is too long is a 400 like any other bad request: sending the same transcript
again cannot succeed, so it is not retried. The SDK's own retries are off by default, for the
reason given in `tenure.providers.openai`: tenure retries the run, under one budget, with
journal resume.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections import deque
from collections.abc import Mapping
from typing import Any

try:
    import anthropic
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "tenure.providers.Anthropic needs the anthropic package: pip install 'tenure[anthropic]'"
    ) from exc

from tenure import _loop
from tenure._errors import Cancelled, InvalidRequest, ProviderError
from tenure._types import FailureClass, Usage
from tenure.providers._base import MALFORMED_ARGUMENTS_KEY, ModelCall, ModelReply, Price, ToolCall
from tenure.providers._http import classify_plain, count_tokens, parse_retry_after

DEFAULT_TIMEOUT = 60.0
CLOSE_SECONDS = 5.0
# The Messages API requires an output limit on every request.
DEFAULT_MAX_TOKENS = 4096
# Anthropic bills a cache write at 1.25 times the input price and a cache read at 0.1 times.
CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.1
_MAX_ERROR_TEXT = 300
_TOOL_ID = re.compile(r"[^A-Za-z0-9_-]")

_STATUS_CLASSES: dict[int, FailureClass] = {
    400: FailureClass.CLIENT_ERROR,
    401: FailureClass.AUTH,
    403: FailureClass.AUTH,
    404: FailureClass.CLIENT_ERROR,
    408: FailureClass.TIMEOUT,
    409: FailureClass.CLIENT_ERROR,
    413: FailureClass.CLIENT_ERROR,
    422: FailureClass.CLIENT_ERROR,
    429: FailureClass.RATE_LIMIT,
    # 529: Anthropic's API is overloaded as a whole; another attempt later may well pass.
    529: FailureClass.SERVER_ERROR,
}


class MalformedResponse(Exception):
    """The endpoint answered 2xx with a body that is not a message."""


# -- classification (pure) -----------------------------------------------------------------

_MALFORMED = (anthropic.APIResponseValidationError, MalformedResponse, json.JSONDecodeError)


def classify_error(exc: BaseException, *, now: float | None = None) -> ProviderError:
    """The `ProviderError` an SDK, httpx or response-parsing exception stands for.

    `now` (seconds since the epoch) only turns a `Retry-After` HTTP date into seconds.
    """
    if isinstance(exc, ProviderError):
        return exc
    message = _describe(exc)
    if isinstance(exc, anthropic.APIStatusError):
        return _from_status(exc.status_code, exc.response.headers, message, now)
    if isinstance(exc, anthropic.APITimeoutError):  # before APIConnectionError: a subclass
        return ProviderError(FailureClass.TIMEOUT, message)
    if isinstance(exc, anthropic.APIConnectionError):
        inner = _from_transport(exc.__cause__, message) if exc.__cause__ else None
        return inner or ProviderError(FailureClass.CONNECTION, message)
    if isinstance(exc, _MALFORMED):
        return ProviderError(FailureClass.SERVER_ERROR, f"malformed response: {message}")
    if isinstance(exc, anthropic.CredentialsError):
        return ProviderError(FailureClass.CONFIGURATION, message)
    return _from_transport(exc, message) or classify_plain(exc, message)


def _from_status(
    status: int, headers: Mapping[str, str], message: str, now: float | None
) -> ProviderError:
    if status == 404 and "model" in message.lower():
        return ProviderError(FailureClass.CONFIGURATION, f"unknown model: {message}")
    failure_class = _STATUS_CLASSES.get(status)
    if failure_class is None:
        failure_class = FailureClass.SERVER_ERROR if status >= 500 else FailureClass.UNKNOWN
    if failure_class is FailureClass.CLIENT_ERROR and _context_too_long(message):
        message = f"context too long: {message}"
    wait = parse_retry_after(headers, now=now) if failure_class is FailureClass.RATE_LIMIT else None
    return ProviderError(failure_class, message, retry_after=wait)


def _context_too_long(message: str) -> bool:
    text = message.lower()
    return "too long" in text and any(w in text for w in ("prompt", "context", "token"))


def _from_transport(exc: BaseException, message: str) -> ProviderError | None:
    """httpx's exceptions (the SDK's `httpx2`, or classic `httpx` when it is loaded)."""
    for name in ("httpx2", "httpx"):
        module: Any = sys.modules.get(name)
        if module is None:
            continue
        if isinstance(exc, module.TimeoutException):
            return ProviderError(FailureClass.TIMEOUT, message)
        if isinstance(exc, module.UnsupportedProtocol):
            return ProviderError(FailureClass.CONFIGURATION, f"bad base_url: {message}")
        if isinstance(exc, module.TransportError):
            return ProviderError(FailureClass.CONNECTION, message)
    return None


def _describe(exc: BaseException) -> str:
    """One short line: the API's own message for an error status (the SDK's text is a repr
    of the whole body)."""
    said = getattr(exc, "api_message", None)
    text = said if isinstance(said, str) and said.strip() else None
    text = text or getattr(exc, "message", None) or str(exc) or type(exc).__name__
    status = getattr(exc, "status_code", None)
    prefix = f"HTTP {status}: " if isinstance(status, int) else ""
    return (prefix + " ".join(str(text).split()))[:_MAX_ERROR_TEXT]


# -- the request: journal messages to Messages API messages ---------------------------------


def to_messages(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(system prompt, messages) for the Messages API from tenure's journal messages.

    Tool results become `tool_result` blocks of a user turn; consecutive turns of one role
    merge, since the API wants user and assistant to alternate. Tool-use ids that the API
    would refuse (another provider's characters, or one id twice in a turn) are rewritten,
    and their results follow them, in order.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    renamed: dict[str, deque[str]] = {}
    for message in messages:
        role = message.get("role")
        if role == "system":
            system.append(str(message.get("content") or ""))
        elif role == "assistant":
            _append(out, "assistant", _assistant_blocks(message, renamed))
        elif role == "tool":
            _append(out, "user", [_tool_result(message, renamed)])
        else:
            _append(out, "user", _text_blocks(message.get("content")))
    return "\n\n".join(s for s in system if s), out


def _append(out: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if not blocks:
        return
    if out and out[-1]["role"] == role:
        out[-1]["content"].extend(blocks)
    else:
        out.append({"role": role, "content": blocks})


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return [b if isinstance(b, dict) else {"type": "text", "text": str(b)} for b in content]
    text = "" if content is None else str(content)
    return [{"type": "text", "text": text}] if text.strip() else []


def _assistant_blocks(
    message: dict[str, Any], renamed: dict[str, deque[str]]
) -> list[dict[str, Any]]:
    blocks = _text_blocks(message.get("content"))
    seen: set[str] = set()
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        original = str(call.get("id") or f"call_{index}")
        new_id = _TOOL_ID.sub("_", original) or f"call_{index}"
        if new_id in seen:
            new_id = f"{new_id}_{index}"
        seen.add(new_id)
        renamed.setdefault(original, deque()).append(new_id)
        blocks.append(
            {
                "type": "tool_use",
                "id": new_id,
                "name": function.get("name", ""),
                "input": _input(function.get("arguments")),
            }
        )
    return blocks


def _input(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments or "{}")
    except (TypeError, ValueError):
        return {MALFORMED_ARGUMENTS_KEY: str(arguments)}
    return value if isinstance(value, dict) else {MALFORMED_ARGUMENTS_KEY: str(arguments)}


def _tool_result(message: dict[str, Any], renamed: dict[str, deque[str]]) -> dict[str, Any]:
    original = str(message.get("tool_call_id") or "")
    queue = renamed.get(original)
    tool_use_id = queue.popleft() if queue else _TOOL_ID.sub("_", original)
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content, default=str)
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": text}
    if _is_error(text):
        block["is_error"] = True
    return block


def _is_error(text: str) -> bool:
    """The journal writes a failed call's result as `{"error": "..."}`."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and value.get("error") is not None


# -- the reply -------------------------------------------------------------------------------


def parse_message(body: Any, model: str, prices: Mapping[str, Price]) -> ModelReply:
    """A Messages API response body as a ModelReply; MalformedResponse when it is not one."""
    if not isinstance(body, dict):
        raise MalformedResponse(f"expected a JSON object, got {type(body).__name__}")
    content = body.get("content")
    if not isinstance(content, list):
        said = body.get("error")
        detail = f": {json.dumps(said, default=str)[:200]}" if said else ""
        raise MalformedResponse(f"the body has no content list{detail}")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for index, block in enumerate(content):
        if not isinstance(block, dict):
            raise MalformedResponse(f"content block {index} is not an object")
        if block.get("type") == "text":
            texts.append(str(block.get("text") or ""))
        elif block.get("type") == "tool_use":
            calls.append(_tool_call(block, index))
        # Other blocks (thinking, server tools' results) are not part of tenure's transcript.
    answered = str(body.get("model") or model)
    usage = _usage(body.get("usage"), prices.get(answered) or prices.get(model))
    text = "".join(texts)
    if calls:
        return ModelReply(text=text or None, tool_calls=tuple(calls), usage=usage, model=answered)
    return ModelReply(text=text, usage=usage, model=answered)


def _tool_call(block: dict[str, Any], index: int) -> ToolCall:
    name = block.get("name")
    if not isinstance(name, str) or not name:
        raise MalformedResponse(f"tool_use block {index} has no name")
    call_id = block.get("id")
    raw = block.get("input")
    args = raw if isinstance(raw, dict) else {MALFORMED_ARGUMENTS_KEY: json.dumps(raw)}
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else f"toolu_{index}",
        name=name,
        args=args,
    )


def _usage(raw: Any, price: Price | None) -> Usage:
    """Input tokens count everything the model read: fresh, written to and read from the
    prompt cache; the cost prices each at its own rate."""
    if not isinstance(raw, dict):
        return Usage()
    fresh = count_tokens(raw.get("input_tokens"))
    written = count_tokens(raw.get("cache_creation_input_tokens"))
    read = count_tokens(raw.get("cache_read_input_tokens"))
    output = count_tokens(raw.get("output_tokens"))
    cost = 0.0
    if price is not None:
        weighted = fresh + written * CACHE_WRITE_FACTOR + read * CACHE_READ_FACTOR
        cost = (weighted * price.input + output * price.output) / 1_000_000
    return Usage(fresh + written + read, output, cost)


# -- the provider --------------------------------------------------------------------------


class Anthropic:
    """Claude through the Messages API, with tool use.

    `prices` maps a model name to USD per million input and output tokens (a `Price` or an
    `(input, output)` pair); a model without a price costs 0. `extra_body` adds fields to
    every request (`stop_sequences`, `metadata`, `service_tier` …). Close the provider (or use
    it as a context manager) to release its connections.
    """

    streams = False  # its answer comes whole: no delta publisher is opened for its calls

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        prices: Mapping[str, Price | tuple[float, float]] | None = None,
        max_retries: int = 0,
        extra_body: Mapping[str, Any] | None = None,
        default_headers: Mapping[str, str] | None = None,
        client: anthropic.Anthropic | None = None,
    ) -> None:
        if not model:
            raise InvalidRequest("Anthropic: model is required")
        if timeout <= 0:
            raise InvalidRequest(f"Anthropic: timeout must be positive, got {timeout}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidRequest(
                f"Anthropic: max_tokens must be a whole number >= 1, got {max_tokens!r}"
            )
        if max_retries < 0:
            raise InvalidRequest(f"Anthropic: max_retries must be >= 0, got {max_retries}")
        self.model = model
        self.max_tokens = max_tokens
        self.extra_body = dict(extra_body or {})
        self.prices: dict[str, Price] = {k: Price.of(v) for k, v in (prices or {}).items()}
        self.timeout = timeout
        # A call that can be aborted goes through an async client on the process's event
        # loop: cancelling its task closes the HTTP request, which a thread blocked in a
        # synchronous read cannot do (SPEC §15). A client passed in is synchronous: its
        # calls block until they end.
        self._async: _loop.PerLoop[anthropic.AsyncAnthropic] | None = None
        if client is not None:
            self._client = client
            return
        try:
            options: dict[str, Any] = {
                "api_key": api_key,
                "base_url": base_url,
                "timeout": timeout,
                "max_retries": max_retries,
                "default_headers": dict(default_headers) if default_headers else None,
            }
            self._client = anthropic.Anthropic(**options)
            self._async = _loop.PerLoop(lambda: anthropic.AsyncAnthropic(**options), _close_client)
        except (anthropic.AnthropicError, ValueError, TypeError) as exc:
            raise InvalidRequest(f"Anthropic: {exc}") from None

    def set_price(self, model: str, input: float, output: float) -> None:
        """Set a model's price in USD per million input and output tokens."""
        self.prices[model] = Price(float(input), float(output))

    def request(self, call: ModelCall) -> dict[str, Any]:
        """The Messages API parameters for a call (what `complete` sends)."""
        system, messages = to_messages(call.messages)
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": messages,
        }
        if system:
            params["system"] = system
        if call.tools:
            params["tools"] = [
                {"name": s.name, "description": s.description, "input_schema": s.parameters}
                for s in call.tools
            ]
        if self.extra_body:
            params["extra_body"] = self.extra_body
        return params

    def complete(self, call: ModelCall) -> ModelReply:
        try:
            return parse_message(self._answer(call), self.model, self.prices)
        except Cancelled:
            raise
        except Exception as exc:
            raise classify_error(exc) from exc

    def _answer(self, call: ModelCall) -> Any:
        """The response body."""
        params = self.request(call)
        if self._async is None or call.abort is None:
            raw = self._client.messages.with_raw_response.create(**params)
            return json.loads(raw.http_response.content)
        return _loop.run(
            _answer_async(self._async, params),
            # The whole call's deadline: the model's timeout, which the engine passes, else
            # the provider's own (the client's applies to each read besides).
            timeout=call.timeout if call.timeout is not None else self.timeout,
            abort=call.abort,
            what=f"the model call of run {call.run_id}",
        )

    def close(self) -> None:
        self._client.close()
        if self._async is not None and self._async.made:
            # Its connections belong to the event loop: closed there.
            _loop.run(_close_async(self._async), timeout=CLOSE_SECONDS, what="closing the client")

    def __enter__(self) -> Anthropic:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Anthropic(model={self.model!r}, base_url={str(self._client.base_url)!r})"


async def _answer_async(
    client: _loop.PerLoop[anthropic.AsyncAnthropic], params: dict[str, Any]
) -> Any:
    raw = await client.get().messages.with_raw_response.create(**params)
    return json.loads(raw.http_response.content)


async def _close_async(client: _loop.PerLoop[anthropic.AsyncAnthropic]) -> None:
    # One made on a loop that stopped was closed as that loop stopped.
    await client.close_on(asyncio.get_running_loop())


async def _close_client(client: anthropic.AsyncAnthropic) -> None:
    await client.close()


__all__ = [
    "Anthropic",
    "MalformedResponse",
    "classify_error",
    "parse_message",
    "to_messages",
]
