"""examples/mcp_tools.py runs as a user would run it, on both stores."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mcp_tools.py"


def test_the_mcp_example_runs_and_each_write_reaches_the_server_once(db_url: str) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), db_url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    out = done.stdout
    table = out.split("\nrun ")[0]
    rows = {line.split()[0]: line for line in table.splitlines() if line.strip()}
    assert "DEFAULTED" in rows["notify_owner"]
    assert "non_idempotent_write" in rows["notify_owner"]
    assert "completed — Noted, and the owner knows." in out
    saw = out.split("the server saw:")[1].split()
    assert saw[0::3] == ["put_note", "notify_owner"]
    # The keys the server logged are the ones the run recorded for those calls.
    recorded = [line.split()[-1] for line in out.splitlines() if line.startswith("  tool ")]
    assert saw[2::3] == recorded[1:]
    assert "has no declared effect" in done.stderr
