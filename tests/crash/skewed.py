"""`python -m tests.crash.skewed SECONDS DB_URL LEDGER [tests.apps options]`: the test worker
with its Python clock (`time.time`, `time.time_ns`) off by SECONDS.

It prints `clock TIME` to stderr first, so that a test can see the skew in effect.

Why not `faketime`: libfaketime 0.9.10 hangs Python's threading waits when it fakes
CLOCK_MONOTONIC, and without that `time.sleep` fails with EINVAL and psycopg's waits stall.
It would also fake SQLite's clock, which lives in the worker's own process (SQLite is a
library, its `now` is the process's `clock_gettime`): on one machine every process shares
that clock, so a worker whose clock alone is wrong can only be wrong in its own code.
(`datetime` is left alone: a subclass swapped in breaks psycopg's C datetimes, and tenure
reads no time from `datetime.now`.)
"""

from __future__ import annotations

import sys
import time


def skew(offset: float) -> None:
    real_time, real_ns = time.time, time.time_ns
    time.time = lambda: real_time() + offset
    time.time_ns = lambda: real_ns() + int(offset * 1e9)


def main(argv: list[str]) -> int:
    offset = float(argv[0])
    if offset:
        skew(offset)
    print(f"clock {time.time():.3f}", file=sys.stderr, flush=True)
    from tests.apps import main as app_main

    return app_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
