"""`tenure pending`, `tenure approve`, `tenure input` through the real executable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tenure import RunStatus

from .conftest import Cli, one_line_error


@pytest.fixture
def any_cli(tmp_path: Path, db_url: str) -> Cli:
    """The executable on each store."""
    return Cli(tmp_path, db_url)


GATED_APP = '''
import tenure
from tenure import ToolEffect

rt = tenure.Runtime()

@rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"

@rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True, sensitive=True)
def wire(iban: str, amount: int) -> str:
    """Wire money to a bank account."""
    return f"wired {amount}"

@rt.tool(input_schema={"type": "object", "properties": {"code": {"type": "string"}},
                       "required": ["code"]})
def verify(code: str = "") -> str:
    """Verify a code only a person knows."""
    return "verified" if code == "1234" else "wrong"
'''


def gated(cli: Cli) -> str:
    (cli.cwd / "gated_app.py").write_text(GATED_APP)
    return "gated_app:rt"


def enqueue(cli: Cli, app: str, tool: str, args: dict[str, object]) -> str:
    script = cli.script([{"call": [{"tool": tool, "args": args}]}, {"say": "ok"}])
    result = cli(
        "--app", app, "enqueue", "--prompt", "p", "--model", "scripted", "--tool", tool,
        "--script", script,
    )  # fmt: skip
    assert result.code == 0, result.err
    run_id = result.out.strip()
    worked = cli("--app", app, "worker", "--burst", "--poll-interval", "0.05")
    assert worked.code == 0, worked.err
    return run_id


def test_pending_then_approve_then_completed(cli: Cli, runtime: object) -> None:
    app = gated(cli)
    run_id = enqueue(cli, app, "refund", {"order": "A-1"})
    listed = cli("--app", app, "pending")
    assert listed.code == 0 and run_id in listed.out and "refund" in listed.out
    as_json = cli("--app", app, "pending", "--json").json()
    assert as_json[0]["status"] == "waiting_for_approval"
    assert as_json[0]["pending_calls"][0]["args"] == {"order": "A-1"}

    missing = cli("--app", app, "approve", run_id)
    assert missing.code == 2 and "--by" in missing.err

    done = cli("--app", app, "approve", run_id, "--by", "ada", "--note", "fine")
    assert done.code == 0 and "approved" in done.out, done.err
    again = cli("--app", app, "approve", run_id, "--by", "bob")
    assert again.code == 1 and "not waiting_for_approval" in one_line_error(again)
    cli("--app", app, "worker", "--burst", "--poll-interval", "0.05")
    status = cli("--app", app, "status", run_id, "--json").json()
    assert status["status"] == RunStatus.COMPLETED


def test_deny(cli: Cli) -> None:
    app = gated(cli)
    run_id = enqueue(cli, app, "refund", {"order": "A-2"})
    assert cli("--app", app, "approve", run_id, "--deny", "--by", "bob").code == 0
    cli("--app", app, "worker", "--burst", "--poll-interval", "0.05")
    events = cli("--app", app, "events", run_id, "--json").json()
    tool = next(e for e in events if e["kind"] == "tool")
    assert tool["payload"]["error"] == "denied by bob"


def test_input_from_a_file(cli: Cli, tmp_path: Path) -> None:
    app = gated(cli)
    run_id = enqueue(cli, app, "verify", {})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"code": 1234}))
    refused = cli("--app", app, "input", run_id, "--by", "eve", "--values", str(bad))
    assert refused.code == 2 and "code: does not satisfy type 'string'" in one_line_error(refused)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert cli("--app", app, "input", run_id, "--by", "eve", "--values", str(broken)).code == 2
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"code": "1234"}))
    ok = cli("--app", app, "input", run_id, "--by", "eve", "--values", str(good))
    assert ok.code == 0, ok.err
    cli("--app", app, "worker", "--burst", "--poll-interval", "0.05")
    events = cli("--app", app, "events", run_id, "--json").json()
    assert next(e for e in events if e["kind"] == "tool")["payload"]["result"] == "verified"
    assert "1234" not in json.dumps([e for e in events if e["kind"] == "input"])


def test_unknown_run(cli: Cli) -> None:
    app = gated(cli)
    result = cli("--app", app, "approve", "no-such-run", "--by", "x")
    assert result.code == 1 and "no-such-run" in one_line_error(result)


def test_pending_shows_the_arguments_of_calls_not_sensitive(any_cli: Cli) -> None:
    app = gated(any_cli)
    refund = enqueue(any_cli, app, "refund", {"order": "A-9"})
    wire = enqueue(any_cli, app, "wire", {"iban": "DE89 3704", "amount": 900})
    listed = any_cli("--app", app, "pending")
    assert listed.code == 0, listed.err
    (refund_line,) = [line for line in listed.out.splitlines() if line.startswith(refund)]
    assert 'refund({"order": "A-9"}) [approve?]' in refund_line
    (wire_line,) = [line for line in listed.out.splitlines() if line.startswith(wire)]
    assert "wire(<hidden>) [approve?]" in wire_line and "DE89" not in listed.out
    as_json = {r["id"]: r for r in any_cli("--app", app, "pending", "--json").json()}
    (call,) = as_json[refund]["pending_calls"]
    assert call["args"] == {"order": "A-9"} and call["sensitive"] is False
    (call,) = as_json[wire]["pending_calls"]
    assert call["args"] == "<hidden>" and call["sensitive"] is True
    assert "DE89" not in json.dumps(as_json)
    done = any_cli("--app", app, "approve", refund, "--by", "ada")
    assert done.code == 0, done.err
    any_cli("--app", app, "worker", "--burst", "--poll-interval", "0.05")
    status = any_cli("--app", app, "status", refund, "--json").json()
    assert status["status"] == RunStatus.COMPLETED


def hold(cli: Cli, app: str, prompt: str, tool: str, args: dict[str, object], said: str) -> str:
    """A run held on `tool`, whose model said `said` in the turn that asked for it."""
    script = cli.script([{"call": [{"tool": tool, "args": args}], "text": said}, {"say": "ok"}])
    result = cli(
        "--app", app, "enqueue", "--prompt", prompt, "--model", "scripted", "--tool", tool,
        "--script", script,
    )  # fmt: skip
    assert result.code == 0, result.err
    run_id = result.out.strip()
    worked = cli("--app", app, "worker", "--burst", "--poll-interval", "0.05")
    assert worked.code == 0, worked.err
    return run_id


def test_pending_shows_why_each_call_was_made_and_how_long_it_waits(any_cli: Cli) -> None:
    from .._raw import backdate_update

    app = gated(any_cli)
    long_prompt = "Customer 118 writes: my order A-1 arrived broken. " + "Details. " * 60
    first = hold(any_cli, app, long_prompt, "refund", {"order": "A-1"}, "A-1 came broken: refund")
    second = hold(
        any_cli, app, "Customer 7: B-2 never came", "refund", {"order": "B-2"}, "B-2 was lost"
    )
    wire = hold(
        any_cli, app, "Pay supplier DE89", "wire", {"iban": "DE89 3704", "amount": 900}, "DE89 now"
    )
    backdate_update(any_cli.url, second, 2 * 3600 + 5 * 60)
    listed = any_cli("--app", app, "pending")
    assert listed.code == 0, listed.err
    blocks = _blocks(listed.out)
    assert "prompt: Customer 118 writes: my order A-1 arrived broken." in blocks[first]
    assert "model said: A-1 came broken: refund" in blocks[first]
    assert "Details. " * 60 not in listed.out  # a long prompt is clipped here, whole in --json
    assert "prompt: Customer 7: B-2 never came" in blocks[second]
    assert "model said: B-2 was lost" in blocks[second]
    assert " 2h 5m " in blocks[second].splitlines()[0]  # how long it has waited
    assert "prompt: hidden: sensitive tool wire" in blocks[wire]
    assert "model said: hidden: sensitive tool wire" in blocks[wire]
    assert "DE89" not in listed.out

    as_json = {r["id"]: r for r in any_cli("--app", app, "pending", "--json").json()}
    context = as_json[first]["context"]
    assert context["prompt"] == long_prompt and context["model_text"] == "A-1 came broken: refund"
    assert context["hidden"] is None and context["damaged"] is None
    assert 0 <= context["waited_seconds"] < 2 * 3600
    assert as_json[second]["context"]["prompt"] == "Customer 7: B-2 never came"
    assert as_json[second]["context"]["waited_seconds"] >= 2 * 3600 + 5 * 60
    assert as_json[second]["context"]["waiting_since"] == as_json[second]["updated_at"]
    hidden = as_json[wire]["context"]
    assert hidden["prompt"] == "<hidden>" and hidden["model_text"] == "<hidden>"
    assert hidden["hidden"] == "sensitive tool wire" and hidden["waited_seconds"] >= 0
    assert "DE89" not in json.dumps(as_json)


def _blocks(text: str) -> dict[str, str]:
    """`tenure pending`'s output by run: its row and the lines under it."""
    blocks: dict[str, str] = {}
    current = ""
    for line in text.splitlines()[1:]:
        if not line.startswith(" "):
            current = line.split()[0]
            blocks[current] = ""
        blocks[current] += line + "\n"
    return blocks
