"""The chaos soak's checks of run trees (SPEC §21), beside `tenure.audit`, on the rows and
events read after every run has ended (bench/soak.py `--fanout`, tests/crash/test_soak.py,
tests/crash/test_trees.py).

- no orphan: every child's parent and root exist; no run is left waiting for children or
  otherwise not ended; every run not ended below an ended root is named;
- no child created twice: per parent, its children's keys (`PARENT_ID:POSITION`) are
  those of the child steps it recorded, each once, and it has as many children as steps
  (but for children created as the last act of a parent that then ended unrecorded);
- a completed `soak_parent`'s answers are the ends of the children it gathered, in order
  (a completed child's stored output; a failed one's status and reason), and its sum theirs;
- every non-idempotent write step of a completed child is in the ledger exactly once;
- no run of a tree failed otherwise than by design (a child's own failure, a spent budget,
  a parent's uncaught `ChildFailed`).

Each finding is one line in `problems`; `counts` says what was seen.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tenure import Event, EventKind, Run, RunStatus

from .apps import answer_worth, awaited

WRITE_STEPS = (EventKind.LLM, EventKind.TOOL, EventKind.STEP)


@dataclass
class TreeReport:
    counts: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)


def ledger_keys(lines: Iterable[str]) -> Counter[str]:
    """How many times each idempotency key is in the ledger (`RUN_ID KEY [TOKEN]` lines)."""
    return Counter(line.split()[1] for line in lines if line.strip())


def writes_not_once(events: Sequence[Event], in_ledger: Mapping[str, int]) -> tuple[int, int]:
    """A completed run's non-idempotent write steps, and how many of them are not in the
    ledger exactly once."""
    writes = missing = 0
    for e in events:
        p = e.payload
        if (
            e.kind in WRITE_STEPS
            and p.get("effect") == "non_idempotent_write"
            and not p.get("error")
        ):
            writes += 1
            missing += in_ledger.get(str(p.get("idempotency_key")), 0) != 1
    return writes, missing


def check_trees(
    runs: Sequence[Run], events: Mapping[str, Sequence[Event]], ledger_lines: Iterable[str]
) -> TreeReport:
    """Check every run tree among `runs` (their events in `events`, by run id)."""
    report = TreeReport()
    by_id = {r.id: r for r in runs}
    children: dict[str, list[Run]] = {}
    for run in runs:
        if run.parent_id is not None:
            children.setdefault(run.parent_id, []).append(run)
    in_ledger = ledger_keys(ledger_lines)
    for run in runs:
        if run.parent_id is None and run.id not in children:
            continue  # not in a tree
        report.counts["runs in trees"] += 1
        _check_place(run, by_id, report)
        child_steps = _child_steps(events.get(run.id, ()))
        if run.id in children or child_steps:
            report.counts["parents"] += 1
            report.counts["nested parents"] += run.parent_id is not None
            last = _last_position(events.get(run.id, ()))
            _check_children(run, children.get(run.id, []), child_steps, last, report)
            request = _request(events.get(run.id, ()))
            if run.status is RunStatus.COMPLETED and request.get("agent") == "soak_parent":
                kids = [by_id.get(i) for _, i in child_steps]
                if (request.get("input") or {}).get("early"):
                    report.counts["parents ended early"] += 1
                    kids = kids[: awaited(len(kids))]
                _check_answers(run, kids, report)
        _check_failure(run, report)
        if run.parent_id is not None:
            _check_child(run, events.get(run.id, ()), in_ledger, report)
            if run.status is RunStatus.CANCELLED:
                report.counts[f"children cancelled: {_why_cancelled(run, by_id, events)}"] += 1
    _check_ended_roots(runs, children, report)
    return report


def _check_child(
    run: Run, events: Sequence[Event], in_ledger: Mapping[str, int], report: TreeReport
) -> None:
    """How a child ended; a completed child's writes each in the ledger exactly once."""
    report.counts["children"] += 1
    reason = run.termination_reason
    why = f"/{reason}" if reason is not None and str(reason) != str(run.status) else ""
    report.counts[f"children {run.status}{why}"] += 1
    if run.status is not RunStatus.COMPLETED:
        return
    writes, missing = writes_not_once(events, in_ledger)
    report.counts["writes of completed children"] += writes
    for _ in range(missing):
        report.problems.append(
            f"child {run.id}: a write step of the completed child is not in the ledger exactly once"
        )


# How a run of a soak tree fails by design: a child's own failure, a spent budget, a
# parent's uncaught ChildFailed. Any other failure is a run lost to something else.
_BY_DESIGN = ("fails by design", "raised ChildFailed: ")


def _check_failure(run: Run, report: TreeReport) -> None:
    if run.status is not RunStatus.FAILED or str(run.termination_reason) == "budget_exhausted":
        return
    if any(words in run.error for words in _BY_DESIGN):
        return
    report.counts[f"failed otherwise: {run.error[:100]}"] += 1
    report.problems.append(
        f"run {run.id}: failed {run.termination_reason} otherwise than by design: {run.error[:300]}"
    )


def _why_cancelled(
    run: Run, by_id: Mapping[str, Run], events: Mapping[str, Sequence[Event]]
) -> str:
    """What ended the parent that took this child with it: an operator's cancel, a parent
    that gathered only some of its children, or its failure (its error, shortened)."""
    parent = by_id.get(str(run.parent_id))
    if parent is None:
        return "parent missing"
    if parent.status is RunStatus.CANCELLED:
        return "parent cancelled"
    if (_request(events.get(parent.id, ())).get("input") or {}).get("early"):
        return f"parent {parent.status}, ended early"
    return f"parent {parent.status}: {parent.error[:90]}"


