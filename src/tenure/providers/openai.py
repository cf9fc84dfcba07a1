"""A provider for any OpenAI-compatible chat-completions endpoint (SPEC §12).

Built on the official `openai` SDK (the optional extra `tenure[openai]`): OpenAI itself,
vLLM, Ollama, llama.cpp's server and anything else that speaks `/v1/chat/completions` with
tool calling. Every failure leaves this module as a `ProviderError` whose `FailureClass`
(SPEC §3) decides whether the run is retried:

    connection refused, dropped, reset ........ connection     (retryable)
    connect/read/write/pool timeout, 408 ...... timeout        (retryable)
    429 ....................................... rate_limit     (retryable, Retry-After kept)
    500, 502, 503, 504, a malformed body ...... server_error   (retryable)
    401, 403 .................................. auth
    unknown model, a URL that is no HTTP URL .. configuration
    400, 404, 409, 413, 422 ................... client_error
    anything else ............................. unknown

The SDK's own retries are off by default: tenure retries the run, with backoff, under one
requeue budget and with journal resume, so a second retry layer inside the step would only
hold the lease longer and hide failures from the run's history.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

try:
    import openai
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "tenure.providers.OpenAICompatible needs the openai package: pip install 'tenure[openai]'"
    ) from exc

from tenure import _loop
from tenure._errors import Cancelled, InvalidRequest, ProviderError
from tenure._types import FailureClass, Usage
from tenure.providers._base import MALFORMED_ARGUMENTS_KEY, ModelCall, ModelReply, Price, ToolCall
from tenure.providers._http import classify_plain, count_tokens, parse_retry_after
from tenure.providers._stream import StreamAssembly

T = TypeVar("T")

DEFAULT_TIMEOUT = 60.0
CLOSE_SECONDS = 5.0
# A local server (vLLM, Ollama, llama.cpp) takes any key, but the SDK insists on one.
PLACEHOLDER_API_KEY = "not-needed"
_MAX_ERROR_TEXT = 300

_STATUS_CLASSES: dict[int, FailureClass] = {
    400: FailureClass.CLIENT_ERROR,
    401: FailureClass.AUTH,
    403: FailureClass.AUTH,
    404: FailureClass.CLIENT_ERROR,
    # 408 is the server saying the request took too long: the same as our own timeout.
    408: FailureClass.TIMEOUT,
    409: FailureClass.CLIENT_ERROR,
    413: FailureClass.CLIENT_ERROR,
    422: FailureClass.CLIENT_ERROR,
    429: FailureClass.RATE_LIMIT,
    500: FailureClass.SERVER_ERROR,
    502: FailureClass.SERVER_ERROR,
    503: FailureClass.SERVER_ERROR,
    504: FailureClass.SERVER_ERROR,
}


class MalformedResponse(Exception):
    """The endpoint answered 2xx with a body that is not a chat completion."""


class _DeltaCallbackFailed(Exception):
    """`on_delta` raised: the caller's own exception, handed back unclassified."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


# -- classification (pure) -----------------------------------------------------------------

_MALFORMED = (openai.APIResponseValidationError, MalformedResponse, json.JSONDecodeError)


def classify_error(exc: BaseException, *, now: float | None = None) -> ProviderError:
    """The `ProviderError` an SDK, httpx or response-parsing exception stands for.

    `now` (seconds since the epoch) is only read to turn a `Retry-After` HTTP date into a
    number of seconds; tests pass it, callers leave it out.
    """
    if isinstance(exc, ProviderError):
        return exc
    message = _describe(exc)
    if isinstance(exc, openai.APIStatusError):
        return _from_status(exc.status_code, exc.response.headers, exc.code, message, now)
    if isinstance(exc, openai.APITimeoutError):  # before APIConnectionError: a subclass
        return ProviderError(FailureClass.TIMEOUT, message)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        if cause is not None:
            inner = _from_transport(cause, message)
            if inner is not None and inner.failure_class is not FailureClass.UNKNOWN:
                return inner
        return ProviderError(FailureClass.CONNECTION, message)
    if isinstance(exc, _MALFORMED):
        # The server answered, but not with a chat completion: a proxy's HTML error page,
        # a truncated body. The next attempt may well reach a healthy replica.
        return ProviderError(FailureClass.SERVER_ERROR, f"malformed response: {message}")
    return _from_transport(exc, message) or classify_plain(exc, message)


def _from_status(
    status: int,
    headers: Mapping[str, str],
    code: str | None,
    message: str,
    now: float | None,
) -> ProviderError:
    if _is_unknown_model(status, code, message):
        return ProviderError(FailureClass.CONFIGURATION, f"unknown model: {message}")
    failure_class = _STATUS_CLASSES.get(status, FailureClass.UNKNOWN)
    wait = parse_retry_after(headers, now=now) if failure_class is FailureClass.RATE_LIMIT else None
    return ProviderError(failure_class, message, retry_after=wait)


