"""Agent functions (SPEC §20) through the real executable: `tenure agents`, `tenure enqueue
--agent NAME --input JSON` with the user's app loaded by `--app`, and how `status` and
`events` show an agent function's run: its agent, its input, its steps by position."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import Cli, one_line_error

# A user's app with an agent function, loaded with `--app agent_app:rt` from the current
# directory, as the other commands load the app for its tools.
AGENT_APP = '''
import tenure
from tenure import ToolEffect

rt = tenure.Runtime()
rt.add_model("default", tenure.providers.Scripted())


@rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
def refund(ticket_id: str) -> str:
    """Refund a ticket."""
    return f"refunded {ticket_id}"


@rt.tool
def lookup(ticket_id: str) -> str:
    """Look a ticket up."""
    raise LookupError(f"no ticket {ticket_id} in the archive")


@rt.agent
def triage(ctx: tenure.AgentContext, ticket_id: str, text: str, priority: int = 3) -> dict:
    """Route a support ticket.

    Args:
        ticket_id: the ticket's id
        text: what the customer wrote
        priority: 1 (urgent) to 5
    """
    label = ctx.model(f"Label this ticket: {text}").text
    try:
        ctx.tool("lookup", ticket_id=ticket_id)
    except tenure.ToolFailed:
        pass
    if "refund" in label:
        ctx.tool("refund", ticket_id=ticket_id)
    length = ctx.step(len, text, name="measure")
    return {"label": label, "length": length}


@rt.agent
def careful(ctx: tenure.AgentContext, amount: int) -> bool:
    """Refund once a person approves."""
    ctx.model(f"Should we refund {amount}?")
    return ctx.approve("refund", {"amount": amount})


@rt.agent(name="ping")
def ping_agent(ctx: tenure.AgentContext) -> str:
    """Answer pong."""
    return "pong"


@rt.agent
def fail(ctx: tenure.AgentContext) -> str:
    """Fail."""
    raise ValueError("this child fails")


@rt.agent
def fan(ctx: tenure.AgentContext) -> list:
    """Ping twice and fail once, in child runs."""
    handles = [*ctx.map("ping", [{}, {}]), ctx.child(agent="fail", input={})]
    return ctx.gather(*handles, return_exceptions=True)[:2]
'''
APP = "agent_app:rt"
INPUT = {"ticket_id": "T-1", "text": "I want my money back"}


@pytest.fixture
def cli(db_url: str, tmp_path: Path) -> Cli:
    """The executable on each store, with the agent app in its current directory."""
    (tmp_path / "agent_app.py").write_text(AGENT_APP)
    return Cli(tmp_path, db_url)


def _runs(cli: Cli) -> list[dict[str, object]]:
    result = cli("runs", "--json")
    assert result.code == 0, result.err
    runs: list[dict[str, object]] = result.json()
    return runs


def _enqueue(cli: Cli, *extra: str) -> str:
    script = cli.script([{"say": "refund"}])
    result = cli(
        "--app", APP, "enqueue", "--agent", "triage", "--input", json.dumps(INPUT),
        "--script", script, *extra,
    )  # fmt: skip
    assert result.code == 0, result.err
    return result.out.strip()


def test_agents_lists_each_agent_with_its_parameters(cli: Cli) -> None:
    result = cli("--app", APP, "agents")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == ["name", "input", "description"]
    rows = [line.split() for line in lines]
    assert ["careful", "1", "parameter", "Refund", "once", "a", "person", "approves."] in rows
    assert ["ping", "0", "parameters", "Answer", "pong."] in rows
    assert ["triage", "3", "parameters", "Route", "a", "support", "ticket."] in rows
    notes = [line.strip() for line in lines if line.startswith("  ")]
    assert notes == [
        "amount: integer, required",
        "ticket_id: string, required — the ticket's id",
        "text: string, required — what the customer wrote",
        "priority: integer, default 3 — 1 (urgent) to 5",
    ]


def test_agents_json_has_the_whole_input_schemas(cli: Cli) -> None:
    result = cli("--app", APP, "agents", "--json")
    assert result.code == 0, result.err
    found = {a["name"]: a for a in result.json()}
    assert sorted(found) == ["careful", "fail", "fan", "ping", "triage"]
    schema = found["triage"]["input_schema"]
    assert schema["required"] == ["ticket_id", "text"]
    assert schema["properties"]["priority"] == {
        "default": 3,
        "description": "1 (urgent) to 5",
        "title": "Priority",
        "type": "integer",
    }
    assert found["triage"]["description"] == "Route a support ticket."


def test_agents_of_an_app_without_any(cli: Cli) -> None:
    result = cli("agents")  # the built-in demo app registers none
    assert (result.code, result.out.strip()) == (
        0,
        "no agent functions (the app registers them with @rt.agent; name it with --app)",
    )
    assert cli("agents", "--json").json() == []


def test_an_agent_run_enqueued_worked_and_shown(cli: Cli) -> None:
    run_id = _enqueue(cli)
    [row] = _runs(cli)
    assert row["id"] == run_id
    worked = cli("--app", APP, "worker", "--burst")
    assert worked.code == 0 and "1 completed" in worked.out, worked.err

    status = cli("status", run_id)
    assert status.code == 0, status.err
    lines = status.out.splitlines()
    assert lines[0].split() == ["id", run_id]
    assert lines[1].split() == ["agent", "triage"]
    assert lines[2].split(maxsplit=1) == ["input", json.dumps(INPUT, separators=(",", ":"))]
    assert ["status", "completed"] in [line.split() for line in lines]
    # The steps table: position, step kind, name; a write with its effect; an error inline.
    header = next(i for i, line in enumerate(lines) if line.startswith("position"))
    assert lines[header].split() == [
        "position", "step", "name", "effect", "attempt", "duration", "result",
    ]  # fmt: skip
    steps = [line.split() for line in lines[header + 1 :]]
    assert [s[:3] for s in steps] == [
        ["0", "model", "default"],
        ["1", "tool", "lookup"],
        ["2", "tool", "refund"],
        ["3", "step", "measure"],
    ]
    assert steps[0][-1] == "refund"  # what the model said
    assert "error: LookupError: no ticket T-1 in the archive" in lines[header + 2]
    assert steps[2][3] == "non_idempotent_write" and steps[2][-1] == "T-1"
    assert steps[3][3] == "read_only" and steps[3][-1] == str(len(INPUT["text"]))

    data = cli("status", run_id, "--json").json()
    assert (data["agent"], data["input"]) == ("triage", INPUT)
    assert json.loads(data["output"]) == {"label": "refund", "length": len(INPUT["text"])}
    by_position = {s["position"]: s for s in data["steps"]}
    assert sorted(by_position) == [0, 1, 2, 3]
    assert by_position[2]["idempotency_key"] == f"{run_id}:2"
    assert (by_position[2]["step"], by_position[2]["name"]) == ("tool", "refund")
    assert (by_position[2]["result"], by_position[2]["error"]) == ("refunded T-1", None)
    assert "no ticket T-1" in by_position[1]["error"]

    events = cli("events", run_id)
    assert events.code == 0, events.err
    text = events.out
    assert 'agent triage, input {"ticket_id":"T-1"' in text
    assert "step 0 model 'default': says 'refund'" in text
    assert 'step 1 tool: lookup({"ticket_id":"T-1"}) -> error: LookupError: no ticket T-1' in text
    assert 'step 2 tool: refund({"ticket_id":"T-1"}) -> "refunded T-1"' in text
    assert "step 3 step 'measure': 20" in text


def test_status_of_an_agent_run_not_yet_started(cli: Cli) -> None:
    run_id = _enqueue(cli)
    status = cli("status", run_id)
    assert status.code == 0, status.err
    assert status.out.splitlines()[1].split() == ["agent", "triage"]
    assert status.out.rstrip().endswith("no steps yet")
    assert cli("status", run_id, "--json").json()["steps"] == []


def test_an_agent_without_input_parameters_needs_no_input(cli: Cli) -> None:
    result = cli("--app", APP, "run", "--agent", "ping")
    assert result.code == 0, result.err
    assert result.out.splitlines()[-1] == '"pong"'


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--agent", "triage", "--input", '{"ticket_id": '],
            "--input: not valid JSON: Expecting value: line 1 column 15 (char 14)",
        ),
        (
            ["--agent", "triage", "--input", "[1, 2]"],
            "--input: expected a JSON object, got an array",
        ),
        (
            ["--agent", "triage", "--input", '"T-1"'],
            "--input: expected a JSON object, got a string",
        ),
        (
            ["--agent", "nobody", "--input", "{}"],
            "unknown agent 'nobody' (agents: careful, fail, fan, ping, triage)",
        ),
        (
            ["--agent", "triage", "--input", '{"ticket_id": "T-1"}'],
            "agent triage: invalid input: text: Field required",
        ),
        (
            [
                "--agent",
                "triage",
                "--input",
                '{"ticket_id": "T-1", "text": "x", "priority": "high"}',
            ],
            "agent triage: invalid input: priority: Input should be a valid integer, "
            "unable to parse string as an integer",
        ),
        (
            ["--agent", "triage", "--input", '{"ticket_id": "T-1", "text": "x", "refund": true}'],
            "agent triage: invalid input: refund: Extra inputs are not permitted",
        ),
        (
            ["--agent", "triage", "--input", '{"ticket_id": "T-1", "text": NaN}'],
            "input holds nan, which JSON cannot hold",
        ),
        (["--input", "{}"], "--input is an agent function's input: name the agent with --agent"),
        ([], "give --prompt TEXT, or --agent NAME with --input JSON"),
    ],
)
def test_a_bad_agent_request_is_one_line_and_stores_nothing(
    cli: Cli, args: list[str], message: str
) -> None:
    cli("init")
    result = cli("--app", APP, "enqueue", *args)
    assert result.code == 2
    assert one_line_error(result) == f"tenure: {message}"
    assert _runs(cli) == []


def test_pending_shows_what_the_model_said_before_an_agent_step_waits(cli: Cli) -> None:
    """A held step's context is the agent function's last model step before it: its
    waiting record names the step's position, not a model turn's event."""
    said = "Refunding 5: the parcel was lost."
    script = cli.script([{"say": said}])
    enqueued = cli(
        "--app", APP, "enqueue", "--agent", "careful", "--input", '{"amount": 5}',
        "--script", script,
    )  # fmt: skip
    assert enqueued.code == 0, enqueued.err
    run_id = enqueued.out.strip()
    worked = cli("--app", APP, "worker", "--burst")
    assert "1 awaiting_approval" in worked.out, worked.err
    pending = cli("--app", APP, "pending")
    assert pending.code == 0, pending.err
    assert f"model said: {said}" in pending.out
    assert "damaged" not in pending.out
    [held] = cli("--app", APP, "pending", "--json").json()
    assert held["id"] == run_id and held["agent"] == "careful"
    assert (held["context"]["model_text"], held["context"]["damaged"]) == (said, None)
    assert [(c["tool"], c["kind"]) for c in held["pending_calls"]] == [("refund", "approval")]


def test_show_tree_and_the_listing_of_roots_and_children(cli: Cli) -> None:
    """SPEC §21: `show RUN --tree` draws the run and its children with their statuses;
    `runs --roots` and `runs --parent RUN` filter the listing."""
    parent = cli("--app", APP, "enqueue", "--agent", "fan", "--input", "{}").out.strip()
    worked = cli("--app", APP, "worker", "--burst", "--concurrency", "1")
    assert worked.code == 0, worked.err
    shown = cli("show", parent, "--tree")
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert lines[0] == f"{parent}  completed"
    children = [r["id"] for r in cli("runs", "--parent", parent, "--json").json()]
    assert len(children) == 3
    for child in children:
        (line,) = [x for x in lines if child in x]
        assert line.startswith(("├── ", "└── "))
    assert sum("completed" in x for x in lines[1:]) == 2
    assert sum("failed (not_retryable)" in x for x in lines) == 1
    tree = cli("show", parent, "--tree", "--json").json()["tree"]
    assert tree[0]["id"] == parent
    assert sorted(n["id"] for n in tree[1:]) == sorted(children)
    assert all(n["parent_id"] == parent for n in tree[1:])
    assert [n["error"] for n in tree if n["status"] == "failed"] == [
        "agent fail raised ValueError: this child fails"
    ]
    assert [r["id"] for r in cli("runs", "--roots", "--json").json()] == [parent]
    both = cli("runs", "--roots", "--parent", parent)
    assert both.code == 2 and "not allowed with" in both.err
