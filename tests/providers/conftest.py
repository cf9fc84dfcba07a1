"""A model server on 127.0.0.1 for the whole test session.

It speaks just enough of `/v1/chat/completions` for the real `openai` client and of
`/v1/messages` for the real `anthropic` client (answers and request checks for the latter
are in messages_api.py): each test gets its own endpoint (a path prefix), queues the replies
it wants (answers, error statuses with headers, slow answers, dropped connections, malformed
bodies) and reads back the requests the server received.
"""

from __future__ import annotations

import json
import secrets
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tenure.providers.anthropic import Anthropic
from tenure.providers.openai import OpenAICompatible

MODEL = "test-model"
API_KEY = "test-key"


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a status with a body, or a delay, or a dropped connection."""

    status: int = 200
    body: Any = None  # JSON-ready value, or bytes sent verbatim
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    delay: float = 0.0
    drop: bool = False


def completion(
    text: str | None = None,
    calls: list[tuple[str, Any]] | None = None,
    usage: tuple[int, int] | None = (10, 5),
    model: str = MODEL,
) -> Reply:
    """A 200 answer; `calls` are (name, arguments) with arguments a dict or raw text."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_{secrets.token_hex(4)}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for name, args in calls
        ]
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
    }
    if usage is not None:
        body["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        }
    return Reply(body=body)


def error(status: int, message: str = "failed", code: str | None = None, **headers: str) -> Reply:
    payload = {"error": {"message": message, "type": "test_error", "param": None, "code": code}}
    return Reply(
        status=status, body=payload, headers={k.replace("_", "-"): v for k, v in headers.items()}
    )


@dataclass
class Endpoint:
    server: ChatServer
    token: str
    replies: deque[Reply] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/{self.token}/v1"

    def push(self, *replies: Reply) -> Endpoint:
        self.replies.extend(replies)
        return self


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        parts = self.path.strip("/").split("/", 1)
        endpoint = self.server.owner.endpoints.get(parts[0])
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        route = parts[1] if len(parts) == 2 else ""
        if endpoint is None or route not in ("v1/chat/completions", "v1/messages"):
            self._send(Reply(status=404, body={"error": {"message": f"no route {self.path}"}}))
            return
        body = json.loads(raw)
        headers = {k.lower(): v for k, v in self.headers.items()}
        refused = _refusal(route, body, headers)
        with self.server.owner.lock:
            endpoint.requests.append({"body": body, "headers": headers, "route": route})
            reply = None if refused else endpoint.replies.popleft() if endpoint.replies else None
        if refused:
            from .messages_api import api_error

            self._send(api_error(400, "invalid_request_error", refused))
            return
        if reply is None:
            reply = Reply(status=500, body={"error": {"message": "no reply queued"}})
        if reply.delay:
            self.server.owner.stopping.wait(reply.delay)
        if reply.drop:
            self.close_connection = True
            return  # nothing written: the client sees the connection close under it
        self._send(reply)

    def _send(self, reply: Reply) -> None:
        body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        # A reply may carry its own Date (a server whose clock is not ours): sent instead of
        # the one send_response would add, never as a second one.
        self.send_response_only(reply.status)
        self.send_header("Server", self.version_string())
        if not any(name.lower() == "date" for name in reply.headers):
            self.send_header("Date", self.date_time_string())
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _refusal(route: str, body: Any, headers: dict[str, str]) -> str | None:
    """What the Messages API would refuse in this request (the chat fake checks nothing)."""
    if route != "v1/messages":
        return None
    from .messages_api import check_request

    return check_request(body, headers)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: ChatServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out has closed its socket before a slow answer is written.
        pass


class ChatServer:
    def __init__(self) -> None:
        self.endpoints: dict[str, Endpoint] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def endpoint(self) -> Endpoint:
        endpoint = Endpoint(self, secrets.token_hex(6))
        with self.lock:
            self.endpoints[endpoint.token] = endpoint
        return endpoint

    def close(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


@pytest.fixture(scope="session")
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer()
    yield server
    server.close()


@pytest.fixture
def endpoint(chat_server: ChatServer) -> Endpoint:
    return chat_server.endpoint()


@pytest.fixture
def make_provider() -> Iterator[Callable[..., OpenAICompatible]]:
    """OpenAICompatible providers, all closed at the end of the test."""
    made: list[OpenAICompatible] = []

    def make(url: str, **kwargs: Any) -> OpenAICompatible:
        kwargs.setdefault("model", MODEL)
        kwargs.setdefault("api_key", API_KEY)
        kwargs.setdefault("timeout", 5.0)
        provider = OpenAICompatible(base_url=url, **kwargs)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


@pytest.fixture
def make_anthropic() -> Iterator[Callable[..., Anthropic]]:
    """Anthropic providers on the real SDK, all closed at the end of the test."""
    from .messages_api import API_KEY as ANTHROPIC_KEY
    from .messages_api import CLAUDE

    made: list[Anthropic] = []

    def make(url: str, **kwargs: Any) -> Anthropic:
        kwargs.setdefault("model", CLAUDE)
        kwargs.setdefault("api_key", ANTHROPIC_KEY)
        kwargs.setdefault("timeout", 5.0)
        provider = Anthropic(base_url=url.removesuffix("/v1"), **kwargs)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


@pytest.fixture
def refused_url() -> str:
    """A loopback URL where nothing listens (the port was just released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
