"""How many requests a second the fake service answers while many slow ones are open.

    python -m tests.fakes.measure [--clients 600] [--seconds 10] [--stream]

The service runs in its own process with latency uniform in 0.2-3 s (mean 1.6 s). Each
client is one keep-alive connection sending one request after another, so about `clients`
requests are open at any time and the ideal rate is clients / 1.6 a second. The clients are
raw asyncio (an HTTP client library would cost more CPU than the server being measured).
Besides the rate, it prints the server's CPU time per answer, which says what one core can
sustain whatever else the machine is doing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

from .openai_service import Latency, ServiceProcess

MEAN_LATENCY = 1.6
CHUNK_INTERVAL = 0.02
BODY = {"model": "m", "messages": [{"role": "user", "content": "How fast are you?"}]}


def _request(stream: bool) -> bytes:
    body = json.dumps({**BODY, "stream": stream}).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: fake\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _read_answer(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.split(b"\r\n")[0].decode())
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))
            return
    while True:  # chunked transfer: size line, data, CRLF; a zero size ends it
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        await reader.readexactly(size + 2)
        if size == 0:
            return


async def _client(port: int, until: float, request: bytes) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    done = 0
    while time.monotonic() < until:
        writer.write(request)
        await _read_answer(reader)
        done += 1
    writer.close()
    return done


async def _load(port: int, clients: int, seconds: float, stream: bool) -> tuple[int, float]:
    started = time.monotonic()
    request = _request(stream)
    jobs = (_client(port, started + seconds, request) for _ in range(clients))
    counts = await asyncio.gather(*jobs)
    return sum(counts), time.monotonic() - started


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--clients", type=int, default=600)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--stream", action="store_true", help="streamed answers, chunks 20 ms apart")
    args = p.parse_args()
    latency = Latency.uniform(0.2, 3.0)
    interval = CHUNK_INTERVAL if args.stream else 0.0
    with ServiceProcess(latency=latency, chunk_interval=interval) as service:
        cpu = _cpu_seconds(service.pid)
        answered, elapsed = asyncio.run(
            _load(service.port, args.clients, args.seconds, args.stream)
        )
        cpu = _cpu_seconds(service.pid) - cpu
        stats = service.stats()
    ideal = "" if args.stream else f" (ideal {args.clients / MEAN_LATENCY:.0f})"
    print(
        f"{answered / elapsed:.0f} answers/s{ideal} over "
        f"{elapsed:.1f} s, {args.clients} clients, peak {stats.peak_in_flight} open at once; "
        f"server CPU {1000 * cpu / max(answered, 1):.2f} ms an answer "
        f"(one core: {answered / max(cpu, 1e-9):.0f} answers/s)"
    )


if __name__ == "__main__":
    main()
