"""Agent functions (SPEC §20) through the API and the dashboard, on each store: enqueue with
`agent` and `input` (checked, a one-line 400 that stores nothing), `GET /api/agents`, a run's
`agent` and `input` (the input hidden unless revealed), its steps by position, the runs list
and the Agents page."""

from __future__ import annotations

import contextlib
import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

import tenure
from tenure import Outcome, ToolEffect
from tenure.web import create_app

from .conftest import AUTH, TOKEN, login

INPUT = {"ticket_id": "T-9", "text": "the parcel never came, I want a refund"}
SCRIPT = [{"say": "refund"}]


def make_agent_runtime(url: str) -> tenure.Runtime:
    rt = tenure.Runtime(url, backoff_base=0.01, backoff_cap=0.02)
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
        label = ctx.model(f"Label this ticket: {text}").text or ""
        with contextlib.suppress(tenure.ToolFailed):
            ctx.tool("lookup", ticket_id=ticket_id)
        if "refund" in label:
            ctx.tool("refund", ticket_id=ticket_id)
        ctx.sleep(0)
        length = ctx.step(len, text, name="measure")
        return {"label": label, "length": length}

    return rt


@dataclass
class Agents:
    rt: tenure.Runtime
    client: TestClient


@pytest.fixture
def agents(db_url: str) -> Iterator[Agents]:
    rt = make_agent_runtime(db_url)
    client = TestClient(create_app(rt, token=TOKEN), raise_server_exceptions=False)
    yield Agents(rt, client)
    client.close()
    rt.close()


def _enqueue_and_work(a: Agents) -> str:
    response = a.client.post(
        "/api/runs", headers=AUTH, json={"agent": "triage", "input": INPUT, "script": SCRIPT}
    )
    assert response.status_code == 201, response.text
    run_id: str = response.json()["id"]
    result = a.rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.COMPLETED, result
    return run_id


def test_enqueue_an_agent_run_and_read_it_back(agents: Agents) -> None:
    run_id = _enqueue_and_work(agents)
    client = agents.client
    run = client.get(f"/api/runs/{run_id}", headers=AUTH).json()
    assert (run["agent"], run["input"], run["status"]) == ("triage", "<hidden>", "completed")
    revealed = client.get(f"/api/runs/{run_id}?reveal=true", headers=AUTH).json()
    assert revealed["input"] == INPUT
    [listed] = client.get("/api/runs", headers=AUTH).json()["runs"]
    assert (listed["id"], listed["agent"], listed["input"]) == (run_id, "triage", "<hidden>")


def test_a_built_in_run_has_no_agent(agents: Agents) -> None:
    response = agents.client.post(
        "/api/runs", headers=AUTH, json={"prompt": "hello", "script": [{"say": "hi"}]}
    )
    assert response.status_code == 201, response.text
    run = agents.client.get(f"/api/runs/{response.json()['id']}?reveal=true", headers=AUTH)
    assert (run.json()["agent"], run.json()["input"]) == (None, None)
    steps = agents.client.get(f"/api/runs/{response.json()['id']}/steps", headers=AUTH)
    assert steps.json() == []


def test_an_agent_runs_steps_by_position(agents: Agents) -> None:
    run_id = _enqueue_and_work(agents)
    steps = agents.client.get(f"/api/runs/{run_id}/steps", headers=AUTH).json()
    shown = [(s["position"], s["step"], s["name"], s["effect"]) for s in steps]
    assert shown == [
        (0, "model", "default", None),
        (1, "tool", "lookup", "read_only"),
        (2, "tool", "refund", "non_idempotent_write"),
        (3, "sleep", "sleep", None),
        (4, "step", "measure", "read_only"),
    ]
    # Results are content; errors, keys and durations are structure.
    by_position = {s["position"]: s for s in steps}
    assert by_position[0]["result"] == "<hidden>"
    assert by_position[1]["result"] is None
    assert by_position[1]["error"] == "LookupError: no ticket T-9 in the archive"
    assert by_position[2]["result"] == "<hidden>"
    assert by_position[2]["idempotency_key"] == f"{run_id}:2"
    assert isinstance(by_position[2]["duration_ms"], float)
    assert by_position[3]["result"].startswith("until ")
    assert by_position[4]["result"] == "<hidden>"
    revealed = agents.client.get(f"/api/runs/{run_id}/steps?reveal=true", headers=AUTH).json()
    results = {s["position"]: s["result"] for s in revealed}
    assert (results[0], results[2], results[4]) == ("refund", "refunded T-9", len(INPUT["text"]))


