"""`tenure models` (SPEC §17): every model, with limits or not, its calls in flight and its
circuit, as a table or `--json`, from the real executable."""

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
    assert sorted(by_name) == ["fast", "free", "slow"]
    fast, slow, free = by_name["fast"], by_name["slow"], by_name["free"]
    assert (fast["requests_per_minute"], fast["tokens_per_minute"], fast["concurrency"]) == (
        600,
        90000,
        None,
    )
    assert fast["in_use"] == 0 and fast["circuit_open_until"] is None
    assert fast["requests_available"] == 60  # never called: a full bucket
    assert slow["concurrency"] == 2 and slow["in_use"] == 0
    # A model without limits: nothing counted, its circuit closed.
    assert [free[k] for k in ("requests_per_minute", "tokens_per_minute", "concurrency")] == [
        None,
        None,
        None,
    ]
    assert free["in_use"] == 0 and free["circuit_open_until"] is None
    opened = datetime.fromisoformat(slow["circuit_open_until"])
    assert 250 < (opened - runtime.store.now()).total_seconds() <= 300

    shown = cli("--app", "limited_app:rt", "models")
    assert shown.code == 0, shown.err
    header, *rows = shown.out.splitlines()
    assert header.split() == ["name", "requests/min", "tokens/min", "concurrency", "in", "use",
                              "circuit", "open", "until"]  # fmt: skip
    assert rows[0].split()[:5] == ["fast", "600", "90000", "-", "0"]
    assert rows[1].split() == ["free", "-", "-", "-", "0"]
    assert rows[2].split()[:5] == ["slow", "-", "-", "2", "0"]
    assert opened.strftime("%Y-%m-%d %H:%M") in rows[2]


def test_models_lists_a_model_without_limits_whose_circuit_the_store_knows(
    cli: Cli, runtime: tenure.Runtime
) -> None:
    """Without `--app`: the built-in app's model, and a model some other worker registered
    without limits whose circuit a 429 opened."""
    runtime.store.open_circuit("gpt-elsewhere", 300)

    listed = cli("models", "--json")
    assert listed.code == 0, listed.err
    by_name = {m["name"]: m for m in listed.json()}
    assert sorted(by_name) == ["default", "gpt-elsewhere"]
    elsewhere = by_name["gpt-elsewhere"]
    assert elsewhere["requests_per_minute"] is None and elsewhere["concurrency"] is None
    opened = datetime.fromisoformat(elsewhere["circuit_open_until"])
    assert 250 < (opened - runtime.store.now()).total_seconds() <= 300
    assert by_name["default"]["circuit_open_until"] is None

    shown = cli("models")
    assert shown.code == 0, shown.err
    row = next(r for r in shown.out.splitlines() if r.startswith("gpt-elsewhere"))
    assert opened.strftime("%Y-%m-%d %H:%M") in row


def test_models_of_an_app_without_models(cli: Cli) -> None:
    (cli.cwd / "bare_app.py").write_text("import tenure\n\nrt = tenure.Runtime()\n")
    assert cli("init").code == 0  # `models` refuses a SQLite file that does not exist
    shown = cli("--app", "bare_app:rt", "models")
    assert shown.code == 0 and shown.out.strip() == "no models"
    listed = cli("--app", "bare_app:rt", "models", "--json")
    assert listed.code == 0 and listed.json() == []