def _is_unknown_model(status: int, code: str | None, message: str) -> bool:
    """OpenAI says `model_not_found`; vLLM and Ollama say it in words on a 404."""
    if code == "model_not_found":
        return True
    if status != 404:
        return False
    text = message.lower()
    return "model" in text and ("not found" in text or "does not exist" in text)


def _from_transport(exc: BaseException, message: str) -> ProviderError | None:
    """httpx's exceptions (the SDK's `httpx2`, or classic `httpx` when it is loaded)."""
    for name in ("httpx2", "httpx"):
        module: Any = sys.modules.get(name)
        if module is None:
            continue
        if isinstance(exc, module.HTTPStatusError):
            response = exc.response
            return _from_status(response.status_code, response.headers, None, message, None)
        if isinstance(exc, module.TimeoutException):
            return ProviderError(FailureClass.TIMEOUT, message)
        if isinstance(exc, module.UnsupportedProtocol):
            return ProviderError(FailureClass.CONFIGURATION, f"bad base_url: {message}")
        if isinstance(exc, module.DecodingError):
            return ProviderError(FailureClass.SERVER_ERROR, f"malformed response: {message}")
        if isinstance(exc, module.LocalProtocolError):
            return ProviderError(FailureClass.UNKNOWN, message)
        if isinstance(exc, module.TransportError):
            return ProviderError(FailureClass.CONNECTION, message)
    return None


def _describe(exc: BaseException) -> str:
    """One short line. For an error status, the server's own message when its body has one
    (the SDK's text is a repr of the whole body)."""
    body = getattr(exc, "body", None)
    said = body.get("message") if isinstance(body, dict) else None
    text = said if isinstance(said, str) and said.strip() else None
    text = text or getattr(exc, "message", None) or str(exc) or type(exc).__name__
    status = getattr(exc, "status_code", None)
    prefix = f"HTTP {status}: " if isinstance(status, int) else ""
    line = " ".join(str(text).split())
    return (prefix + line)[:_MAX_ERROR_TEXT]


# -- the reply -----------------------------------------------------------------------------


def parse_arguments(raw: Any) -> dict[str, Any]:
    """A tool call's arguments. Never raises: text that is not a JSON object is handed on
    under MALFORMED_ARGUMENTS_KEY, so tool validation reports it to the model, which can
    then correct itself, instead of the step failing."""
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if not isinstance(raw, str):
        return {MALFORMED_ARGUMENTS_KEY: json.dumps(raw, default=str)}
    try:
        value = json.loads(raw)
    except ValueError:
        return {MALFORMED_ARGUMENTS_KEY: raw}
    if value is None:
        return {}
    if not isinstance(value, dict):
        return {MALFORMED_ARGUMENTS_KEY: raw}
    return value


