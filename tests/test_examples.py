"""Each app of examples/ runs as a user would start it (`python examples/NAME.py`), on each
store, and does what its docstring says."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from tenure import RunStatus

from .providers.conftest import ChatServer, completion

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _run(
    name: str, cwd: Path, db_url: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TENURE_"))}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), *args],
        cwd=cwd,
        env={**clean, "TENURE_DATABASE_URL": db_url, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_support_agent_refunds_once_after_approval(tmp_path: Path, db_url: str) -> None:
    done = _run("support_agent", tmp_path, db_url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith(": waiting_for_approval")
    assert "waiting on refund(" in lines[1] and "non_idempotent_write" in lines[1]
    assert "completed: I have refunded order A-1001" in lines[2]
    assert lines[3] == "refunds made: 1"
    with tenure.Runtime(db_url) as rt:
        (run,) = rt.runs()
        kinds = [e.kind for e in rt.events(run.id)]
    assert kinds.count("approval") == 1
    assert sum(1 for e in kinds if e == "tool") == 2


def test_support_triage_agent_function_routes_and_refunds_once(tmp_path: Path, db_url: str) -> None:
    done = _run("support_triage", tmp_path, db_url)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "waiting on refund({'ticket_id': 'T-1', 'order_id': 'A-7'})" in out
    assert '"status": "refunded"' in out and "It ships within 2 working days." in out
    assert out.splitlines()[-1] == "refunds made: 1"
    with tenure.Runtime(db_url) as rt:
        runs = rt.runs()
        assert {r.status for r in runs} == {RunStatus.COMPLETED} and len(runs) == 2
        refunded = [
            e.payload
            for r in runs
            for e in rt.events(r.id)
            if e.kind == "tool" and e.payload["name"] == "refund"
        ]
    assert len(refunded) == 1 and refunded[0]["idempotency_key"].endswith(":2")
    assert [p for p in (refunded[0]["position"], refunded[0]["step"])] == [2, "tool"]


def test_fork_repair_reruns_the_failed_step_without_charging_again(
    tmp_path: Path, db_url: str
) -> None:
    done = _run("fork_repair", tmp_path, db_url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith(
        "failed (not_retryable): agent fulfil raised ToolFailed: shipping_label failed: "
        "KeyError: 'kilograms'"
    )
    assert "kept ['load_order', 'charge', 'reserve'], runs again ['shipping_label']" in lines[1]
    assert lines[2] == "non-idempotent writes that would repeat: []"
    assert lines[3].startswith("from the charge: refused: ") and "charge (sequence" in lines[3]
    assert lines[4].endswith('completed: {"order": "A-1", "label": "A-1 to Lyon, 0.9 kg"}')
    assert lines[5] == "cards charged: 1"
    with tenure.Runtime(db_url) as rt:
        runs = rt.runs()
        (fork,) = [r for r in runs if r.forked_from is not None]
        (original,) = [r for r in runs if r.forked_from is None]
        assert original.is_dead_letter and fork.status is RunStatus.COMPLETED
        assert fork.forked_from is not None and fork.forked_from.run_id == original.id
        charges = [
            e.payload["idempotency_key"]
            for e in rt.events(fork.id)
            if e.kind == "tool" and e.payload["name"] == "charge"
        ]
        assert charges == [f"{original.id}:1"]  # the kept charge, as recorded


def test_research_agent_fans_out_to_child_runs(tmp_path: Path, db_url: str) -> None:
    done = _run("research_fanout", tmp_path, db_url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    parent = lines[0].split()[1].rstrip(":")
    assert lines[0].endswith(": completed")
    assert sorted(line.split()[-1] for line in lines[1:4]) == ["completed", "completed", "failed"]
    assert '"source": "journal"' in lines[4] and "forum is unreachable" in lines[4]
    with tenure.Runtime(db_url) as rt:
        children = rt.runs(parent=parent)
        assert len(children) == 3 and {c.root_id for c in children} == {parent}
        keys = sorted(c.idempotency_key or "" for c in children)
        assert keys == [f"{parent}:{p}" for p in (1, 2, 3)]
        parent_run = rt.status(parent)
        assert parent_run is not None
        claims = [e for e in rt.events(parent) if e.kind == "claimed"]
        assert len(claims) == 2  # one worker slot: the parent waited, gave it up, came back


@pytest.mark.slow
def test_batch_of_documents_with_three_workers(tmp_path: Path, db_url: str) -> None:
    first = _run("batch_documents", tmp_path, db_url)
    assert first.returncode == 0, first.stderr
    assert "30 documents: {'completed': 30}; summaries stored now: 30" in first.stdout
    with tenure.Runtime(db_url) as rt:
        runs = rt.runs(queue="documents", limit=100)
        assert len(runs) == 30 and {r.status for r in runs} == {RunStatus.COMPLETED}
        # Three workers shared the batch (each claim names its worker).
        owners = {
            e.payload.get("worker") for r in runs for e in rt.events(r.id) if e.kind == "claimed"
        }
    assert len(owners) >= 2, owners
    again = _run("batch_documents", tmp_path, db_url)
    assert again.returncode == 0, again.stderr
    assert "summaries stored now: 0" in again.stdout  # the idempotency keys held


def test_multi_tenant_priorities_keys_and_schedules(tmp_path: Path, db_url: str) -> None:
    done = _run("multi_tenant", tmp_path, db_url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # Initech's report was enqueued last, behind fourteen; the claim takes it first. Only a
    # claim of the other worker in flight at the same moment (on PostgreSQL, where claims
    # run side by side; at most four runs) can be stamped before it.
    before_initech = int(lines[0].split(": ")[1].split()[0])
    assert before_initech <= 4, lines[0]
    # Not behind Acme's twelve: at most Acme's limit of them. (All runs before it can be
    # three: the other worker's claim of Acme's two may be stamped before the claim that
    # took Initech's report and Globex's.)
    acme_before_globex = int(lines[1].split(": ")[1].split()[0])
    assert acme_before_globex <= 2, lines[1]
    assert lines[2] == "most acme reports running at once: 2 (limit 2)"
    assert lines[3] == "15 reports: {'completed': 15}"
    assert [line.split(":")[0] for line in lines[4:]] == [
        "digest-acme",
        "digest-globex",
        "digest-initech",
    ]
    with tenure.Runtime(db_url) as rt:
        keys = {k.key: k for k in rt.concurrency_keys()}
        assert keys["acme"].limit == 2 and keys["acme"].running == 0
        assert len(rt.schedules()) == 3


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer()
    yield server
    server.close()


def test_openai_endpoint_from_environment(
    tmp_path: Path, db_url: str, chat_server: ChatServer
) -> None:
    endpoint = chat_server.endpoint()
    endpoint.push(
        completion(calls=[("weather", {"city": "Oslo"})], model="local-model"),
        completion(text="Light snow in Oslo today, around -3 °C.", model="local-model"),
    )
    done = _run(
        "openai_endpoint",
        tmp_path,
        db_url,
        OPENAI_BASE_URL=endpoint.url,
        OPENAI_API_KEY="test-key",
        TENURE_MODEL="local-model",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Light snow in Oslo today, around -3 °C."
    first, second = (r["body"] for r in endpoint.requests)
    assert first["model"] == "local-model"
    tool_results = [m for m in second["messages"] if m.get("role") == "tool"]
    assert tool_results and "light snow" in tool_results[0]["content"]


def test_openai_endpoint_failure_is_reported(
    tmp_path: Path, db_url: str, chat_server: ChatServer
) -> None:
    from .providers.conftest import error

    endpoint = chat_server.endpoint().push(error(401, "bad key"))
    done = _run(
        "openai_endpoint", tmp_path, db_url, OPENAI_BASE_URL=endpoint.url, OPENAI_API_KEY="x"
    )
    assert done.returncode == 1
    assert "failed (not_retryable)" in done.stderr and "bad key" in done.stderr


def test_async_tools_wait_together_on_one_worker(tmp_path: Path, db_url: str) -> None:
    done = _run("async_tools", tmp_path, db_url)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first.startswith("8 of 8 runs completed in ")
    # Eight 0.5 s look-ups awaited together: about one run's time, far from eight's 4 s.
    assert float(first.split(" in ")[1].removesuffix(" s")) < 3.5, first
    assert second == "quotes booked: 8"
    assert "Task was destroyed" not in done.stderr, done.stderr  # the loop ends cleanly
    with tenure.Runtime(db_url) as rt:
        runs = rt.runs(limit=20)
        assert len(runs) == 8 and {r.status for r in runs} == {RunStatus.COMPLETED}
        tools = [e.payload for e in rt.events(runs[0].id) if e.kind == "tool"]
    assert [t["name"] for t in tools] == ["exchange_rate", "book_quote"]
    assert tools[0]["result"] == 1.08 and tools[1]["effect"] == "non_idempotent_write"
    assert runs[0].output is not None and runs[0].output.startswith("100 EUR is quoted; ")
