"""The chaos soak's checks of run trees (tests/_trees.py) on both stores: clean on trees a
worker ran (nested, a failed child, a spent budget), and each check catches a defect
planted in what it reads: an orphan, a parent left waiting, a child going on under an
ended root, a child created twice, a parent's answer that is not its child's, and a
completed child's write missing from the ledger or in it twice."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from tenure import EventKind, RunRequest, RunStatus
from tenure.store import NewEvent, NewRun

from .._trees import TreeReport, check_trees
from ..apps import SOAK_CHILD_SCRIPT, make_app


def tree(children: list[dict[str, object]], **fields: object) -> RunRequest:
    values = {"children": children, "tolerant": fields.pop("tolerant", True)}
    values["nested"] = fields.pop("nested", None)
    values["early"] = fields.pop("early", False)
    return RunRequest(
        agent="soak_parent", input=values, model="scripted", script=SOAK_CHILD_SCRIPT, **fields
    )  # type: ignore[arg-type]


@pytest.fixture
def worked(db_url: str, tmp_path: Path) -> Iterator[tuple[tenure.Runtime, Path, list[str]]]:
    ledger = tmp_path / "ledger"
    rt = make_app(db_url, str(ledger))
    roots = rt.enqueue_many(
        [
            # Nested, tolerant, one child failing by design.
            tree(
                [{"value": 1}, {"value": 2, "fail": True}, {"value": 3}],
                nested={"children": [{"value": 4}, {"value": 5}], "tolerant": False},
            ),
            # Not tolerant: the failed child fails the parent.
            tree([{"value": 6, "fail": True}], tolerant=False),
            # Three calls of 30 tokens on a budget of 60: the third is refused.
            tree([{"value": 7}, {"value": 8}, {"value": 9}], max_tokens=60),
            # Gathers its first child only and ends: the other is cancelled, or done.
            tree([{"value": 10}, {"value": 11, "sleep": 0.5}], early=True),
        ]
    )
    rt.work(concurrency=1, burst=True)
    yield rt, ledger, roots
    rt.close()


def checked(
    rt: tenure.Runtime,
    ledger: Path,
    runs: list[tenure.Run] | None = None,
    lines: list[str] | None = None,
) -> TreeReport:
    runs = rt.runs(limit=1000) if runs is None else runs
    events = {r.id: rt.events(r.id) for r in runs}
    if lines is None:
        lines = ledger.read_text().splitlines()
    return check_trees(runs, events, lines)


def test_clean_trees_pass(worked: tuple[tenure.Runtime, Path, list[str]]) -> None:
    rt, ledger, roots = worked
    report = checked(rt, ledger)
    assert report.problems == []
    counts = report.counts
    assert counts["runs in trees"] == (1 + 3 + 1 + 2) + (1 + 1) + (1 + 3) + (1 + 2)
    assert counts["parents"] == 5 and counts["nested parents"] == 1
    assert counts["children failed/not_retryable"] == 2
    assert counts["children failed/budget_exhausted"] == 1
    assert counts["parents completed"] == 4  # the nested parent too
    assert counts["parents ended early"] == 1
    assert json.loads(rt.status(roots[3]).output or "")["answers"] == [{"value": 10}]
    # Values 1, 3, 4, 5, 7, 8, 10, and 11 unless the early parent's end cancelled it first.
    late = _child(rt, roots[3], 11).status
    assert late in (RunStatus.COMPLETED, RunStatus.CANCELLED)
    assert counts["writes of completed children"] == 7 + (late is RunStatus.COMPLETED)
    first = json.loads(rt.status(roots[0]).output or "")
    assert first["sum"] == 1 + 3 + 4 + 5
    assert rt.status(roots[1]).status is RunStatus.FAILED


def _child(rt: tenure.Runtime, root: str, value: int) -> tenure.Run:
    for run in rt.runs(parent=root):
        request = rt.events(run.id)[0].payload
        if (request.get("input") or {}).get("value") == value:
            return run
    raise AssertionError(f"no child of value {value}")


def test_orphans_and_runs_left_going_are_caught(
    worked: tuple[tenure.Runtime, Path, list[str]],
) -> None:
    rt, ledger, roots = worked
    child = _child(rt, roots[0], 1)
    runs = [
        dataclasses.replace(r, parent_id="no-such-run") if r.id == child.id else r
        for r in rt.runs(limit=1000)
    ]
    problems = checked(rt, ledger, runs).problems
    assert any(f"child {child.id}: orphan" in p for p in problems), problems
    runs = [
        dataclasses.replace(r, status=RunStatus.WAITING_FOR_CHILDREN) if r.id == roots[2] else r
        for r in rt.runs(limit=1000)
    ]
    problems = checked(rt, ledger, runs).problems
    assert problems == [f"run {roots[2]}: still waiting for children at the end"]
    nested = next(
        r
        for r in rt.runs(parent=roots[0])
        if r.status is RunStatus.COMPLETED and "sum" in json.loads(r.output or "{}")
    )
    grandchild = rt.runs(parent=nested.id)[0]
    runs = [
        dataclasses.replace(r, status=RunStatus.QUEUED) if r.id == grandchild.id else r
        for r in rt.runs(limit=1000)
    ]
    problems = checked(rt, ledger, runs).problems
    assert f"run {grandchild.id}: queued below the ended root {roots[0]} (completed)" in problems


def test_a_child_created_twice_is_caught(
    worked: tuple[tenure.Runtime, Path, list[str]],
) -> None:
    rt, ledger, roots = worked
    child = _child(rt, roots[2], 7)
    # A second row under the same key, as a creation that did not see the first would make.
    twin = dataclasses.replace(child, id=child.id + "-twin")
    problems = checked(rt, ledger, [*rt.runs(limit=1000), twin]).problems
    assert f"parent {roots[2]}: 2 children under the key {child.idempotency_key}" in problems
    # A child in the database that no step of its parent recorded.
    data = {"agent": "soak_child", "input": {"value": 7}, "model": "scripted"}
    rt.store.enqueue_many(
        [
            NewRun(
                "extra-child",
                "default",
                json.dumps(data),
                f"{roots[2]}:99",
                events=(NewEvent(EventKind.REQUEST, data),),
                parent_id=roots[2],
                root_id=roots[2],
            )
        ]
    )
    problems = checked(rt, ledger).problems
    assert f"parent {roots[2]}: 4 children, 3 child steps recorded" in problems


def test_children_a_parent_ended_before_recording_are_not_created_twice(
    worked: tuple[tenure.Runtime, Path, list[str]],
) -> None:
    """A parent that ended (here: failed) between creating children and recording their
    steps has them without steps, as its last act: no defect. One at an earlier position
    than its last step is one created again: a defect."""
    rt, ledger, roots = worked
    failed = roots[1]
    data = {"agent": "soak_child", "input": {"value": 7}, "model": "scripted"}
    # Its steps: the child at position 0, the wait at 1.
    for position in (9, 1):
        rt.store.enqueue_many(
            [
                NewRun(
                    f"unrecorded-{position}",
                    "default",
                    json.dumps(data),
                    f"{failed}:{position}",
                    events=(NewEvent(EventKind.REQUEST, data),),
                    parent_id=failed,
                    root_id=failed,
                )
            ]
        )
        report = checked(rt, ledger)
        # Planted queued under an ended parent (the store would have cancelled them with
        # it): those findings are another check's.
        problems = [p for p in report.problems if not p.startswith("run unrecorded-")]
        if position == 9:
            assert problems == []
            assert report.counts["children whose step the parent ended before recording"] == 1
        else:
            assert problems == [f"parent {failed}: 3 children, 1 child steps recorded"]


def test_a_parent_answer_not_its_child_is_caught(
    worked: tuple[tenure.Runtime, Path, list[str]],
) -> None:
    rt, ledger, roots = worked
    child = _child(rt, roots[0], 3)
    runs = [
        dataclasses.replace(r, output=json.dumps({"value": 30})) if r.id == child.id else r
        for r in rt.runs(limit=1000)
    ]
    problems = checked(rt, ledger, runs).problems
    assert len(problems) == 1 and problems[0].startswith(f"parent {roots[0]}: answered"), problems
    root = rt.status(roots[0])
    output = json.loads(root.output or "")
    wrong = json.dumps({**output, "sum": output["sum"] + 1})
    runs = [
        dataclasses.replace(r, output=wrong) if r.id == root.id else r for r in rt.runs(limit=1000)
    ]
    problems = checked(rt, ledger, runs).problems
    assert problems == [f"parent {roots[0]}: sum {output['sum'] + 1} is not its children's"]


def test_a_completed_child_write_not_in_the_ledger_once_is_caught(
    worked: tuple[tenure.Runtime, Path, list[str]],
) -> None:
    rt, ledger, roots = worked
    child = _child(rt, roots[0], 3)
    lines = ledger.read_text().splitlines()
    mine = [line for line in lines if line.startswith(child.id + " ")]
    assert len(mine) == 1
    gone = [line for line in lines if line not in mine]
    twice = [*lines, *mine]
    for planted in (gone, twice):
        problems = checked(rt, ledger, lines=planted).problems
        assert problems == [
            f"child {child.id}: a write step of the completed child is not in the ledger "
            "exactly once"
        ]


def test_a_run_failed_otherwise_than_by_design_is_caught(
    worked: tuple[tenure.Runtime, Path, list[str]],
) -> None:
    rt, ledger, roots = worked
    failed = rt.status(roots[1])
    assert failed is not None and "raised ChildFailed: " in failed.error
    error = "agent soak_parent raised StoreError: the database refused the write"
    runs = [dataclasses.replace(r, error=error) if r.id == failed.id else r for r in rt.runs()]
    problems = checked(rt, ledger, runs).problems
    assert problems == [
        f"run {failed.id}: failed not_retryable otherwise than by design: {error}"
    ], problems
