"""The human gate's decisions, without a database (agent/_human.py)."""

from __future__ import annotations

import json
from pathlib import Path

import tenure
from tenure import ToolEffect
from tenure.agent import _human


def _tools(tmp_path: Path) -> tenure.Runtime:
    rt = tenure.Runtime(f"sqlite:///{tmp_path / 'gate.db'}")

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        return order

    @rt.tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    def tag(order: str) -> str:
        return order

    return rt


def test_approval_is_needed_by_declaration_or_for_every_write_when_asked(
    tmp_path: Path,
) -> None:
    rt = _tools(tmp_path)
    refund, tag = rt.engine.tools.get("refund"), rt.engine.tools.get("tag")
    assert _human.needs_approval(refund, approve_writes=False)
    assert not _human.needs_approval(tag, approve_writes=False)
    assert _human.needs_approval(tag, approve_writes=True)
    assert not _human.needs_approval(None, approve_writes=True)
    rt.close()


def test_a_decision_counts_only_for_its_own_turn() -> None:
    decision = json.dumps({"turn": 3, "values": {"zip": "10115"}})
    assert _human.decided_values(decision, 3) == {"zip": "10115"}
    assert _human.decided_values(decision, 4) is None
    assert _human.decided_values(None, 3) is None
    assert _human.decided_values(json.dumps({"turn": 3, "values": "x"}), 3) is None
