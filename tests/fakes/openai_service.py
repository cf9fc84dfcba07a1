"""A realistic fake of an OpenAI-compatible chat-completions service, for tests and benchmarks.

It listens on 127.0.0.1 over real HTTP, so it is driven through the real `openai` SDK, and
behaves as a provider does under load:

- **Rate limits it enforces itself**: requests per minute and tokens per minute, each a
  bucket refilled continuously at `limit / 60` per second that holds at most `limit / 10`.
  A request reserves its prompt tokens (estimated from its text, one token per four
  characters) plus its output limit (`max_completion_tokens`, else `max_tokens`, else
  `default_max_tokens`); the reservation is settled to the real count when the answer is
  done. Over a limit it answers 429 with `Retry-After` (whole seconds), `retry-after-ms`
  and an OpenAI-shaped error body (`"code": "rate_limit_exceeded"`).
- **Latency**: time to the first byte drawn from a seeded distribution (`Latency`).
- **Real usage**: `prompt_tokens` (the estimate above), `completion_tokens` (the answer's
  text, same rule), `total_tokens`.
- **Faults**: 5xx at a configured rate (seeded) or on demand (`fail_next`); a connection
  dropped on demand (`drop_next`), mid-stream after k chunks.
- **Answers** from a per-server policy (a function of the request body), text or tool calls.
- **Streaming** (`stream=True`): Server-Sent Events of `chat.completion.chunk` objects, one
  content delta per word every `chunk_interval` seconds, tool calls in pieces, a final usage
  chunk when `stream_options={"include_usage": true}`, then `data: [DONE]`.
- **Counters** (`stats()`): requests, answers, 429s and 5xx sent, drops, tokens served per
  minute window, peak concurrency.

It runs in-process on a thread (`FakeOpenAI`) or as its own process (`ServiceProcess`, or
`python -m tests.fakes.openai_service --port N --rpm R --tpm T`), so that several worker
processes share one limit; both are controlled the same way, the other process through
`/_fake/...` routes. It is asyncio with uvicorn (h11) and a bare ASGI application: on two
cores, already busy with other work, it answered 300 requests a second with 600 slow ones
(0.2-3 s) open at once, at 0.9 ms of server CPU an answer: about 1,100 a second on one core
(`python -m tests.fakes.measure`; streamed answers of 40 chunks cost 4.5 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import uvicorn

from ._answers import Answer, Policy, lorem_policy, tool_once_policy
from ._app import DEFAULT_MAX_TOKENS, DEFAULT_MODEL, Latency, Service, ServiceConfig, Stats
from ._limits import estimate_tokens, prompt_tokens

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
STARTUP_SECONDS = 10.0
STOP_SECONDS = 5.0
# Enough for hundreds of clients connecting at once; the kernel caps it at somaxconn.
BACKLOG = 4096


def _bind(port: int) -> socket.socket:
    # The protocol must be named: asyncio sets TCP_NODELAY only on sockets whose proto is
    # IPPROTO_TCP, and without it every keep-alive answer (headers, then body) waits ~40 ms
    # for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.listen(BACKLOG)
    return sock


def _uvicorn(service: Service) -> uvicorn.Server:
    config = uvicorn.Config(
        service,
        http="h11",
        loop="asyncio",
        ws="none",
        lifespan="off",
        interface="asgi3",
        log_config=None,
        log_level="warning",
        access_log=False,
        backlog=BACKLOG,
        timeout_keep_alive=30,
        timeout_graceful_shutdown=1,
    )
    return uvicorn.Server(config)


class Control:
    """The `/_fake/...` routes of a service, for a process that does not hold it."""

    def __init__(self, port: int) -> None:
        self.port = port

    @property
    def url(self) -> str:
        """The base URL to give the SDK."""
        return f"http://{HOST}:{self.port}/v1"

    def _call(self, action: str, payload: dict[str, Any] | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            f"http://{HOST}:{self.port}/_fake/{action}",
            data=data,
            method="GET" if payload is None else "POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def stats(self) -> Stats:
        return Stats.from_json(self._call("stats"))

    def reset(self) -> None:
        self._call("reset", {})

    def fail_next(self, count: int = 1, status: int = 500) -> None:
        self._call("fail", {"count": count, "status": status})

    def drop_next(self, count: int = 1, after_chunks: int = 0) -> None:
        self._call("drop", {"count": count, "after_chunks": after_chunks})


class FakeOpenAI:
    """The fake service on a thread of this process. Use as a context manager or call
    `start()` / `stop()`. `received` holds the request bodies it was sent."""

    def __init__(self, config: ServiceConfig | None = None, port: int = 0, **options: Any):
        self.service = Service(config or ServiceConfig(**options))
        self._sock = _bind(port)
        self.port: int = self._sock.getsockname()[1]
        self._server = _uvicorn(self.service)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    @property
    def received(self) -> list[dict[str, Any]]:
        return list(self.service.received)

    def start(self) -> FakeOpenAI:
        self._thread.start()
        deadline = time.monotonic() + STARTUP_SECONDS
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the fake OpenAI service did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        # Answers still sleeping are abandoned: their clients see the connection close.
        self._server.should_exit = True
        self._server.force_exit = True
        self._thread.join(STOP_SECONDS)
        self._sock.close()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stats(self) -> Stats:
        return self.service.stats()

    def reset(self) -> None:
        self.service.reset()

    def fail_next(self, count: int = 1, status: int = 500) -> None:
        self.service.fail_next(count, status)

    def drop_next(self, count: int = 1, after_chunks: int = 0) -> None:
        self.service.drop_next(count, after_chunks)


class ServiceProcess(Control):
    """The fake service in a process of its own, shared by every process given its `url`.
    The policy, if any, must be a "module:name" string the child can import."""

    def __init__(self, config: ServiceConfig | None = None, **options: Any) -> None:
        config = config or ServiceConfig(**options)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.openai_service", *config_args(config)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            self._process.wait(STOP_SECONDS)
            raise RuntimeError(f"the fake service exited with {self._process.returncode}")
        super().__init__(int(json.loads(line)["port"]))
        self.pid = self._process.pid

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()

    def __enter__(self) -> ServiceProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# -- the command line ------------------------------------------------------------------------


def config_args(config: ServiceConfig) -> list[str]:
    """The command-line options that give a separate process this configuration."""
    if config.policy is not None and not isinstance(config.policy, str):
        raise ValueError('a separate process needs its policy as "module:name"')
    args = [
        f"--latency={config.latency.kind}",
        f"--latency-low={config.latency.low}",
        f"--latency-high={config.latency.high}",
        f"--chunk-interval={config.chunk_interval}",
        f"--error-rate={config.error_rate}",
        f"--error-status={config.error_status}",
        f"--seed={config.seed}",
        f"--default-max-tokens={config.default_max_tokens}",
        f"--model={config.model}",
    ]
    if config.rpm:
        args.append(f"--rpm={config.rpm}")
    if config.tpm:
        args.append(f"--tpm={config.tpm}")
    if config.policy:
        args.append(f"--policy={config.policy}")
    return args


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tests.fakes.openai_service",
        description='A fake OpenAI-compatible service; prints {"port": N} once listening.',
    )
    p.add_argument("--port", type=int, default=0, help="0: any free port (default)")
    p.add_argument("--rpm", type=float, default=None, help="requests per minute")
    p.add_argument("--tpm", type=float, default=None, help="tokens per minute")
    p.add_argument("--latency", choices=["fixed", "uniform", "lognormal"], default="fixed")
    p.add_argument("--latency-low", type=float, default=0.0, help="seconds")
    p.add_argument("--latency-high", type=float, default=0.0, help="seconds")
    p.add_argument("--chunk-interval", type=float, default=0.0, help="seconds between chunks")
    p.add_argument("--error-rate", type=float, default=0.0, help="fraction answered 5xx")
    p.add_argument("--error-status", type=int, default=503)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--default-max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--policy", default=None, help='answer policy as "module:name"')
    return p


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    config = ServiceConfig(
        rpm=args.rpm,
        tpm=args.tpm,
        latency=Latency(args.latency, args.latency_low, args.latency_high),
        chunk_interval=args.chunk_interval,
        error_rate=args.error_rate,
        error_status=args.error_status,
        seed=args.seed,
        default_max_tokens=args.default_max_tokens,
        model=args.model,
        policy=args.policy,
    )
    sock = _bind(args.port)
    # The socket already listens: a client that connects before uvicorn runs simply waits.
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    _uvicorn(Service(config)).run(sockets=[sock])


__all__ = [
    "Answer",
    "Control",
    "FakeOpenAI",
    "Latency",
    "Policy",
    "ServiceConfig",
    "ServiceProcess",
    "Stats",
    "estimate_tokens",
    "lorem_policy",
    "prompt_tokens",
    "tool_once_policy",
]

if __name__ == "__main__":
    main()
