"""Each command of SPEC §10 through the real executable: output and exit codes."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import tenure
from tenure import RunRequest, RunStatus, TerminationReason

from .conftest import INVOICE_SCRIPT, Cli, one_line_error

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
RUN_FIELDS = {f.name for f in dataclasses.fields(tenure.Run)}
EVENT_FIELDS = {f.name for f in dataclasses.fields(tenure.Event)}
SPEC_EVENT_FIELDS = {"run_id", "sequence", "attempt", "kind", "payload", "created_at"}
AUTH_FAILURE = [{"fail": "auth"}, {"say": "never"}]


def test_the_console_script_and_python_m_both_work(cli: Cli) -> None:
    script = shutil.which("tenure", path=str(Path(sys.executable).parent))
    assert script is not None
    done = subprocess.run([script, "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"tenure {tenure.__version__}"
    assert cli("--version", database=False).out.strip() == f"tenure {tenure.__version__}"


def test_no_command_prints_help_and_exits_2(cli: Cli) -> None:
    result = cli()
    assert result.code == 2
    assert "enqueue" in result.err and "redrive" in result.err


def test_init_creates_the_schema(cli: Cli) -> None:
    result = cli("init")
    assert result.code == 0
    assert result.out.startswith(f"database ready: {cli.url}")
    assert (cli.cwd / "tenure.db").exists()


def test_database_comes_from_the_environment_when_not_given(cli: Cli) -> None:
    result = cli("init", database=False, TENURE_DATABASE_URL=f"sqlite:///{cli.cwd / 'env.db'}")
    assert result.code == 0
    assert (cli.cwd / "env.db").exists()
    assert cli("init", database=False).code == 0
    assert (cli.cwd / "tenure.db").exists()  # the default, in the current directory


def test_enqueue_prints_the_run_id_and_a_burst_worker_completes_it(
    cli: Cli, runtime: tenure.Runtime
) -> None:
    run_id = cli.enqueue(INVOICE_SCRIPT, "send_invoice")
    assert UUID.match(run_id)
    assert runtime.status(run_id).status is RunStatus.QUEUED  # type: ignore[union-attr]

    result = cli("worker", "--burst")
    assert result.code == 0, result.err
    assert "burst done: claimed 1 run (1 completed)" in result.out

    run = runtime.status(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert run.output == "Invoice sent."


def test_enqueue_options_reach_the_run(cli: Cli, runtime: tenure.Runtime) -> None:
    script = cli.script(INVOICE_SCRIPT)
    args = ["enqueue", "--prompt", "p", "--tool", "send_invoice", "--script", script]
    first = cli(*args, "--queue", "billing", "--delay", "60", "--idempotency-key", "inv-1").out
    again = cli(*args, "--queue", "billing", "--idempotency-key", "inv-1").out
    assert first == again  # the key is taken: the existing run
    run = runtime.status(first.strip())
    assert run is not None
    assert (run.queue, run.idempotency_key) == ("billing", "inv-1")
    assert (run.available_at - run.created_at).total_seconds() >= 59
    assert cli("worker", "--burst", "--queue", "billing").out.count("claimed 0 runs") == 1


def test_run_executes_here_and_prints_outcome_and_answer(cli: Cli) -> None:
    script = cli.script(INVOICE_SCRIPT)
    result = cli("run", "--prompt", "p", "--tool", "send_invoice", "--script", script)
    assert result.code == 0, result.err
    first, answer = result.out.strip().splitlines()
    assert first.startswith("completed (completed)  ")
    assert UUID.match(first.split()[-1])
    assert answer == "Invoice sent."


def test_run_that_fails_exits_1_with_its_error(cli: Cli) -> None:
    result = cli("run", "--prompt", "p", "--script", cli.script(AUTH_FAILURE))
    assert result.code == 1
    assert result.out.startswith("failed (provider_failed)")
    assert "auth" in result.err and "Traceback" not in result.err


def test_runs_is_an_aligned_plain_table_when_piped(cli: Cli) -> None:
    ids = [cli.enqueue(INVOICE_SCRIPT, "send_invoice") for _ in range(2)]
    cli("cancel", ids[0])
    result = cli("runs")
    assert result.code == 0
    assert "\x1b[" not in result.out
    header, *rows = result.out.splitlines()
    assert header.split() == [
        "id", "queue", "status", "reason", "attempt", "requeues", "fence", "updated", "error"
    ]  # fmt: skip
    assert len(rows) == 2
    column = header.index("status")
    assert sorted(row[column:].split()[0] for row in rows) == ["cancelled", "queued"]
    assert {row.split()[0] for row in rows} == set(ids)
    reason = header.index("reason")
    assert [row[reason:].split()[0] for row in rows if "cancelled" in row] == ["cancelled"]


def test_runs_is_coloured_on_a_terminal(cli: Cli) -> None:
    cli.enqueue(INVOICE_SCRIPT, "send_invoice")
    assert "\x1b[" in cli("runs", FORCE_COLOR="1", TTY_COMPATIBLE="1").out


def test_runs_filters_and_json(cli: Cli) -> None:
    queued = cli.enqueue(INVOICE_SCRIPT, "send_invoice")
    cancelled = cli.enqueue(INVOICE_SCRIPT, "send_invoice")
    cli("cancel", cancelled)
    rows = cli("runs", "--json").json()
    assert isinstance(rows, list) and len(rows) == 2
    assert all(set(row) == RUN_FIELDS for row in rows)
    assert [r["id"] for r in cli("runs", "--status", "queued", "--json").json()] == [queued]
    by_reason = cli("runs", "--reason", "cancelled", "--json").json()
    assert [r["id"] for r in by_reason] == [cancelled]
    assert len(cli("runs", "--limit", "1", "--json").json()) == 1
    assert cli("runs", "--queue", "elsewhere", "--json").json() == []
    assert cli("runs", "--queue", "elsewhere").out.strip() == "no runs"


def test_status_shows_one_run(cli: Cli) -> None:
    run_id = cli.enqueue(INVOICE_SCRIPT, "send_invoice")
    lines = cli("status", run_id).out.splitlines()
    assert lines[0].split() == ["id", run_id]
    assert ["status", "queued"] in [line.split() for line in lines]
    data = cli("status", run_id, "--json").json()
    assert set(data) == RUN_FIELDS | {"agent", "input", "budget"}
    assert (data["id"], data["status"], data["request"]) == (run_id, "queued", None)
    assert (data["agent"], data["input"]) == (None, None)  # a run of the built-in loop
    assert data["budget"] is None  # no budget: no ledger


def test_events_lists_the_stream_and_json_parses(cli: Cli) -> None:
    run_id = cli.enqueue(INVOICE_SCRIPT, "send_invoice")
    cli("worker", "--burst")
    lines = cli("events", run_id).out.splitlines()
    kinds = [line.split()[3] for line in lines]
    assert kinds == ["request", "claimed", "llm", "tool", "llm", "assembled"]
    assert "send_invoice" in lines[3] and "non_idempotent_write" in lines[3]
    events = cli("events", run_id, "--json").json()
    assert [e["sequence"] for e in events] == list(range(6))
    assert all(set(e) == EVENT_FIELDS >= SPEC_EVENT_FIELDS for e in events)
    assert events[3]["payload"]["result"]["customer_id"] == "42"
    after = cli("events", run_id, "--after", "3", "--json").json()
    assert [e["kind"] for e in after] == ["llm", "assembled"]


def test_events_follow_streams_until_the_run_ends(cli: Cli) -> None:
    run_id = cli.enqueue([{"sleep": 1.0}, *INVOICE_SCRIPT], "send_invoice")
    follower = cli.popen("events", run_id, "--follow", "--json")
    worker = cli.popen("worker", "--burst")
    out, err = follower.communicate(timeout=60)
    worker.communicate(timeout=60)
    assert follower.returncode == 0, err
    kinds = [json.loads(line)["kind"] for line in out.splitlines()]
    assert kinds[0] == "request" and kinds[-1] == "assembled"
    assert len(kinds) == 6


def test_events_follow_of_an_ended_run_returns_at_once(cli: Cli) -> None:
    run_id = cli.enqueue(INVOICE_SCRIPT, "send_invoice")
    cli("cancel", run_id)
    result = cli("events", run_id, "--follow", timeout=15)
    assert result.code == 0
    assert result.out.splitlines()[-1].split()[3] == "cancelled"


def test_cancel(cli: Cli, runtime: tenure.Runtime) -> None:
    run_id = cli.enqueue(INVOICE_SCRIPT, "send_invoice")
    result = cli("cancel", run_id)
    assert (result.code, result.out.strip()) == (0, f"cancelled {run_id}")
    run = runtime.status(run_id)
    assert run is not None and run.termination_reason is TerminationReason.CANCELLED
    again = cli("cancel", run_id)
    assert again.code == 1
    assert run_id in one_line_error(again) and "already ended" in again.err


def test_reap_prints_three_counts(cli: Cli) -> None:
    result = cli("reap", "--limit", "10")
    assert (result.code, result.out) == (0, "requeued 0\ndead-lettered 0\nskipped 0\n")


def test_redrive_a_dead_letter(cli: Cli, runtime: tenure.Runtime) -> None:
    run_id = cli.enqueue(AUTH_FAILURE)
    cli("worker", "--burst")
    run = runtime.status(run_id)
    assert run is not None and run.termination_reason is TerminationReason.NOT_RETRYABLE
    result = cli("redrive", run_id)
    assert (result.code, result.out.strip()) == (0, f"redriven {run_id}")
    assert runtime.status(run_id).status is RunStatus.QUEUED  # type: ignore[union-attr]

    done = cli.enqueue(INVOICE_SCRIPT, "send_invoice")
    cli("worker", "--burst")
    refused = cli("redrive", done)
    assert refused.code == 1
    assert "not dead-lettered" in one_line_error(refused)


def test_redrive_all_dead_letters(cli: Cli, runtime: tenure.Runtime) -> None:
    ids = [cli.enqueue(AUTH_FAILURE) for _ in range(3)]
    cli("worker", "--burst")
    result = cli("redrive", "--all-dead-letters")
    assert result.code == 0
    assert result.out.splitlines()[:2] == [
        "redriven 3",
        "skipped 0 (non-idempotent fence stands and its tool has no probe: "
        "redrive each with --force)",
    ]
    assert {runtime.status(i).status for i in ids} == {RunStatus.QUEUED}  # type: ignore[union-attr]
    assert cli("redrive", "--all-dead-letters", "--force").code == 2
    assert cli("redrive", ids[0], "--all-dead-letters").code == 2


def test_purge_deletes_ended_runs(cli: Cli, runtime: tenure.Runtime) -> None:
    ended = cli.enqueue(INVOICE_SCRIPT, "send_invoice")
    cli("cancel", ended)
    waiting = cli.enqueue(INVOICE_SCRIPT, "send_invoice")
    assert cli("purge", "--older-than", "30d").out.strip() == "purged 0 runs"
    result = cli("purge", "--older-than", "0s")
    assert (result.code, result.out.strip()) == (0, "purged 1 run")
    assert runtime.status(ended) is None
    assert runtime.status(waiting) is not None


def test_app_option_loads_the_users_runtime(cli: Cli, slow_app: str) -> None:
    turns = [{"call": [{"tool": "slow_charge", "args": {"seconds": 0}}]}, {"say": "charged"}]
    script = cli.script(turns)
    args = ["enqueue", "--prompt", "p", "--tool", "slow_charge", "--script", script]
    unknown = cli(*args)  # the built-in demo app has no such tool
    assert unknown.code == 2 and "slow_charge" in one_line_error(unknown)
    assert cli("--app", slow_app, *args).code == 0
    assert "1 completed" in cli("--app", slow_app, "worker", "--burst").out


def test_purge_durations_in_every_unit(cli: Cli) -> None:
    for duration in ("90s", "45m", "12h", "30d", "1.5h"):
        result = cli("purge", "--older-than", duration)
        assert (result.code, result.out.strip()) == (0, "purged 0 runs")


def test_init_and_the_worker_banner_never_print_the_database_password(
    cli: Cli, pg_url: str
) -> None:
    # The private cluster trusts loopback connections, so the password is accepted and unused.
    url = pg_url.replace("postgresql://postgres@", "postgresql://postgres:hunter2@")
    cli.url = url
    result = cli("init")
    assert result.code == 0, result.err
    assert "hunter2" not in result.out + result.err
    assert result.out.startswith("database ready: postgresql://postgres:***@")
    worker = cli.popen("worker", "--concurrency", "1", "--poll-interval", "0.1")
    try:
        banner = worker.stderr.readline() if worker.stderr else ""
    finally:
        worker.terminate()
        out, err = worker.communicate(timeout=30)
    assert "postgres:***@" in banner + err, banner + err
    assert "hunter2" not in banner + out + err


def test_status_shows_the_trees_budget(cli: Cli) -> None:
    usage = {"input_tokens": 30, "output_tokens": 12}
    with tenure.Runtime(cli.url) as rt:
        script = [{"say": "hi", "usage": usage}]
        request = RunRequest(prompt="p", model="scripted", script=script, max_tokens=500)
        run_id = rt.run(request).run_id
    lines = [line.split(None, 1) for line in cli("status", run_id).out.splitlines()]
    assert ["budget", "42 of 500 tokens spent"] in lines
    data = cli("status", run_id, "--json").json()
    assert data["budget"]["spent_tokens"] == 42 and data["budget"]["max_tokens"] == 500
