"""A worker SIGKILLed while its model call streams leaves no deltas behind once its run
moves on (SPEC §18), on both stores."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tenure import Outcome, RunRequest, RunStatus
from tests.crash._workers import wait_for
from tests.fakes.openai_service import FakeOpenAI

from ._proc import MODEL, make_runtime
from .test_stream import leftover

ROOT = Path(__file__).resolve().parents[2]
LEASE = 1.0


def test_a_worker_killed_mid_stream_leaves_no_deltas_once_the_run_resumes(db_url: str) -> None:
    with FakeOpenAI(model="fake-model", chunk_interval=0.03) as fake:
        rt = make_runtime(db_url, fake.url, lease=LEASE)
        worker = None
        try:
            run_id = rt.enqueue(RunRequest(prompt="Where does c-42 live?", model=MODEL))
            feed = rt.store.follow_deltas(run_id)
            worker = subprocess.Popen(
                [sys.executable, "-m", "tests.stream._proc", "work", db_url, fake.url,
                 "--lease", str(LEASE)],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
            )  # fmt: skip
            seen: list[object] = []
            wait_for(lambda: bool(seen.extend(feed.take(0.1)) or seen), what="deltas")
            feed.close()
            if db_url.startswith("sqlite"):
                assert leftover(db_url, run_id), "the call in flight has its deltas stored"
            worker.kill()  # SIGKILL, mid-stream
            worker.wait()

            time.sleep(LEASE + 0.2)
            assert rt.reap().requeued == 1
            assert leftover(db_url, run_id) == []  # gone with the requeue, before any resume

            result = rt.run_queued(run_id)
            assert result is not None and result.outcome is Outcome.COMPLETED
            assert leftover(db_url, run_id) == []
            status = rt.status(run_id)
            assert status is not None and status.status is RunStatus.COMPLETED
            kinds = [str(e.kind) for e in rt.events(run_id)]
            assert kinds == ["request", "claimed", "requeued", "claimed", "llm", "assembled"]
        finally:
            if worker is not None and worker.poll() is None:
                worker.kill()
                worker.wait()
            rt.close()