def test_the_timeline_hides_step_results_and_shows_where_each_step_is(agents: Agents) -> None:
    run_id = _enqueue_and_work(agents)
    events = agents.client.get(f"/api/runs/{run_id}/events", headers=AUTH).json()
    request = events[0]["payload"]
    assert (request["agent"], request["input"]) == ("triage", "<hidden>")
    step = next(e for e in events if e["kind"] == "step")
    assert step["payload"]["position"] == 4
    assert (step["payload"]["step"], step["payload"]["name"]) == ("step", "measure")
    assert step["payload"]["result"] == "<hidden>"
    assert step["payload"]["digest"] == "<hidden>"


def test_get_agents_lists_names_descriptions_and_schemas(agents: Agents) -> None:
    response = agents.client.get("/api/agents", headers=AUTH)
    assert response.status_code == 200
    [triage] = response.json()
    assert (triage["name"], triage["description"]) == ("triage", "Route a support ticket.")
    assert triage["input_schema"]["required"] == ["ticket_id", "text"]
    assert triage["input_schema"]["properties"]["priority"]["default"] == 3
    assert agents.client.get("/api/agents").status_code == 401  # a read needs the token


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"agent": "nobody", "input": {}}, 400, "unknown agent 'nobody' (agents: triage)"),
        (
            {"agent": "triage", "input": {"ticket_id": "T-1"}},
            400,
            "agent triage: invalid input: text: Field required",
        ),
        (
            {"agent": "triage", "input": {"ticket_id": "T-1", "text": "x", "priority": "high"}},
            400,
            "agent triage: invalid input: priority: Input should be a valid integer, "
            "unable to parse string as an integer",
        ),
        (
            {"agent": "triage", "input": {"ticket_id": "T-1", "text": "x", "refund": True}},
            400,
            "agent triage: invalid input: refund: Extra inputs are not permitted",
        ),
        (
            {"input": {"ticket_id": "T-1"}},
            400,
            "input is the argument of an agent function: name it with agent=",
        ),
        ({}, 400, "prompt must be a non-empty string"),
        (
            {"agent": "triage", "input": [1, 2]},
            422,
            "invalid request: body.input: Input should be a valid dictionary",
        ),
    ],
)
def test_a_bad_agent_request_is_a_one_line_4xx_and_stores_nothing(
    agents: Agents, body: dict[str, Any], status: int, error: str
) -> None:
    response = agents.client.post("/api/runs", headers=AUTH, json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"] == error
    assert "\n" not in response.json()["error"]
    assert agents.rt.runs() == []


def _cells(row: str) -> list[str]:
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in cells]


def test_the_run_page_shows_the_agent_its_input_and_its_steps(agents: Agents) -> None:
    run_id = _enqueue_and_work(agents)
    client = agents.client
    login(client)
    page = client.get(f"/runs/{run_id}").text
    assert re.search(r'id="agent-name">triage<', page)
    assert "the parcel never came" not in page  # content, until revealed
    table = re.search(r'<table class="agent-steps".*?</table>', page, re.S)
    assert table is not None
    rows = re.findall(r"<tr class=\"step-.*?</tr>", table.group(0), re.S)
    cells = [_cells(row) for row in rows]
    assert [c[:4] for c in cells] == [
        ["0", "model", "default", ""],
        ["1", "tool", "lookup", "read_only"],
        ["2", "tool", "refund", "non_idempotent_write"],
        ["3", "sleep", "sleep", ""],
        ["4", "step", "measure", "read_only"],
    ]
    assert cells[1][4] == "error: LookupError: no ticket T-9 in the archive"
    assert cells[2][4] == "hidden" and 'class="step-tool write"' in rows[2]
    revealed = client.get(f"/runs/{run_id}?reveal=true").text
    assert "the parcel never came" in revealed and "refunded T-9" in revealed


