"""`tenure crashtest` through the real executable: the demo app at every crash point passes;
a broken app exits 1 naming the property; bad usage is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import Cli, one_line_error

ROOT = Path(__file__).resolve().parents[2]
# Small on purpose: every point of one run that reads, writes idempotently and writes
# non-idempotently is about a dozen cases (SQLite, one fresh file each).
DEMO_SCENARIOS = [
    {
        "name": "bill",
        "prompt": "bill order 7",
        "tools": ["lookup_order", "set_order_status", "send_invoice"],
        "script": [
            {"call": [{"tool": "lookup_order", "args": {"order_id": "7"}}]},
            {"call": [{"tool": "set_order_status", "args": {"order_id": "7", "status": "billed"}}]},
            {
                "call": [
                    {"tool": "send_invoice", "args": {"customer_id": "c7", "amount_cents": 700}}
                ]
            },
            {"say": "billed"},
        ],
    }
]
BROKEN_CHARGE = [
    {
        "name": "charge",
        "prompt": "charge",
        "tools": ["charge"],
        "script": [{"call": [{"tool": "charge", "args": {"amount": 5}}]}, {"say": "charged"}],
    }
]


def scenarios(cli: Cli, items: list[dict[str, object]]) -> str:
    path = cli.cwd / "scenarios.json"
    path.write_text(json.dumps(items))
    return str(path)


@pytest.mark.slow
def test_the_demo_app_passes_every_crash_point(cli: Cli) -> None:
    path = scenarios(cli, DEMO_SCENARIOS)
    result = cli("crashtest", "--scenarios", path, "--json", database=False, timeout=110)
    assert result.code == 0, result.out + result.err
    cases = result.json()
    kinds = {case["point"].split(" ")[0] for case in cases}
    assert kinds == {"reference", "step", "write-before", "write-after", "write-timeout", "drain"}
    for case in cases:
        assert all(v["ok"] is not False for v in case["properties"].values()), case
        assert case["properties"]["effects"]["ok"] is True  # the demo module's check()


@pytest.mark.slow
def test_a_broken_app_exits_1_naming_the_property(cli: Cli, tmp_path: Path) -> None:
    result = cli(
        "--app",
        "tests.crashtest.broken_app:rt",
        "crashtest",
        "--scenarios",
        scenarios(cli, BROKEN_CHARGE),
        "--points",
        "write-after",
        "--json",
        database=False,
        timeout=110,
        PYTHONPATH=str(ROOT),
        CRASHTEST_LEDGER=str(tmp_path / "ledger.jsonl"),
    )
    assert result.code == 1, result.err
    verdicts = {r["point"]: r["properties"] for r in result.json()}
    assert verdicts["reference"]["effects"]["ok"] is True
    assert verdicts["write-after charge@2"]["effects"]["ok"] is False


@pytest.mark.slow
def test_a_piped_table_keeps_every_column(cli: Cli, tmp_path: Path) -> None:
    """Piped (no terminal, no COLUMNS), the table is not cut to 80 columns."""
    long_name = "charge-a-customer-twice-if-the-fence-does-not-hold-" + "x" * 30
    result = cli(
        "--app",
        "tests.crashtest.broken_app:rt",
        "crashtest",
        "--scenarios",
        scenarios(cli, [{**BROKEN_CHARGE[0], "name": long_name}]),
        "--points",
        "write-after",
        database=False,
        timeout=110,
        PYTHONPATH=str(ROOT),
        CRASHTEST_LEDGER=str(tmp_path / "ledger.jsonl"),
    )
    assert result.code == 1, result.err
    lines = result.out.splitlines()
    header = lines[0].split()
    assert header[:2] == ["scenario", "point"] and header[-1] == "fencing", lines[0]
    assert len(header) == 2 + 6
    rows = [line for line in lines[1:] if line.startswith(long_name)]
    assert len(rows) == 2 and not any("…" in line for line in [lines[0], *rows]), result.out
    assert all(len(line.split()) >= len(header) for line in rows), result.out
    violated = [line for line in rows if "  write-after" in line]
    assert len(violated) == 1 and "VIOLATED" in violated[0], result.out


def test_bad_usage_is_one_line_exit_2(cli: Cli) -> None:
    missing = cli("crashtest", "--scenarios", str(cli.cwd / "nope.json"))
    assert missing.code == 2 and "cannot read it" in one_line_error(missing)
    path = scenarios(cli, DEMO_SCENARIOS)
    unknown = cli("crashtest", "--scenarios", path, "--points", "lunch")
    assert unknown.code == 2 and "lunch" in one_line_error(unknown)
    bad = scenarios(cli, [{"name": "x", "prompt": "p", "tools": ["no_such_tool"]}])
    tool = cli("crashtest", "--scenarios", bad)
    assert tool.code == 2 and "no_such_tool" in one_line_error(tool)
    no_name = scenarios(cli, [{"prompt": "p"}])
    nameless = cli("crashtest", "--scenarios", no_name)
    assert nameless.code == 2 and "name" in one_line_error(nameless)
