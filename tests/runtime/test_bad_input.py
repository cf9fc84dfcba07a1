"""Bad input gets a clear error and changes nothing (SPEC §13.6)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure import RunRequest
from tenure.agent._tools import MALFORMED_ARGUMENTS_KEY
from tenure.providers import ModelCall, ModelReply, ToolCall


def req(**kwargs: Any) -> RunRequest:
    base: dict[str, Any] = {"prompt": "hi", "model": "scripted", "script": [{"say": "x"}]}
    base.update(kwargs)
    return RunRequest(**base)


@pytest.mark.parametrize(
    ("request_kwargs", "error", "message"),
    [
        ({"tools": ["nope"]}, tenure.UnknownTool, "unknown tool 'nope'"),
        ({"model": "gpt-9"}, tenure.UnknownModel, "unknown model 'gpt-9'"),
        ({"prompt": "  "}, tenure.InvalidRequest, "prompt"),
        ({"max_iterations": 0}, tenure.InvalidRequest, "max_iterations"),
        ({"max_iterations": 21}, tenure.InvalidRequest, "from 1 to 20"),
        ({"max_iterations": "3"}, tenure.InvalidRequest, "max_iterations"),
        ({"queue": ""}, tenure.InvalidRequest, "queue"),
        ({"metadata": {"x": object()}}, tenure.InvalidRequest, "JSON"),
        ({"max_tokens": -1}, tenure.InvalidRequest, "max_tokens"),
        ({"script": "say hi"}, tenure.InvalidRequest, "JSON array"),
        ({"script": [{"say": "a", "call": []}]}, tenure.InvalidRequest, "exactly one of"),
        ({"script": [{"shout": "a"}]}, tenure.InvalidRequest, "turn 0"),
        ({"script": [{"fail": "explosion"}]}, tenure.InvalidRequest, "turn 0 (fail)"),
        ({"script": [{"call": []}]}, tenure.InvalidRequest, "turn 0 (call)"),
        ({"script": [{"say": "ok"}, {"sleep": -1}]}, tenure.InvalidRequest, "turn 1 (sleep)"),
        ({"script": [{"call": [{"tool": "x", "args": [1]}]}]}, tenure.InvalidRequest, "args"),
    ],
)
def test_enqueue_refuses_and_stores_nothing(
    runtime: tenure.Runtime,
    request_kwargs: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error) as caught:
        runtime.enqueue(req(**request_kwargs))
    assert message in str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert "\n" not in str(caught.value)
    assert runtime.runs() == []
    with pytest.raises(error):
        runtime.run(req(**request_kwargs))
    assert runtime.runs() == []


def test_enqueue_many_is_all_or_nothing(runtime: tenure.Runtime) -> None:
    with pytest.raises(tenure.UnknownTool):
        runtime.enqueue_many([req(), req(tools=["missing"])])
    assert runtime.runs() == []


def test_idempotency_key_returns_the_existing_run(runtime: tenure.Runtime) -> None:
    first = runtime.enqueue(req(idempotency_key="order-1"))
    assert runtime.enqueue(req(idempotency_key="order-1", prompt="other")) == first
    assert len(runtime.runs()) == 1


def test_unknown_run_ids(runtime: tenure.Runtime) -> None:
    assert runtime.status("no-such-run") is None
    assert runtime.cancel("no-such-run") is False
    assert runtime.events("no-such-run") == []
    assert runtime.redrive("no-such-run") is False
    assert runtime.run_queued("no-such-run") is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lease_seconds": 0},
        {"lease_seconds": float("nan")},
        {"max_requeues": -1},
        {"backoff_base": -2},
        {"reap_interval": 0},
    ],
)
def test_bad_runtime_settings(kwargs: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(tenure.InvalidRequest):
        tenure.Runtime(f"sqlite:///{tmp_path}/x.db", **kwargs)


def test_bad_operator_arguments(runtime: tenure.Runtime) -> None:
    with pytest.raises(tenure.InvalidRequest):
        runtime.runs(status="sleeping")
    with pytest.raises(tenure.InvalidRequest):
        runtime.runs(limit=0)
    with pytest.raises(tenure.InvalidRequest):
        runtime.purge(-1)
    with pytest.raises(tenure.InvalidRequest):
        runtime.reap(limit=0)
    with pytest.raises(tenure.InvalidRequest):
        runtime.enqueue(req(), delay=-5)


def test_bad_tool_declarations(runtime: tenure.Runtime) -> None:
    with pytest.raises(tenure.InvalidRequest, match="unknown effect"):

        @runtime.tool(effect="sometimes")
        def a() -> None: ...

    with pytest.raises(tenure.InvalidRequest, match="timeout"):

        @runtime.tool(timeout=0)
        def b() -> None: ...

    with pytest.raises(tenure.InvalidRequest, match="tool name"):

        @runtime.tool(name="has space")
        def c() -> None: ...

    assert runtime.tool_names == []


def test_bad_database_urls(tmp_path: Path) -> None:
    with pytest.raises(tenure.InvalidRequest, match="unsupported database URL"):
        tenure.Runtime("mysql://x").runs()
    with pytest.raises(tenure.InvalidRequest, match="in-memory"):
        tenure.Runtime("sqlite:///:memory:").runs()
    with pytest.raises(tenure.DatabaseUnavailable, match="does not exist"):
        tenure.Runtime(f"sqlite:///{tmp_path}/missing/dir/x.db").runs()


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 100)
    with pytest.raises(tenure.DatabaseUnavailable):
        tenure.Runtime(f"sqlite:///{path}").runs()
    assert path.read_text().startswith("these are my notes")


def test_default_database_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TENURE_DATABASE_URL", f"sqlite:///{tmp_path}/env.db")
    assert tenure.Runtime().database_url == f"sqlite:///{tmp_path}/env.db"
    monkeypatch.delenv("TENURE_DATABASE_URL")
    assert tenure.Runtime().database_url == "sqlite:///tenure.db"


def test_a_tool_name_registers_once_and_keeps_its_fence(runtime: tenure.Runtime) -> None:
    @runtime.tool(effect=tenure.ToolEffect.NON_IDEMPOTENT_WRITE)
    def charge(amount: int) -> str:
        return f"charged {amount}"

    with pytest.raises(ValueError, match="tool 'charge' is already registered"):
        runtime.tool(effect=tenure.ToolEffect.READ_ONLY)(charge)

    result = runtime.run(
        req(tools=["charge"], script=[{"call": [{"tool": "charge", "args": {"amount": 5}}]}])
    )
    (event,) = [e for e in runtime.events(result.run_id) if e.kind is tenure.EventKind.TOOL]
    assert event.payload["effect"] == tenure.ToolEffect.NON_IDEMPOTENT_WRITE
    assert event.payload["result"] == "charged 5"


CARD = "4111 1111 1111 1111"


class Sender:
    """A model that calls `pay` once with the given arguments, then answers, and keeps
    what it was shown."""

    def __init__(self, args: dict[str, Any]) -> None:
        self.args = args
        self.seen: list[list[dict[str, Any]]] = []

    def complete(self, call: ModelCall) -> ModelReply:
        self.seen.append(list(call.messages))
        if len(self.seen) == 1:
            return ModelReply(text=None, tool_calls=(ToolCall("c1", "pay", self.args),))
        return ModelReply(text="done")


@pytest.mark.parametrize(
    "args",
    [
        {MALFORMED_ARGUMENTS_KEY: f'{{"card": "{CARD}", "cvc": "737"'},
        {"card": CARD, "cvc": "737-x"},
        {"card": CARD, "cvc": 737, f"card {CARD}": True},
    ],
)
def test_a_sensitive_tools_arguments_never_reach_an_error(
    make_runtime: Callable[..., tenure.Runtime], args: dict[str, Any]
) -> None:
    runtime = make_runtime()
    paid: list[str] = []

    @runtime.tool(effect=tenure.ToolEffect.NON_IDEMPOTENT_WRITE, sensitive=True)
    def pay(card: str, cvc: int) -> str:
        paid.append(card)
        return "paid"

    model = Sender(args)
    runtime.add_model("m", model)
    result = runtime.run(RunRequest(prompt="pay", model="m", tools=["pay"]))
    assert result.outcome is tenure.Outcome.COMPLETED and paid == []

    again = make_runtime()  # the stored row, read back by another connection
    for rt in (runtime, again):
        (event,) = [e for e in rt.events(result.run_id) if e.kind is tenure.EventKind.TOOL]
        error = event.payload["error"]
        assert error.startswith("invalid arguments for pay")
        for part in ("4111", "1111", "737"):
            assert part not in error
    shown = model.seen[1][-1]  # the model is told what failed, without its own text
    assert shown["role"] == "tool" and "invalid arguments for pay" in shown["content"]
    assert "1111" not in shown["content"] and "737" not in shown["content"]
