"""classify_error: every SDK, httpx and parsing failure mapped to its FailureClass (SPEC §3).

Pure: the exceptions are built here, no server involved.
"""

from __future__ import annotations

import json
from email.utils import formatdate
from typing import Any

import httpx2
import openai
import pytest

from tenure import FailureClass, ProviderError
from tenure._classify import classify, retry_after
from tenure._policy import MAX_RETRY_AFTER_SECONDS
from tenure.providers.openai import MalformedResponse, classify_error, parse_retry_after

URL = "http://127.0.0.1:9/v1/chat/completions"
NOW = 1_800_000_000.0


def request() -> httpx2.Request:
    return httpx2.Request("POST", URL)


def status_error(
    status: int, headers: dict[str, str] | None = None, body: Any = None
) -> openai.APIStatusError:
    """The exception the SDK raises for that status (same subclass choice as the client)."""
    kinds: dict[int, type[openai.APIStatusError]] = {
        400: openai.BadRequestError,
        401: openai.AuthenticationError,
        403: openai.PermissionDeniedError,
        404: openai.NotFoundError,
        409: openai.ConflictError,
        422: openai.UnprocessableEntityError,
        429: openai.RateLimitError,
    }
    kind = kinds.get(status, openai.InternalServerError if status >= 500 else openai.APIStatusError)
    response = httpx2.Response(status, headers=headers or {}, request=request())
    message = (body or {}).get("message", "failed") if isinstance(body, dict) else "failed"
    return kind(f"Error code: {status} - {message}", response=response, body=body)


def connection_error(cause: BaseException) -> openai.APIConnectionError:
    try:
        raise openai.APIConnectionError(request=request()) from cause
    except openai.APIConnectionError as exc:
        return exc


def classified(exc: BaseException) -> ProviderError:
    result = classify_error(exc, now=NOW)
    # What leaves the provider is what failure recovery reads.
    assert classify(result) is result.failure_class
    return result


# -- connection and timeouts -----------------------------------------------------------------


@pytest.mark.parametrize(
    "cause",
    [
        httpx2.ConnectError("[Errno 111] Connection refused"),
        httpx2.RemoteProtocolError("Server disconnected without sending a response."),
        httpx2.ReadError("[Errno 104] Connection reset by peer"),
        httpx2.WriteError("broken pipe"),
        httpx2.ProxyError("proxy refused"),
    ],
)
def test_connection_failures(cause: Exception) -> None:
    assert classified(connection_error(cause)).failure_class is FailureClass.CONNECTION
    assert classified(cause).failure_class is FailureClass.CONNECTION


def test_connection_error_without_a_cause() -> None:
    exc = openai.APIConnectionError(request=request())
    assert classified(exc).failure_class is FailureClass.CONNECTION


@pytest.mark.parametrize(
    "exc",
    [
        openai.APITimeoutError(request=request()),
        httpx2.ReadTimeout("timed out"),
        httpx2.ConnectTimeout("timed out"),
        httpx2.PoolTimeout("no connection free"),
        TimeoutError("timed out"),
    ],
)
def test_timeouts(exc: Exception) -> None:
    assert classified(exc).failure_class is FailureClass.TIMEOUT


def test_builtin_connection_error() -> None:
    assert (
        classified(ConnectionRefusedError(111, "refused")).failure_class is FailureClass.CONNECTION
    )


def test_a_base_url_that_is_not_http_is_configuration() -> None:
    cause = httpx2.UnsupportedProtocol(
        "Request URL is missing an 'http://' or 'https://' protocol."
    )
    assert classified(connection_error(cause)).failure_class is FailureClass.CONFIGURATION


# -- statuses --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, FailureClass.CLIENT_ERROR),
        (401, FailureClass.AUTH),
        (403, FailureClass.AUTH),
        (404, FailureClass.CLIENT_ERROR),
        (408, FailureClass.TIMEOUT),
        (422, FailureClass.CLIENT_ERROR),
        (429, FailureClass.RATE_LIMIT),
        (500, FailureClass.SERVER_ERROR),
        (502, FailureClass.SERVER_ERROR),
        (503, FailureClass.SERVER_ERROR),
        (504, FailureClass.SERVER_ERROR),
        (418, FailureClass.UNKNOWN),
        (501, FailureClass.UNKNOWN),
    ],
)
def test_statuses(status: int, expected: FailureClass) -> None:
    result = classified(status_error(status))
    assert result.failure_class is expected
    assert result.retry_after is None
    # httpx's own status error (a custom http_client that raises) maps the same way.
    response = httpx2.Response(status, request=request())
    raw = httpx2.HTTPStatusError("status", request=request(), response=response)
    assert classified(raw).failure_class is expected


def test_unknown_model_by_code() -> None:
    body = {"message": "The model `gpt-9` does not exist", "code": "model_not_found"}
    assert classified(status_error(404, body=body)).failure_class is FailureClass.CONFIGURATION
    # Some gateways answer 400 with the same code.
    assert classified(status_error(400, body=body)).failure_class is FailureClass.CONFIGURATION


@pytest.mark.parametrize(
    "message",
    ["The model `qwen` does not exist.", 'model "llama3" not found, try pulling it first'],
)
def test_unknown_model_by_message(message: str) -> None:
    exc = status_error(404, body={"message": message})
    assert classified(exc).failure_class is FailureClass.CONFIGURATION


