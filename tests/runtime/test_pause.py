"""Pausing a queue (`Runtime.pause_queue`): a working worker claims nothing of it until it is
resumed, and a run it was already executing finishes. Real worker, both stores."""

from __future__ import annotations

import threading

import pytest

import tenure
from tenure import EventKind, InvalidRequest, RunStatus

from .test_worker import nap_request, start, wait_for, with_nap


def _status(rt: tenure.Runtime, run_id: str) -> RunStatus:
    run = rt.status(run_id)
    assert run is not None
    return run.status


def _claims(rt: tenure.Runtime, run_id: str) -> int:
    return sum(e.kind is EventKind.CLAIMED for e in rt.events(run_id))


def test_a_worker_claims_nothing_of_a_paused_queue_until_it_is_resumed(
    runtime: tenure.Runtime,
) -> None:
    rt = with_nap(runtime)
    assert rt.pause_queue("mail", by="ops")
    mail = rt.enqueue_many([nap_request(0, "mail") for _ in range(3)])
    worker = rt.worker(concurrency=2, poll_interval=0.02)
    thread = start(worker)
    try:
        # The worker is claiming: runs of another queue, enqueued before and after the mail
        # runs, are taken and finished while the mail runs wait.
        for _ in range(3):
            other = rt.enqueue(nap_request(0, "other"))
            wait_for(lambda: _status(rt, other) is RunStatus.COMPLETED)  # noqa: B023
        assert [_status(rt, r) for r in mail] == [RunStatus.QUEUED] * 3
        assert [_claims(rt, r) for r in mail] == [0, 0, 0]
        assert [q.to_json()["paused"] for q in rt.queues() if q.name == "mail"] == [True]

        assert rt.resume_queue("mail")
        for run_id in mail:
            wait_for(lambda: _status(rt, run_id) is RunStatus.COMPLETED)  # noqa: B023
    finally:
        worker.stop()
        thread.join(15)
    assert not thread.is_alive()


def test_a_run_already_running_when_its_queue_is_paused_finishes(
    runtime: tenure.Runtime,
) -> None:
    rt = with_nap(runtime)
    release = threading.Event()

    @rt.tool
    def hold() -> str:
        release.wait(10)
        return "held"

    running = rt.enqueue(
        tenure.RunRequest(
            prompt="hold",
            model="scripted",
            tools=["hold"],
            queue="mail",
            script=[{"call": [{"tool": "hold", "args": {}}]}, {"say": "done"}],
        )
    )
    worker = rt.worker(concurrency=2, poll_interval=0.02)
    thread = start(worker)
    try:
        wait_for(lambda: _status(rt, running) is RunStatus.RUNNING)
        assert rt.pause_queue("mail")
        waiting = rt.enqueue(nap_request(0, "mail"))
        release.set()
        wait_for(lambda: _status(rt, running) is RunStatus.COMPLETED)
        other = rt.enqueue(nap_request(0, "other"))
        wait_for(lambda: _status(rt, other) is RunStatus.COMPLETED)
        assert _status(rt, waiting) is RunStatus.QUEUED
    finally:
        worker.stop()
        thread.join(15)


def test_a_paused_queue_is_listed_with_its_runs(runtime: tenure.Runtime) -> None:
    rt = with_nap(runtime)
    rt.enqueue_many([nap_request(0, "mail") for _ in range(2)])
    rt.enqueue(nap_request(0, "other"))
    rt.pause_queue("mail", by="alice")
    rt.pause_queue("idle")
    listed = {q.name: q for q in rt.queues()}
    assert sorted(listed) == ["idle", "mail", "other"]
    assert (listed["mail"].queued, listed["mail"].paused is not None) == (2, True)
    assert listed["mail"].paused.paused_by == "alice"  # type: ignore[union-attr]
    assert (listed["other"].queued, listed["other"].paused) == (1, None)
    assert listed["idle"].queued == 0
    assert [p.queue for p in rt.paused_queues()] == ["idle", "mail"]
    assert not rt.pause_queue("mail")
    assert rt.resume_queue("idle") and not rt.resume_queue("idle")


@pytest.mark.parametrize("name", ["", "x" * 201, "a\x00b", 7])
def test_a_bad_queue_name_is_refused(runtime: tenure.Runtime, name: object) -> None:
    with pytest.raises(InvalidRequest, match="queue"):
        runtime.pause_queue(name)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="queue"):
        runtime.resume_queue(name)  # type: ignore[arg-type]
    assert runtime.paused_queues() == []