def parse_completion(body: Any, model: str, prices: Mapping[str, Price]) -> ModelReply:
    """A chat-completion JSON body as a ModelReply; MalformedResponse when it is not one."""
    if not isinstance(body, dict):
        raise MalformedResponse(f"expected a JSON object, got {type(body).__name__}")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        # Some servers report an error inside a 200; say what they said.
        said = body.get("error")
        detail = f": {json.dumps(said, default=str)[:200]}" if said else ""
        raise MalformedResponse(f"the body has no choices{detail}")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise MalformedResponse("the first choice has no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise MalformedResponse("the message content is not text")
    refusal = message.get("refusal")
    if not content and isinstance(refusal, str):
        content = refusal  # a refusal is the model's answer, in words
    calls = _tool_calls(message.get("tool_calls"))
    answered = str(body.get("model") or model)
    usage = _usage(body.get("usage"), _price_for(prices, answered, model))
    if calls:
        return ModelReply(text=content or None, tool_calls=calls, usage=usage, model=answered)
    return ModelReply(text=content or "", usage=usage, model=answered)


def _tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise MalformedResponse("tool_calls is not a list")
    calls: list[ToolCall] = []
    for index, item in enumerate(raw):
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise MalformedResponse(f"tool call {index} has no function name")
        # Some servers omit the id; the journal needs one to pair the call with its result.
        call_id = item.get("id")
        calls.append(
            ToolCall(
                id=call_id if isinstance(call_id, str) and call_id else f"call_{index}",
                name=function["name"],
                args=parse_arguments(function.get("arguments")),
            )
        )
    return tuple(calls)


def _usage(raw: Any, price: Price | None) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    input_tokens = count_tokens(raw.get("prompt_tokens"))
    output_tokens = count_tokens(raw.get("completion_tokens"))
    cost = price.cost(input_tokens, output_tokens) if price else 0.0
    return Usage(input_tokens, output_tokens, cost)


def _price_for(prices: Mapping[str, Price], answered: str, requested: str) -> Price | None:
    """The answering model's price (OpenAI names a dated snapshot), else the requested one's."""
    return prices.get(answered) or prices.get(requested)


# -- the provider --------------------------------------------------------------------------


class OpenAICompatible:
    """Chat completions with tool calling on an OpenAI-compatible endpoint.

    `prices` maps a model name to USD per million input and output tokens (a `Price` or an
    `(input, output)` pair); a model without a price costs 0. Close the provider (or use it
    as a context manager) to release its connections.

    With `stream=True` the answer is streamed (Server-Sent Events) and asked to end with its
    usage; the reply is the same as without streaming, and each piece of answer text is
    handed to the call's `on_delta`, if it has one, as it arrives. What `on_delta` raises
    ends the call and is raised unchanged: it is no failure of the provider.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        prices: Mapping[str, Price | tuple[float, float]] | None = None,
        max_retries: int = 0,
        extra_body: Mapping[str, Any] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        default_headers: Mapping[str, str] | None = None,
        client: openai.OpenAI | None = None,
        stream: bool = False,
    ) -> None:
        if not model:
            raise InvalidRequest("OpenAICompatible: model is required")
        if timeout <= 0:
            raise InvalidRequest(f"OpenAICompatible: timeout must be positive, got {timeout}")
        if max_retries < 0:
            raise InvalidRequest(f"OpenAICompatible: max_retries must be >= 0, got {max_retries}")
        self.model = model
        self.prices: dict[str, Price] = {k: Price.of(v) for k, v in (prices or {}).items()}
        self.extra_body = dict(extra_body or {})
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.stream = stream
        self.timeout = timeout
        # A call that can be aborted goes through an async client on the process's event
        # loop, streamed or not: cancelling its task closes the HTTP request, which a thread
        # blocked in a synchronous read cannot do (SPEC §15). A client passed in is
        # synchronous: its calls block until they end (a stream stops between chunks).
        self._async: _loop.PerLoop[openai.AsyncOpenAI] | None = None
        if client is not None:
            self._client = client
            return
        try:
            options: dict[str, Any] = {
                "api_key": api_key or _default_key(base_url),
                "base_url": base_url,
                "timeout": timeout,
                "max_retries": max_retries,
                "default_headers": dict(default_headers) if default_headers else None,
            }
            self._client = openai.OpenAI(**options)
            self._async = _loop.PerLoop(lambda: openai.AsyncOpenAI(**options), _close_client)
        except openai.OpenAIError as exc:
            raise InvalidRequest(f"OpenAICompatible: {exc}") from None

    def set_price(self, model: str, input: float, output: float) -> None:
        """Set a model's price in USD per million input and output tokens."""
        self.prices[model] = Price(float(input), float(output))

    @property
    def streams(self) -> bool:
        return self.stream

    def complete(self, call: ModelCall) -> ModelReply:
        params: dict[str, Any] = {"model": self.model, "messages": call.messages}
        if call.tools:
            params["tools"] = [spec.to_openai() for spec in call.tools]
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        if self.extra_body:
            params["extra_body"] = self.extra_body
        try:
            if self.stream and self._async is not None and call.abort is not None:
                return self._streamed_on_loop(self._async, params, call)
            if self.stream:
                return self._streamed(params, call.on_delta, call.abort)
            return parse_completion(self._answer(params, call), self.model, self.prices)
        except _DeltaCallbackFailed as failed:
            raise failed.error from None
        except Cancelled:
            raise
        except Exception as exc:
            # Everything leaves classified; what is not recognised is `unknown`, which is
            # what the ladder would make of it anyway, but with the SDK's words kept.
            raise classify_error(exc) from exc

    def _answer(self, params: dict[str, Any], call: ModelCall) -> Any:
        """The body of a call that is not streamed."""
        if self._async is None or call.abort is None:
            raw = self._client.chat.completions.with_raw_response.create(**params)
            return json.loads(raw.http_response.content)
        return _loop.run(
            _answer_async(self._async, params),
            timeout=self._timeout_of(call),
            abort=call.abort,
            what=f"the model call of run {call.run_id}",
        )

    def _timeout_of(self, call: ModelCall) -> float:
        """The whole call's deadline on the loop: the model's timeout, which the engine
        passes, else the provider's own (the client's applies to each read besides)."""
        return call.timeout if call.timeout is not None else self.timeout

    def _streamed_on_loop(
        self, client: _loop.PerLoop[openai.AsyncOpenAI], params: dict[str, Any], call: ModelCall
    ) -> ModelReply:
        """A stream read on the event loop, chunk by chunk, each read cancelled when the
        abort is set: a stalled stream is closed within the abort's watch, not at the HTTP
        timeout. The chunks are handled here, on the calling thread, so `on_delta` never
        runs on (or blocks) the loop."""
        what = f"the model call of run {call.run_id}"
        deadline = time.monotonic() + self._timeout_of(call)

        def on_loop(coro: Coroutine[Any, Any, T]) -> T:
            left = deadline - time.monotonic()
            if left <= 0:
                coro.close()
                raise _loop.TimedOut(f"{what} did not finish within {self._timeout_of(call):g} s")
            return _loop.run(coro, timeout=left, abort=call.abort, what=what)

        stream, opened_on = on_loop(_open_stream(client, params))
        assembly = StreamAssembly()
        try:
            while (chunk := on_loop(_next_chunk(stream, opened_on))) is not None:
                text = assembly.add(chunk)
                if text and call.on_delta is not None:
                    try:
                        call.on_delta(text)
                    except Exception as exc:
                        raise _DeltaCallbackFailed(exc) from exc
        except _loop.LoopDied:
            raise  # its connection went with the loop that stopped: nothing left to close
        except BaseException:
            _close_stream(stream)  # a read that was cancelled closed it already: harmless
            raise
        _close_stream(stream)
        return parse_completion(assembly.body(), self.model, self.prices)

    def _streamed(
        self,
        params: dict[str, Any],
        on_delta: Callable[[str], None] | None,
        abort: threading.Event | None,
    ) -> ModelReply:
        assembly = StreamAssembly()
        with self._client.chat.completions.create(
            **params, stream=True, stream_options={"include_usage": True}
        ) as chunks:
            for chunk in chunks:
                if abort is not None and abort.is_set():
                    # Leaving the `with` closes the HTTP response: the server stops too.
                    raise Cancelled("the model call was aborted: the run is no longer ours")
                text = assembly.add(chunk.to_dict())
                if text and on_delta is not None:
                    try:
                        on_delta(text)
                    except Exception as exc:
                        raise _DeltaCallbackFailed(exc) from exc
        return parse_completion(assembly.body(), self.model, self.prices)

    def close(self) -> None:
        self._client.close()
        if self._async is not None and self._async.made:
            # Its connections belong to the event loop: closed there.
            _loop.run(_close_async(self._async), timeout=CLOSE_SECONDS, what="closing the client")

    def __enter__(self) -> OpenAICompatible:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OpenAICompatible(model={self.model!r}, base_url={str(self._client.base_url)!r})"


async def _answer_async(client: _loop.PerLoop[openai.AsyncOpenAI], params: dict[str, Any]) -> Any:
    raw = await client.get().chat.completions.with_raw_response.create(**params)
    return json.loads(raw.http_response.content)


async def _close_async(client: _loop.PerLoop[openai.AsyncOpenAI]) -> None:
    # One made on a loop that stopped was closed as that loop stopped.
    await client.close_on(asyncio.get_running_loop())


async def _close_client(client: openai.AsyncOpenAI) -> None:
    await client.close()


async def _open_stream(
    client: _loop.PerLoop[openai.AsyncOpenAI], params: dict[str, Any]
) -> tuple[openai.AsyncStream[Any], asyncio.AbstractEventLoop]:
    """The stream, and the loop its connection belongs to."""
    stream: openai.AsyncStream[Any] = await client.get().chat.completions.create(
        **params, stream=True, stream_options={"include_usage": True}
    )
    return stream, asyncio.get_running_loop()


def _close_stream(stream: openai.AsyncStream[Any]) -> None:
    """Closed on the loop that owns its connection."""
    with contextlib.suppress(Exception):
        _loop.run(stream.close(), timeout=CLOSE_SECONDS, what="closing the stream")


async def _next_chunk(
    stream: openai.AsyncStream[Any], opened_on: asyncio.AbstractEventLoop
) -> dict[str, Any] | None:
    """The next chunk as JSON; None at the end of the stream."""
    if asyncio.get_running_loop() is not opened_on:
        # The loop stopped between two chunks and another replaced it: the stream's
        # connection was that loop's, and reading it from this one would never end.
        raise _loop.LoopDied("the event loop thread the stream was read on stopped")
    try:
        chunk = await stream.__anext__()
    except StopAsyncIteration:
        return None
    value: dict[str, Any] = chunk.to_dict()
    return value


def _default_key(base_url: str | None) -> str | None:
    """The SDK reads OPENAI_API_KEY itself; a custom endpoint may need no key at all."""
    if os.environ.get("OPENAI_API_KEY"):
        return None
    return PLACEHOLDER_API_KEY if base_url or os.environ.get("OPENAI_BASE_URL") else None


__all__ = [
    "MalformedResponse",
    "OpenAICompatible",
    "Price",
    "classify_error",
    "parse_arguments",
    "parse_completion",
    "parse_retry_after",
]
