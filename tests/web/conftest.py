"""Fixtures of the web tests: a Runtime with tools of every effect, runs in every state it
can be put in by real segments, and the app over it (ASGI test client, real database)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import tenure
from tenure import Outcome, RunRequest, ToolContext, ToolEffect
from tenure.web import create_app

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET = "the customer's secret prompt"


def make_runtime(url: str) -> tenure.Runtime:
    rt = tenure.Runtime(url, backoff_base=0.01, backoff_cap=0.02, max_requeues=1)
    rt.add_model("default", tenure.providers.Scripted())

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=5)
    def charge(ctx: ToolContext, amount: int) -> dict[str, int]:
        """Charge a customer."""
        if amount < 0:
            raise tenure.RetryableError("the gateway lost the answer")
        return {"charged": amount}

    @rt.tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    def save(key: str) -> str:
        """Save a record."""
        return key

    @rt.tool
    def lookup(customer: str) -> dict[str, str]:
        """Look a customer up."""
        return {"customer": customer, "plan": "gold"}

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    def refund(amount: int, order: str = "") -> dict[str, int]:
        """Refund a customer (a person approves it first)."""
        return {"refunded": amount}

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True, sensitive=True)
    def wire(iban: str, amount: int) -> str:
        """Wire money to a bank account."""
        return f"wired {amount}"

    @rt.tool(
        input_schema={
            "type": "object",
            "properties": {
                "address": {"type": "string", "description": "where to ship"},
                "express": {"type": "boolean"},
            },
            "required": ["address"],
        }
    )
    def ship(address: str = "", express: bool = False) -> str:
        """Ship to an address a person types in."""
        return f"shipping to {address}" + (" (express)" if express else "")

    @rt.tool(
        effect=ToolEffect.IDEMPOTENT_WRITE,
        input_schema={
            "type": "object",
            "properties": {"pin": {"type": "string"}},
            "required": ["pin"],
        },
        sensitive=True,
    )
    def unlock(pin: str = "") -> str:
        """Unlock a door with a PIN only a person knows."""
        return "open" if pin == "2468" else "still locked"

    return rt


@dataclass
class Seeded:
    completed: str
    dead: str  # retries_exhausted after one completed charge
    fenced: str  # not_retryable while a charge was in flight: its fence stands
    queued: str


def seed(rt: tenure.Runtime) -> Seeded:
    """Runs in the states a dashboard shows, made by real segments."""
    completed = rt.enqueue(
        RunRequest(
            prompt=SECRET,
            tools=["lookup"],
            script=[
                {"call": [{"tool": "lookup", "args": {"customer": "c-1"}}]},
                {"say": "gold plan"},
            ],
        )
    )
    dead = rt.enqueue(
        RunRequest(
            prompt="charge then fail",
            tools=["charge"],
            script=[
                {"call": [{"tool": "charge", "args": {"amount": 42}}]},
                {"fail": "server_error"},
            ],
        )
    )
    fenced = rt.enqueue(
        RunRequest(
            prompt="charge in flight",
            tools=["charge"],
            script=[{"call": [{"tool": "charge", "args": {"amount": -1}}]}, {"say": "paid"}],
        )
    )
    for run_id in (completed, dead, fenced):
        for _ in range(3):
            result = rt.run_queued(run_id)
            if result is None or result.outcome is not Outcome.REQUEUED:
                break
            _wait_claimable(rt, run_id)
    queued = rt.enqueue(RunRequest(prompt="later", script=[{"say": "hi"}]), delay=3600)
    return Seeded(completed, dead, fenced, queued)


@dataclass
class Waiting:
    approval: str
    input: str


def seed_waiting(rt: tenure.Runtime) -> Waiting:
    """One run waiting for an approval, one waiting for typed input."""
    approval = rt.enqueue(
        RunRequest(
            prompt="refund please",
            tools=["refund"],
            script=[
                {"call": [{"tool": "refund", "args": {"amount": 987654}}]},
                {"say": "refunded"},
            ],
        )
    )
    needs_input = rt.enqueue(
        RunRequest(
            prompt="ship it",
            tools=["ship"],
            script=[{"call": [{"tool": "ship", "args": {}}]}, {"say": "shipped"}],
        )
    )
    for run_id in (approval, needs_input):
        result = rt.run_queued(run_id)
        assert result is not None and result.outcome in (
            Outcome.AWAITING_APPROVAL,
            Outcome.AWAITING_INPUT,
        ), result
    return Waiting(approval, needs_input)


@dataclass
class Held:
    refund: str  # waits for approval; refund is not sensitive
    wire: str  # waits for approval; wire is sensitive
    ship: str  # waits for input; the model proposed values
    unlock: str  # waits for input; unlock is sensitive, the model proposed a PIN


REFUND_ARGS = {"amount": 4321, "order": "A-77"}
WIRE_ARGS = {"iban": "DE89 3704 0044 0532 0130 00", "amount": 900}
SHIP_ARGS = {"address": "9 Model Way", "express": True}
UNLOCK_ARGS = {"pin": "1357"}


def seed_held(rt: tenure.Runtime) -> Held:
    """One run held on each kind of call a person reads before deciding."""
    held = []
    for tool, args in (
        ("refund", REFUND_ARGS),
        ("wire", WIRE_ARGS),
        ("ship", SHIP_ARGS),
        ("unlock", UNLOCK_ARGS),
    ):
        run_id = rt.enqueue(
            RunRequest(
                prompt=f"{tool} please",
                tools=[tool],
                script=[{"call": [{"tool": tool, "args": args}]}, {"say": "done"}],
            )
        )
        result = rt.run_queued(run_id)
        assert result is not None and result.outcome in (
            Outcome.AWAITING_APPROVAL,
            Outcome.AWAITING_INPUT,
        ), result
        held.append(run_id)
    return Held(*held)


def _wait_claimable(rt: tenure.Runtime, run_id: str) -> None:
    import time

    run = rt.status(run_id)
    assert run is not None
    while run.available_at > rt.store.now():
        time.sleep(0.01)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'web.db'}"


@pytest.fixture
def rt(sqlite_url: str) -> Iterator[tenure.Runtime]:
    runtime = make_runtime(sqlite_url)
    yield runtime
    runtime.close()


@pytest.fixture
def seeded(rt: tenure.Runtime) -> Seeded:
    return seed(rt)


@pytest.fixture
def make_client(
    rt: tenure.Runtime,
) -> Iterator[Callable[..., TestClient]]:
    clients: list[TestClient] = []

    def make(**kwargs: Any) -> TestClient:
        kwargs.setdefault("token", TOKEN)
        app: FastAPI = create_app(rt, **kwargs)
        client = TestClient(app, raise_server_exceptions=False)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def client(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client()


def login(client: TestClient, name: str = "ada") -> str:
    """Log a browser-like client in; returns the CSRF token of its pages."""
    page = client.get("/login")
    csrf = csrf_of(page.text)
    response = client.post(
        "/login", data={"token": TOKEN, "name": name, "csrf": csrf}, follow_redirects=False
    )
    assert response.status_code == 303, response.text
    return csrf_of(client.get("/").text)


def csrf_of(html: str) -> str:
    import re

    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF token in the page"
    return match.group(1)


@dataclass
class Asked:
    a1: str  # a refund of order A-1, for the reason its prompt and the model's words give
    b2: str  # a refund of order B-2, for another reason
    wire: str  # a wire: its tool is sensitive


ASKED_PROMPTS = {
    "a1": "Customer 118 writes: my order A-1 arrived broken. " + "The box was crushed. " * 30,
    "b2": "Customer 7 writes: order B-2 never came.",
    "wire": "Pay the supplier to DE89 3704 0044 0532 0130 00",
}
ASKED_WORDS = {
    "a1": "Order A-1 arrived broken; the photos confirm it. I will refund 4321.",
    "b2": "The carrier lost B-2. Refunding 55.",
    "wire": "Wiring 900 to DE89 3704 0044 0532 0130 00 as asked.",
}


def seed_asked(rt: tenure.Runtime) -> Asked:
    """Two refund runs that hold alike-looking calls for different reasons, and a wire."""
    calls = {
        "a1": ("refund", {"amount": 4321, "order": "A-1"}),
        "b2": ("refund", {"amount": 55, "order": "B-2"}),
        "wire": ("wire", WIRE_ARGS),
    }
    held = {}
    for key, (tool, args) in calls.items():
        run_id = rt.enqueue(
            RunRequest(
                prompt=ASKED_PROMPTS[key],
                tools=[tool],
                script=[
                    {"call": [{"tool": tool, "args": args}], "text": ASKED_WORDS[key]},
                    {"say": "done"},
                ],
            )
        )
        result = rt.run_queued(run_id)
        assert result is not None and result.outcome is Outcome.AWAITING_APPROVAL, result
        held[key] = run_id
    return Asked(**held)
