"""A tenure app for tests that run real worker processes.

`python -m tests.apps DB_URL LEDGER [--lease S] [--concurrency N] [--burst]` works the queue.
The `charge` tool appends one line per execution to LEDGER (an external system the test
audits afterwards), fsynced before it returns.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import tenure
from tenure import ToolContext, ToolEffect


def make_app(db_url: str, ledger: str, lease: float = 1.0) -> tenure.Runtime:
    rt = tenure.Runtime(db_url, lease_seconds=lease, backoff_base=0.05, backoff_cap=0.2)

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=2)
    def charge(ctx: ToolContext, amount: int, hold: float = 0.0) -> dict[str, object]:
        """Charge a customer (one ledger line per execution), then wait `hold` seconds."""
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{ctx.run_id} {ctx.idempotency_key} {ctx.fencing_token}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        time.sleep(hold)
        return {"charged": amount}

    @rt.tool
    def read(ctx: ToolContext) -> str:
        return ctx.run_id

    @rt.tool
    def nap(seconds: float) -> str:
        time.sleep(seconds)
        return "rested"

    return rt


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("db_url")
    parser.add_argument("ledger")
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--burst", action="store_true")
    parser.add_argument("--grace", type=float, default=10.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")
    rt = make_app(args.db_url, args.ledger, args.lease)
    print("ready", flush=True)
    rt.work(
        concurrency=args.concurrency,
        burst=args.burst,
        poll_interval=0.05,
        grace_seconds=args.grace,
    )
    rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
