"""tenure.mcp: an MCP server's tools registered as tenure tools, each with a declared effect,
called from real runs (SQLite and PostgreSQL) over stdio and streamable HTTP."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tenure
import tenure.mcp
from mcp import StdioServerParameters
from tenure import EventKind, FailureClass, Outcome, RunRequest, RunStatus, ToolEffect
from tests.loopkill import kill_loop

from .conftest import EFFECTS, writes

Register = Callable[..., tenure.mcp.Registration]


def tool_events(rt: tenure.Runtime, run_id: str) -> list[tenure.Event]:
    return [e for e in rt.events(run_id) if e.kind is EventKind.TOOL]


def script(*calls: tuple[str, dict[str, Any]], answer: str = "done") -> list[dict[str, Any]]:
    return [{"call": [{"tool": name, "args": args} for name, args in calls]}, {"say": answer}]


# -- registration --------------------------------------------------------------------------


def test_registration_lists_each_tool_with_its_effect_and_whether_it_was_defaulted(
    register: Register,
    stdio_server: StdioServerParameters,
    caplog: pytest.LogCaptureFixture,
) -> None:
    rt = tenure.Runtime("sqlite:///:memory:")
    with caplog.at_level(logging.WARNING, logger="tenure"):
        crm = register(rt, stdio_server, effects=EFFECTS)

    listed = {t.server_name: t for t in crm}
    assert set(listed) == {"find_customer", "upsert_note", "send_email", "slow_lookup"}
    assert (listed["find_customer"].effect, listed["find_customer"].defaulted) == (
        ToolEffect.READ_ONLY,
        False,
    )
    assert listed["upsert_note"].effect is ToolEffect.IDEMPOTENT_WRITE
    # The server says send_email is read-only; unclassified, it is a non-idempotent write.
    email = listed["send_email"]
    assert (email.effect, email.defaulted) == (ToolEffect.NON_IDEMPOTENT_WRITE, True)
    assert email.hints == {"readOnlyHint": True}
    assert email.suggested is ToolEffect.READ_ONLY
    assert listed["upsert_note"].hints == {"readOnlyHint": False, "idempotentHint": True}
    assert sorted(rt.tool_names) == sorted(listed)

    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2  # send_email and slow_lookup
    assert any("'send_email'" in w and "non_idempotent_write" in w for w in warned)
    assert any("readOnlyHint=True" in w for w in warned)

    table = crm.table()
    email_row = next(line for line in table.splitlines() if line.startswith("send_email"))
    assert "non_idempotent_write" in email_row and "DEFAULTED" in email_row
    assert "readOnlyHint=true (suggests read_only)" in email_row


def test_the_models_see_the_servers_schema(
    register: Register, stdio_server: StdioServerParameters
) -> None:
    rt = tenure.Runtime("sqlite:///:memory:")
    register(rt, stdio_server, effects=EFFECTS, prefix="crm_")

    assert "crm_find_customer" in rt.tool_names
    (spec,) = rt._tools.specs(["crm_find_customer"])
    assert spec.description == "Find a customer by id."
    assert spec.parameters["properties"]["customer_id"]["type"] == "string"
    assert spec.parameters["required"] == ["customer_id"]


@pytest.mark.parametrize(
    ("effects", "message"),
    [
        ({"find_customers": "read_only"}, "does not offer: find_customers"),
        ({"find_customer": "harmless"}, "unknown effect 'harmless'"),
    ],
)
def test_bad_effects_are_refused_and_nothing_is_registered(
    register: Register,
    stdio_server: StdioServerParameters,
    effects: dict[str, str],
    message: str,
) -> None:
    rt = tenure.Runtime("sqlite:///:memory:")
    with pytest.raises(tenure.InvalidRequest, match=message):
        register(rt, stdio_server, effects=effects)
    assert rt.tool_names == []


def test_an_unreachable_server_is_a_connection_error(register: Register) -> None:
    rt = tenure.Runtime("sqlite:///:memory:")
    with pytest.raises(tenure.ProviderError) as caught:
        register(rt, "http://127.0.0.1:9/mcp", connect_timeout=5)
    assert caught.value.failure_class is FailureClass.CONNECTION


# -- runs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_run_calls_the_servers_tools_with_the_idempotency_key_in_meta(
    make_runtime: Callable[..., tenure.Runtime],
    register: Register,
    crm_log: Path,
    request: pytest.FixtureRequest,
    transport: str,
) -> None:
    server = request.getfixturevalue("stdio_server" if transport == "stdio" else "http_server")
    rt = make_runtime()
    register(rt, server, effects=EFFECTS)
    run_id = rt.enqueue(
        RunRequest(
            prompt="note and mail c-42",
            model="scripted",
            tools=["find_customer", "upsert_note", "send_email"],
            script=script(
                ("find_customer", {"customer_id": "c-42"}),
                ("upsert_note", {"customer_id": "c-42", "note": "called"}),
                ("send_email", {"to": "ada@example.com", "subject": "Hello"}),
            ),
        )
    )

    result = rt.run_queued(run_id)

    assert result is not None and result.outcome is Outcome.COMPLETED
    found, noted, sent = tool_events(rt, run_id)
    assert found.payload["effect"] == "read_only"
    assert found.payload["result"] == {"id": "c-42", "name": "Ada", "email": "ada@example.com"}
    assert noted.payload["effect"] == "idempotent_write"
    assert sent.payload["effect"] == "non_idempotent_write"
    assert sent.payload["result"] == {"result": "sent to ada@example.com"}

    # The server saw each write once, with the key tenure recorded and the segment's token.
    logged = writes(crm_log)
    assert [w["tool"] for w in logged] == ["upsert_note", "send_email"]
    assert [w["idempotency_key"] for w in logged] == [
        noted.payload["idempotency_key"],
        sent.payload["idempotency_key"],
    ]
    run = rt.status(run_id)
    assert run is not None
    assert all(w["fencing_token"] == run.lease_token for w in logged)
    assert all(w["run_id"] == run_id for w in logged)


def test_a_tool_error_goes_back_to_the_model_and_the_run_goes_on(
    make_runtime: Callable[..., tenure.Runtime],
    register: Register,
    stdio_server: StdioServerParameters,
) -> None:
    rt = make_runtime()
    register(rt, stdio_server, effects=EFFECTS)

    result = rt.run(
        RunRequest(
            prompt="find c-7",
            model="scripted",
            tools=["find_customer"],
            script=script(("find_customer", {"customer_id": "c-7"}), answer="not found"),
        )
    )

    assert result.outcome is Outcome.COMPLETED
    (event,) = tool_events(rt, result.run_id)
    assert "no customer c-7" in event.payload["error"]


def test_arguments_that_break_the_servers_schema_never_reach_it(
    make_runtime: Callable[..., tenure.Runtime],
    register: Register,
    stdio_server: StdioServerParameters,
    crm_log: Path,
) -> None:
    rt = make_runtime()
    register(rt, stdio_server, effects=EFFECTS)

    result = rt.run(
        RunRequest(
            prompt="mail",
            model="scripted",
            tools=["send_email"],
            script=script(("send_email", {"to": "ada@example.com"})),
        )
    )

    assert result.outcome is Outcome.COMPLETED
    (event,) = tool_events(rt, result.run_id)
    assert "'subject' is a required property" in event.payload["error"]
    assert writes(crm_log) == []


def test_a_defaulted_write_that_times_out_is_dead_lettered_not_repeated(
    make_runtime: Callable[..., tenure.Runtime],
    register: Register,
    stdio_server: StdioServerParameters,
) -> None:
    rt = make_runtime()
    register(rt, stdio_server, effects=EFFECTS, timeout=0.5)
    run_id = rt.enqueue(
        RunRequest(
            prompt="slow",
            model="scripted",
            tools=["slow_lookup"],
            script=script(("slow_lookup", {"seconds": 3})),
        )
    )

    result = rt.run_queued(run_id)

    # Unclassified, so fenced as a non-idempotent write: a call whose outcome is unknown
    # is never made again.
    assert result is not None and result.outcome is Outcome.FAILED
    run = rt.status(run_id)
    assert run is not None
    assert (run.status, run.error_class) == (RunStatus.FAILED, FailureClass.TIMEOUT)
    assert run.termination_reason is tenure.TerminationReason.NOT_RETRYABLE
    assert run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE


def test_a_read_that_times_out_is_retried_and_the_session_still_serves(
    make_runtime: Callable[..., tenure.Runtime],
    register: Register,
    stdio_server: StdioServerParameters,
) -> None:
    rt = make_runtime()
    register(rt, stdio_server, effects={**EFFECTS, "slow_lookup": "read_only"}, timeout=0.5)
    run_id = rt.enqueue(
        RunRequest(
            prompt="slow",
            model="scripted",
            tools=["slow_lookup", "find_customer"],
            script=script(("slow_lookup", {"seconds": 3})),
        )
    )

    result = rt.run_queued(run_id)

    assert result is not None and result.outcome is Outcome.REQUEUED
    run = rt.status(run_id)
    assert run is not None and run.error_class is FailureClass.TIMEOUT
    after = rt.run(
        RunRequest(
            prompt="find",
            model="scripted",
            tools=["find_customer"],
            script=script(("find_customer", {"customer_id": "c-42"})),
        )
    )
    (event,) = tool_events(rt, after.run_id)
    assert event.payload["result"]["name"] == "Ada"


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_after_the_loop_thread_stops_the_session_is_opened_again(
    make_runtime: Callable[..., tenure.Runtime],
    register: Register,
    stdio_server: StdioServerParameters,
    http_server: str,
    transport: str,
) -> None:
    """The session was opened on the loop that stopped: its streams belong to that loop, so
    the next call opens a new session on the new loop instead of waiting on the old one."""
    rt = make_runtime()
    register(rt, stdio_server if transport == "stdio" else http_server, effects=EFFECTS, timeout=10)
    find = RunRequest(
        prompt="find",
        model="scripted",
        tools=["find_customer"],
        script=script(("find_customer", {"customer_id": "c-42"})),
    )
    assert rt.run(find).outcome is Outcome.COMPLETED
    kill_loop()

    after = rt.run(find)

    assert after.outcome is Outcome.COMPLETED
    run = rt.status(after.run_id)
    assert run is not None and run.requeue_count == 0  # no attempt hung on the old session
    (event,) = tool_events(rt, after.run_id)
    assert event.payload["result"]["name"] == "Ada"
