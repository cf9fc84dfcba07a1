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


def _deep(levels: int) -> Any:
    value: Any = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("request_kwargs", "message"),
    [
        ({"tools": None}, "tools"),
        ({"tools": [1]}, "tools"),
        ({"prompt": 5}, "prompt"),
        ({"model": None}, "model"),
        ({"queue": 7}, "queue"),
        ({"idempotency_key": 7}, "idempotency_key"),
        ({"metadata": []}, "metadata"),
        ({"system": 3}, "system"),
        ({"max_tokens": 2.5}, "max_tokens"),
        ({"max_cost": "1"}, "max_cost"),
        ({"max_iterations": True}, "max_iterations"),
        ({"queue": "a\x00b"}, "NUL"),
        ({"idempotency_key": "k\x00"}, "NUL"),
        ({"prompt": "hi\x00"}, "NUL"),
        ({"metadata": {"note": "a\x00"}}, "NUL"),
        ({"prompt": "\udcff"}, "UTF-8"),
        ({"queue": "q\udcff"}, "UTF-8"),
        ({"metadata": {"x": float("nan")}}, "JSON cannot hold"),
        ({"metadata": {"x": 2**64}}, "64 bits"),
        ({"metadata": {"x": _deep(5000)}}, "nested more than 64 levels"),
        ({"script": [{"say": "ok", "deep": _deep(5000)}]}, "nested more than 64 levels"),
        ({"script": [{"say": "\udcff"}]}, "UTF-8"),
    ],
)
def test_every_request_field_is_type_checked(
    runtime: tenure.Runtime, request_kwargs: dict[str, Any], message: str
) -> None:
    """One rule on both stores: what one of them could not hold is refused before either
    is asked, with a ValueError that names the field."""
    for call in (runtime.enqueue, runtime.run):
        with pytest.raises(tenure.InvalidRequest) as caught:
            call(req(**request_kwargs))
        assert message in str(caught.value)
        assert "\n" not in str(caught.value)
    assert runtime.runs() == []


_NESTED = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    "stored",
    [
        '{"prompt": "x", "tools": null}',
        '{"prompt": 5}',
        '{"prompt": "x", "metadata": []}',
        '{"prompt": "x", "max_iterations": "3"}',
        '{"prompt": "x", "surprise": 1}',
        "[1, 2]",
        "not JSON at all",
        # Well-typed, but values that enqueue refuses: a row written by hand or by another
        # version is checked as fully as the shape check at enqueue would.
        '{"prompt": "   "}',
        '{"prompt": "x", "max_iterations": 0}',
        '{"prompt": "x", "queue": ""}',
        '{"prompt": "x", "tools": ["a", "a"]}',
        '{"prompt": "x", "max_cost": -1}',
        '{"prompt": "x", "priority": 101}',
        '{"prompt": "x", "metadata": {"a": ' + _NESTED + "}}",
    ],
)
def test_a_corrupt_stored_request_fails_at_the_first_claim(
    runtime: tenure.Runtime, db_url: str, stored: str
) -> None:
    """SPEC §13.6: a payload that cannot be read fails the run `not_retryable` at once
    (whatever the exception), never leaves it running for the reaper."""
    from tests._raw import raw_execute

    run_id = runtime.enqueue(req())
    assert raw_execute(db_url, "UPDATE tenure_runs SET request = ? WHERE id = ?", stored, run_id)
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is tenure.Outcome.FAILED
    run = runtime.status(run_id)
    assert run is not None
    assert run.status is tenure.RunStatus.FAILED
    assert run.termination_reason is tenure.TerminationReason.NOT_RETRYABLE
    assert run.error_class is tenure.FailureClass.CONFIGURATION
    assert (run.attempt, run.requeue_count) == (0, 0)
    assert "\n" not in run.error