def test_a_404_about_something_else_is_a_client_error() -> None:
    exc = status_error(404, body={"message": "Not Found"})
    assert classified(exc).failure_class is FailureClass.CLIENT_ERROR


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "12"}, 12.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"Retry-After": "3"}, 3.0),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": formatdate(NOW + 30, usegmt=True)}, 30.0),
        ({"retry-after": formatdate(NOW - 30, usegmt=True)}, None),  # past: says nothing
        ({}, None),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-5"}, None),
        ({"retry-after": "nan"}, None),
    ],
)
def test_rate_limit_retry_after(headers: dict[str, str], expected: float | None) -> None:
    result = classified(status_error(429, headers=headers))
    assert result.failure_class is FailureClass.RATE_LIMIT
    assert result.retry_after == expected
    assert parse_retry_after(headers, now=NOW) == expected


def http_date(seconds: float) -> str:
    return formatdate(seconds, usegmt=True)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        # The server's Date, not the worker's clock: a worker 10 minutes slow (the server's
        # Date is 600 s ahead of `now`) or an hour fast waits what the server asked.
        ({"retry-after": http_date(NOW + 630), "date": http_date(NOW + 600)}, 30.0),
        ({"retry-after": http_date(NOW - 3570), "date": http_date(NOW - 3600)}, 30.0),
        ({"Retry-After": http_date(NOW + 45), "Date": http_date(NOW)}, 45.0),
        # A date before the server's own now is past, whatever the worker's clock says.
        ({"retry-after": http_date(NOW + 60), "date": http_date(NOW + 120)}, None),
        # A Date that cannot be read: the worker's clock is all there is.
        ({"retry-after": http_date(NOW + 30), "date": "yesterday"}, 30.0),
        ({"retry-after": http_date(NOW + 30), "date": "Tue, 01 Dec 2026 14:00:00"}, 30.0),
    ],
)
def test_an_http_date_counts_from_the_servers_date(
    headers: dict[str, str], expected: float | None
) -> None:
    assert parse_retry_after(headers, now=NOW) == expected


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "1e12"},
        {"retry-after": "99999999999999999999"},
        {"retry-after": "86401"},
        {"retry-after-ms": "1e15"},
        {"retry-after": http_date(NOW + 400 * 86400), "date": http_date(NOW)},
        {"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"},
    ],
)
def test_an_absurd_retry_after_is_clamped_to_a_day(headers: dict[str, str]) -> None:
    assert parse_retry_after(headers, now=NOW) == MAX_RETRY_AFTER_SECONDS == 86400.0


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "-1"},
        {"retry-after-ms": "-250"},
        {"retry-after": "inf"},
        {"retry-after": "tomorrow"},
        {"retry-after": "Sun, 99 Foo 2026 25:61:00 GMT"},
        {"retry-after": "Tue, 01 Dec 2026 14:00:00"},  # no zone: not an HTTP date
        {"retry-after": ""},
    ],
)
def test_a_retry_after_that_says_nothing_usable_is_none(headers: dict[str, str]) -> None:
    assert parse_retry_after(headers, now=NOW) is None
    assert classified(status_error(429, headers=headers)).retry_after is None


def test_a_providers_own_retry_after_is_clamped_to_a_day() -> None:
    """Whatever provider reported it (a custom one, a tool's RetryableError): at most a day."""
    huge = ProviderError(FailureClass.RATE_LIMIT, "later", retry_after=400 * 86400.0)
    assert retry_after(huge) == MAX_RETRY_AFTER_SECONDS
    assert retry_after(ProviderError(FailureClass.RATE_LIMIT, "x", retry_after=90)) == 90


def test_retry_after_is_ignored_outside_rate_limits() -> None:
    assert classified(status_error(503, headers={"retry-after": "5"})).retry_after is None


# -- bodies and the rest ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        json.JSONDecodeError("Expecting value", "<html>", 0),
        MalformedResponse("the body has no choices"),
        openai.APIResponseValidationError(
            httpx2.Response(200, request=request()), body="<html>", message="bad content type"
        ),
        httpx2.DecodingError("bad gzip"),
    ],
)
def test_malformed_bodies_are_server_errors(exc: Exception) -> None:
    result = classified(exc)
    assert result.failure_class is FailureClass.SERVER_ERROR
    assert "malformed response" in result.message


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("something else"),
        RuntimeError("a bug"),
        openai.OpenAIError("an SDK complaint"),
        httpx2.LocalProtocolError("illegal header"),
    ],
)
def test_anything_else_is_unknown(exc: Exception) -> None:
    assert classified(exc).failure_class is FailureClass.UNKNOWN


def test_a_provider_error_passes_through_unchanged() -> None:
    original = ProviderError(FailureClass.RATE_LIMIT, "already classified", retry_after=4)
    assert classify_error(original) is original


def test_message_is_one_short_line() -> None:
    body = {"message": "line one\nline two " + "x" * 1000}
    result = classified(status_error(500, body=body))
    assert "\n" not in result.message
    assert len(result.message) <= 300
    assert result.message.startswith("HTTP 500: ")