def _request(events: Sequence[Event]) -> dict[str, Any]:
    if not events or events[0].kind is not EventKind.REQUEST:
        return {}
    return dict(events[0].payload)


def _last_position(events: Sequence[Event]) -> int:
    """The position of the last step the run recorded (-1: none)."""
    return max(
        (
            int(e.payload["position"])
            for e in events
            if e.kind in (*WRITE_STEPS, EventKind.SLEEPING, EventKind.WAITING)
            and isinstance(e.payload.get("position"), int)
        ),
        default=-1,
    )


def _child_steps(events: Sequence[Event]) -> list[tuple[int, str]]:
    """(position, child run id) of each child step the run recorded, in order."""
    return sorted(
        (int(e.payload["position"]), str((e.payload.get("result") or {}).get("run_id")))
        for e in events
        if e.kind is EventKind.STEP and e.payload.get("step") == "child"
    )


def _check_place(run: Run, by_id: Mapping[str, Run], report: TreeReport) -> None:
    """No orphan: a child's parent and root exist, the root is a root; nothing left going."""
    if run.status is RunStatus.WAITING_FOR_CHILDREN:
        report.problems.append(f"run {run.id}: still waiting for children at the end")
    elif not run.status.is_terminal:
        report.problems.append(f"run {run.id}: not ended at the end ({run.status})")
    if run.parent_id is None:
        if run.root_id not in (None, run.id):
            report.problems.append(f"run {run.id}: no parent, but its root is {run.root_id}")
        return
    parent = by_id.get(run.parent_id)
    root = by_id.get(str(run.root_id))
    if parent is None:
        report.problems.append(f"child {run.id}: orphan, its parent {run.parent_id} is missing")
    if root is None or root.parent_id is not None:
        report.problems.append(f"child {run.id}: its root {run.root_id} is missing or no root")
    elif parent is not None and (parent.root_id or parent.id) != root.id:
        report.problems.append(f"child {run.id}: its root is not its parent's root")


def _position(parent: Run, kid: Run) -> int:
    key = str(kid.idempotency_key)
    prefix = f"{parent.id}:"
    tail = key[len(prefix) :] if key.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else -1


def _check_children(
    parent: Run,
    kids: list[Run],
    steps: list[tuple[int, str]],
    last_position: int,
    report: TreeReport,
) -> None:
    """No child created twice: the children's keys are the recorded steps' positions."""
    positions = Counter(pos for pos, _ in steps)
    for pos, n in positions.items():
        if n > 1:
            report.problems.append(f"parent {parent.id}: child step {pos} recorded {n} times")
    keys = Counter(k.idempotency_key for k in kids)
    for key, n in keys.items():
        if n > 1:
            report.problems.append(f"parent {parent.id}: {n} children under the key {key}")
    recorded = {f"{parent.id}:{pos}" for pos, _ in steps}
    unrecorded = [k for k in kids if k.idempotency_key not in recorded]
    if unrecorded:
        # Creating children and recording their steps are two transactions: a parent that
        # ended between them (cancelled, or its worker killed and its run then failed) has
        # them without steps, as its last act. Any other child without a step is one made
        # again under another position: created twice.
        ended = parent.status in (RunStatus.CANCELLED, RunStatus.FAILED)
        last = all(_position(parent, k) > last_position for k in unrecorded)
        if ended and last:
            report.counts["children whose step the parent ended before recording"] += len(
                unrecorded
            )
        else:
            report.problems.append(
                f"parent {parent.id}: {len(kids)} children, {len(steps)} child steps recorded"
            )
    by_key = {k.idempotency_key: k for k in kids}
    for pos, child_id in steps:
        kid = by_key.get(f"{parent.id}:{pos}")
        if kid is None or kid.id != child_id:
            report.problems.append(
                f"parent {parent.id}: child step {pos} names {child_id}, but the child under "
                f"the key {parent.id}:{pos} is {kid.id if kid else 'missing'}"
            )


def _check_answers(parent: Run, kids: list[Run | None], report: TreeReport) -> None:
    """A completed parent's answers are its children's ends (SPEC §21: what `ctx.gather`
    returned), and its sum theirs."""
    report.counts["parents completed"] += 1
    try:
        output = json.loads(parent.output or "")
        answers = list(output["answers"])
        total = output["sum"]
    except (ValueError, TypeError, KeyError):
        report.problems.append(f"parent {parent.id}: output {parent.output!r} is not a tree's")
        return
    expected = [_expected(k) for k in kids]
    if answers != expected:
        report.problems.append(
            f"parent {parent.id}: answered {answers}, its children ended {expected}"
        )
    elif total != sum(answer_worth(a) for a in expected):
        report.problems.append(f"parent {parent.id}: sum {total} is not its children's")


def _expected(kid: Run | None) -> Any:
    if kid is None:
        return "missing"
    if kid.status is RunStatus.COMPLETED:
        try:
            return json.loads(kid.output or "")
        except ValueError:
            return kid.output
    return {"failed": str(kid.status), "reason": str(kid.termination_reason)}


def _check_ended_roots(
    runs: Sequence[Run], children: dict[str, list[Run]], report: TreeReport
) -> None:
    """Every run not ended below an ended root, named (the audit sees a child going on
    under an ended parent; this walks the whole tree down from the root)."""
    for root in runs:
        if root.parent_id is not None or not root.status.is_terminal:
            continue
        below = list(children.get(root.id, []))
        while below:
            run = below.pop()
            below.extend(children.get(run.id, []))
            if not run.status.is_terminal:
                report.problems.append(
                    f"run {run.id}: {run.status} below the ended root {root.id} ({root.status})"
                )
