"""The workers view, on each store: each worker from its own heartbeat row (host, pid, queues,
slots in use, last seen), a dead one marked dead before its leases expire, the stopped ones
last; lease owners without a row still shown by their leases; the API and the gauge."""

from __future__ import annotations

import re
import threading
import time

from fastapi.testclient import TestClient

import tenure
from tenure import RunRequest
from tenure.store._base import WorkerInfo

from .conftest import AUTH, login
from .test_overview import any_client, any_rt

__all__ = ["any_client", "any_rt"]  # fixtures shared with test_overview

LIVE = "worker:box-a:11:1"
DEAD = "worker:box-b:22:1"
STOPPED = "worker:box-c:33:1"
LEASE_ONLY = "run:box-d:44:1"


def register(rt: tenure.Runtime, worker_id: str, beat: float, queues: list[str] | None) -> None:
    host, pid = worker_id.split(":")[1:3]
    info = WorkerInfo(worker_id, host, int(pid), queues, 4, beat)
    rt.store.register_worker(info)


def seed_workers(rt: tenure.Runtime) -> str:
    """A live worker using two of its four slots, one killed mid-run (its heartbeat overdue,
    its lease not yet expired), one stopped, and an owner known only by its lease."""
    run_ids = rt.enqueue_many(
        [RunRequest(prompt="p", queue="emails", script=[{"say": "x"}]) for _ in range(2)]
    )
    register(rt, LIVE, 10.0, None)
    register(rt, DEAD, 0.02, ["emails"])
    register(rt, STOPPED, 10.0, ["reports"])
    assert rt.store.claim_run(run_ids[0], DEAD, 600) is not None  # a lease of ten minutes
    assert rt.store.claim_run(run_ids[1], LEASE_ONLY, 600) is not None
    assert rt.store.stop_worker(STOPPED)
    time.sleep(0.2)  # ten of the dead worker's heartbeats missed
    assert rt.store.beat_worker(LIVE, 2)
    return run_ids[0]


def _rows(html: str) -> dict[str, tuple[str, str]]:
    """owner -> (state, the row's cells), in page order."""
    return {
        m[1]: (m[2], m[3])
        for m in re.finditer(
            r'<tr data-owner="([^"]+)" data-state="([^"]+)"[^>]*>(.*?)</tr>', html, re.S
        )
    }


def test_the_workers_view_shows_each_worker_and_a_dead_one_before_its_lease_expires(
    any_client: TestClient, any_rt: tenure.Runtime
) -> None:
    held = seed_workers(any_rt)
    login(any_client)
    rows = _rows(any_client.get("/leases").text)
    assert list(rows) == [LEASE_ONLY, LIVE, DEAD, STOPPED]  # the live first, the stopped last
    assert {o: s for o, (s, _) in rows.items()} == {
        LIVE: "running",
        LEASE_ONLY: "running",
        DEAD: "dead",
        STOPPED: "stopped",
    }
    live = rows[LIVE][1]
    assert "box-a / 11" in live and '<td class="slots">2/4</td>' in live
    assert '<span class="muted">all</span>' in live  # no queue named: every queue
    assert re.search(r'<td class="small last-seen"><span class="when"[^>]*>(now|[0-5]s ago)', live)
    dead = rows[DEAD][1]
    assert "box-b / 22" in dead and '<span class="worker-state dead">dead</span>' in dead
    assert "<td>emails</td>" in dead and "<td>1</td>" in dead  # it holds one run
    # Its lease has not expired: the heartbeat told first.
    run = any_rt.status(held)
    assert run is not None and run.lease_expires is not None
    assert run.lease_expires > any_rt.store.now()
    assert "stopped renewing" not in dead
    assert '<span class="worker-state stopped">stopped</span>' in rows[STOPPED][1]
    assert "box-d / 44" in rows[LEASE_ONLY][1]  # host and pid read from the owner id


def test_workers_in_the_api(any_client: TestClient, any_rt: tenure.Runtime) -> None:
    seed_workers(any_rt)
    found = {w["owner"]: w for w in any_client.get("/api/workers", headers=AUTH).json()}
    assert set(found) == {LIVE, DEAD, STOPPED, LEASE_ONLY}
    live = found[LIVE]
    assert (live["state"], live["host"], live["pid"]) == ("running", "box-a", 11)
    assert (live["slots"], live["slots_in_use"], live["all_queues"]) == (4, 2, True)
    assert live["last_seen"] and live["started_at"] and live["stopped_at"] is None
    dead = found[DEAD]
    assert (dead["state"], dead["runs_held"], dead["queues"]) == ("dead", 1, ["emails"])
    assert found[STOPPED]["state"] == "stopped" and found[STOPPED]["stopped_at"]
    lease_only = found[LEASE_ONLY]
    assert lease_only["slots"] is None and lease_only["runs_held"] == 1
    assert lease_only["kind"] == "run"


def test_a_gauge_of_workers_by_state(any_client: TestClient, any_rt: tenure.Runtime) -> None:
    seed_workers(any_rt)
    text = any_client.get("/metrics", headers=AUTH).text
    assert 'tenure_workers{state="running"} 1.0' in text
    assert 'tenure_workers{state="dead"} 1.0' in text
    assert 'tenure_workers{state="stopped"} 1.0' in text
    assert 'tenure_workers{state="stopping"} 0.0' in text


def test_a_real_worker_shows_in_the_view_while_idle(
    any_client: TestClient, any_rt: tenure.Runtime
) -> None:
    worker = any_rt.worker(concurrency=2, queues=["emails"], poll_interval=0.05)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        login(any_client)
        deadline = time.monotonic() + 10
        while worker.identity not in (rows := _rows(any_client.get("/leases").text)):
            assert time.monotonic() < deadline, "the worker never showed"
            time.sleep(0.05)
        state, cells = rows[worker.identity]
        assert state == "running" and '<td class="slots">0/2</td>' in cells
    finally:
        worker.stop()
        thread.join(10)
    state, _ = _rows(any_client.get("/leases").text)[worker.identity]
    assert state == "stopped"
