"""A process that forks a run and is SIGKILLed while the fork copies the journal.

    python -m tests.crash.fork_child URL RUN_ID AT

On SQLite it kills itself from inside the copy: a progress handler on its own connection
(real SQLite, a real SIGKILL) fires once the fork's row is inserted, in the middle of the
statement that copies the events, before the transaction commits. On PostgreSQL the test
holds a lock that the copy waits for, and kills this process while it waits.
"""

from __future__ import annotations

import os
import signal
import sys

import tenure


def main(url: str, run_id: str, at: int) -> None:
    rt = tenure.Runtime(url)
    plan = rt.fork_plan(run_id, at)
    store = rt.store
    if url.startswith("sqlite"):
        conn = store._write_conn()  # type: ignore[attr-defined]  # the writes' connection
        before = conn.total_changes

        def inside_the_copy() -> int:
            # The fork's row is in (one change, in this open transaction): the events'
            # copy is the statement running now.
            if conn.total_changes > before:
                os.kill(os.getpid(), signal.SIGKILL)
            return 0

        conn.set_progress_handler(inside_the_copy, 50)
    print("forking", flush=True)
    rt._fork(plan, None, False)
    print("forked", flush=True)  # never reached: the test fails if it is


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
