"""The deciders' rendezvous: no decision is written before every decider has reached its own
or left; a timeout ends the wait, and consume-once then says the race was not forced."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

from tenure._types import Event, EventKind, RunRequest
from tenure.audit import AuditReport
from tenure.testing._cases import REFERENCE, Case, Hold
from tenure.testing._properties import Finished, consume_once
from tenure.testing._rendezvous import Rendezvous
from tenure.testing._scenarios import Scenario

WHO = ("decider-1", "decider-2", "decider-3")


def test_no_decider_goes_on_before_all_have_arrived(tmp_path: Path) -> None:
    arrived_late = threading.Event()
    seen: dict[str, set[str]] = {}

    def decider(who: str) -> None:
        if who == WHO[-1]:
            # The others are already waiting when the last one arrives.
            arrived_late.wait()
        r = Rendezvous(tmp_path, who, len(WHO), timeout=60)
        r.meet()
        seen[who] = {p.name for p in tmp_path.iterdir()} | {f"met:{r.met}"}

    threads = [threading.Thread(target=decider, args=(who,), daemon=True) for who in WHO]
    for t in threads:
        t.start()
    try:
        for t in threads[:-1]:
            t.join(timeout=0.5)
            assert t.is_alive(), "a decider went on while another had not arrived"
    finally:
        arrived_late.set()
        for t in threads:
            t.join()
    for who in WHO:
        assert seen[who] >= {f"met-{w}" for w in WHO} | {"met:True"}, who


def test_a_decider_that_left_without_deciding_is_not_waited_for(tmp_path: Path) -> None:
    Rendezvous(tmp_path, "decider-2", 2, timeout=60).leave()
    waiting = Rendezvous(tmp_path, "decider-1", 2, timeout=60)
    waiting.meet()
    assert waiting.met is True


def test_the_wait_ends_at_the_timeout_and_says_so(tmp_path: Path) -> None:
    alone = Rendezvous(tmp_path, "decider-1", 3, timeout=0.05)
    alone.meet()
    assert alone.met is False
    # The same process's later decisions are not in the race: they do not wait again.
    alone.meet()
    assert alone.met is False


def _finished(outcomes: list[dict[str, object]]) -> Finished:
    scenario = Scenario("refund", RunRequest(prompt="refund"))
    hold = Hold(2, [], outcomes=outcomes)
    case = Case(scenario, REFERENCE, "sqlite://", run_id="r1", holds=[hold])
    approval = Event("r1", 3, 1, EventKind.APPROVAL, {"turn": 2}, datetime.now(UTC))
    return Finished(case, None, [approval], {}, AuditReport())


def test_consume_once_says_when_the_deciders_did_not_all_meet() -> None:
    met = [{"won": True, "error": None, "met": True}, {"won": False, "error": None, "met": True}]
    assert consume_once(_finished(met), None).detail == ""
    apart = [{"won": True, "error": None, "met": False}, {"won": False, "error": None}]
    verdict = consume_once(_finished(apart), None)
    assert verdict.ok is True
    assert verdict.detail == "turn 2: the deciders did not all meet before deciding"