def test_the_runs_list_names_the_agent_and_the_agents_page_its_input(agents: Agents) -> None:
    run_id = _enqueue_and_work(agents)
    client = agents.client
    login(client)
    page = client.get("/").text
    row = re.search(rf'<tr data-run="{run_id}">.*?</tr>', page, re.S)
    assert row is not None and 'agent <b class="mono">triage</b>' in row.group(0)
    assert '<a href="/agents"' in page
    listing = client.get("/agents").text
    section = re.search(r'<section class="agent" data-agent="triage">.*?</section>', listing, re.S)
    assert section is not None
    rows = re.findall(r"<tr data-parameter=.*?</tr>", section.group(0), re.S)
    assert [_cells(r) for r in rows] == [
        ["ticket_id", "string", "yes", "", "the ticket's id"],
        ["text", "string", "yes", "", "what the customer wrote"],
        ["priority", "integer", "no", "3", "1 (urgent) to 5"],
    ]


def test_a_tree_of_runs_through_the_api_and_on_the_run_page(agents: Agents) -> None:
    """SPEC §21: `GET /api/runs?parent=` and `?roots=true`, the tree in `GET /api/runs/ID`,
    and the run page's tree, each node linked with its status."""
    client, rt = agents.client, agents.rt

    @rt.agent
    def ping(ctx: tenure.AgentContext, n: int) -> int:
        """Answer with its number."""
        return n

    @rt.agent
    def fan(ctx: tenure.AgentContext) -> list[int]:
        """Ping twice, in child runs."""
        return ctx.gather(*ctx.map("ping", [{"n": 1}, {"n": 2}]))

    response = client.post("/api/runs", headers=AUTH, json={"agent": "fan", "input": {}})
    assert response.status_code == 201, response.text
    parent = response.json()["id"]
    rt.worker(concurrency=1, burst=True).run()
    children = client.get("/api/runs", headers=AUTH, params={"parent": parent}).json()["runs"]
    assert len(children) == 2 and all(c["parent_id"] == parent for c in children)
    assert all(c["root_id"] == parent and c["status"] == "completed" for c in children)
    roots = client.get("/api/runs", headers=AUTH, params={"roots": "true"}).json()["runs"]
    assert [r["id"] for r in roots] == [parent]
    run = client.get(f"/api/runs/{parent}", headers=AUTH).json()
    assert run["status"] == "completed" and run["parent_id"] is None
    assert run["tree"][0]["id"] == parent
    assert sorted(n["id"] for n in run["tree"][1:]) == sorted(c["id"] for c in children)
    assert all(n["status"] == "completed" for n in run["tree"])
    bad = client.get("/api/runs", headers=AUTH, params={"parent": "not an id"})
    assert bad.status_code == 422

    login(client)
    page = client.get(f"/runs/{parent}").text
    tree = re.search(r'<ul class="run-tree".*?</ul>', page, re.S)
    assert tree is not None
    nodes = re.findall(
        r'<li class="tree-node depth-(\d)[^"]*" data-run="([^"]+)">(.*?)</li>', tree.group(0), re.S
    )
    assert nodes[0][:2] == ("0", parent)
    for depth, run_id, body in nodes[1:]:
        assert depth == "1" and f'href="/runs/{run_id}"' in body and "completed" in body
    child_page = client.get(f"/runs/{children[0]['id']}").text
    assert f'href="/runs/{parent}"' in child_page