def test_retention_may_look_back_further_than_the_delay_ceiling(runtime: tenure.Runtime) -> None:
    """A purge age looks into the past: five years of retention is a fair policy."""
    assert runtime.purge(5 * 365 * 86400.0) == 0
    with pytest.raises(tenure.InvalidRequest, match="older_than_seconds"):
        runtime.purge(1e12)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lease_seconds": 1e300},
        {"lease_seconds": float("inf")},
        {"backoff_base": 400 * 86400},
        {"backoff_cap": float("inf")},
        {"approval_timeout": 1e12},
        {"reap_interval": 1e12},
    ],
)
def test_times_above_the_ceiling_are_refused(kwargs: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(tenure.InvalidRequest, match="seconds"):
        tenure.Runtime(f"sqlite:///{tmp_path}/x.db", **kwargs)


@pytest.mark.parametrize("delay", [1e12, 1e300, float("inf"), float("nan"), -1.0])
def test_a_delay_beyond_the_ceiling_is_refused(runtime: tenure.Runtime, delay: float) -> None:
    with pytest.raises(tenure.InvalidRequest, match="delay"):
        runtime.enqueue(req(), delay=delay)
    with pytest.raises(tenure.InvalidRequest, match="older_than_seconds"):
        runtime.purge(delay)
    assert runtime.runs() == []
    # The ceiling itself is accepted, and the run reads back on both stores.
    run_id = runtime.enqueue(req(), delay=tenure_ceiling())
    run = runtime.status(run_id)
    assert run is not None and run.available_at.year >= 2025


def tenure_ceiling() -> float:
    from tenure._policy import MAX_DELAY_SECONDS

    return MAX_DELAY_SECONDS


def test_tool_times_above_the_ceiling_are_refused(runtime: tenure.Runtime) -> None:
    for kwargs in ({"timeout": 1e300}, {"timeout": float("nan")}, {"approval_timeout": 1e12}):
        with pytest.raises(tenure.InvalidRequest, match="seconds"):

            @runtime.tool(**kwargs)  # type: ignore[arg-type]
            def slow() -> None: ...

    assert runtime.tool_names == []


@pytest.mark.parametrize("retry_after", [1e300, float("inf"), float("nan")])
def test_a_servers_retry_after_is_clamped_to_a_day(
    runtime: tenure.Runtime, retry_after: float
) -> None:
    """A Retry-After is the server's, not the user's: it is obeyed up to a day
    (`MAX_RETRY_AFTER_SECONDS`), not a user's ceiling of a year, and the run stays readable in
    every listing on both stores."""
    from datetime import timedelta

    from tenure._policy import MAX_RETRY_AFTER_SECONDS

    @runtime.tool
    def flaky() -> None:
        raise tenure.RetryableError("try later", retry_after=retry_after)

    script = [{"call": [{"tool": "flaky", "args": {}}]}, {"say": "done"}]
    run_id = runtime.enqueue(req(tools=["flaky"], script=script))
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is tenure.Outcome.REQUEUED
    run = runtime.status(run_id)
    assert run is not None and run.status is tenure.RunStatus.QUEUED
    wait = run.available_at - run.updated_at
    assert timedelta(seconds=MAX_RETRY_AFTER_SECONDS - 60) < wait
    assert wait <= timedelta(seconds=MAX_RETRY_AFTER_SECONDS + 60)
    assert [r.id for r in runtime.runs()] == [run_id]


def test_a_tool_result_json_cannot_hold_is_stored_as_text_on_both_stores(
    runtime: tenure.Runtime,
) -> None:
    """NaN, infinities, integers beyond 64 bits and text that is not UTF-8 in a tool's result:
    the run completes and the event holds their text, the same on SQLite and PostgreSQL."""
    import json

    @runtime.tool
    def odd() -> dict[str, Any]:
        return {
            "nan": float("nan"),
            "inf": [float("inf"), float("-inf")],
            "big": 2**70,
            "fine": 2**63 - 1,
            "nothing": None,
            "surrogate": "a\udcffb",
            "nul": "a\x00b",
        }

    script = [{"call": [{"tool": "odd", "args": {}}]}, {"say": "done"}]
    run_id = runtime.enqueue(req(tools=["odd"], script=script))
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is tenure.Outcome.COMPLETED
    (tool,) = [e for e in runtime.events(run_id) if e.kind is tenure.EventKind.TOOL]
    assert tool.payload["result"] == {
        "nan": "nan",
        "inf": ["inf", "-inf"],
        "big": str(2**70),
        "fine": 2**63 - 1,
        "nothing": None,
        "surrogate": "a\\udcffb",
        "nul": "a\x00b",
    }
    for event in runtime.events(run_id):
        json.dumps(event.to_json(), allow_nan=False)
