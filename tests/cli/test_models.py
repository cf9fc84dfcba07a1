"""`tenure models` (SPEC §17): each model with limits, its calls in flight and its circuit,
as a table or `--json`, from the real executable."""

from __future__ import annotations

from datetime import datetime

import tenure

from .conftest import Cli

LIMITED_APP = """
import tenure

rt = tenure.Runtime()
rt.add_model("fast", tenure.providers.Scripted(),
             limits=tenure.Limits(requests_per_minute=600, tokens_per_minute=90000))
rt.add_model("slow", tenure.providers.Scripted(), limits=tenure.Limits(concurrency=2))
rt.add_model("free", tenure.providers.Scripted())
"""


def test_models_shows_limits_use_and_circuits(cli: Cli, runtime: tenure.Runtime) -> None:
    (cli.cwd / "limited_app.py").write_text(LIMITED_APP)
    ran = cli("--app", "limited_app:rt", "run", "--prompt", "p", "--model", "slow",
              "--script", cli.script([{"say": "ok"}]))  # fmt: skip
    assert ran.code == 0, ran.err
    runtime.store.open_circuit("slow", 300)

    listed = cli("--app", "limited_app:rt", "models", "--json")
    assert listed.code == 0, listed.err
    by_name = {m["name"]: m for m in listed.json()}
    assert sorted(by_name) == ["fast", "slow"]  # a model without limits has no capacity
    fast, slow = by_name["fast"], by_name["slow"]
    assert (fast["requests_per_minute"], fast["tokens_per_minute"], fast["concurrency"]) == (
        600,
        90000,
        None,
    )
    assert fast["in_use"] == 0 and fast["circuit_open_until"] is None
    assert fast["requests_available"] == 60  # never called: a full bucket
    assert slow["concurrency"] == 2 and slow["in_use"] == 0
    opened = datetime.fromisoformat(slow["circuit_open_until"])
    assert 250 < (opened - runtime.store.now()).total_seconds() <= 300

    shown = cli("--app", "limited_app:rt", "models")
    assert shown.code == 0, shown.err
    header, *rows = shown.out.splitlines()
    assert header.split() == ["name", "requests/min", "tokens/min", "concurrency", "in", "use",
                              "circuit", "open", "until"]  # fmt: skip
    assert rows[0].split()[:5] == ["fast", "600", "90000", "-", "0"]
    assert rows[1].split()[:5] == ["slow", "-", "-", "2", "0"]
    assert opened.strftime("%Y-%m-%d %H:%M") in rows[1]


def test_models_without_any_limits(cli: Cli) -> None:
    shown = cli("models")
    assert shown.code == 0 and shown.out.strip() == "no models with limits"
    listed = cli("models", "--json")
    assert listed.code == 0 and listed.json() == []
