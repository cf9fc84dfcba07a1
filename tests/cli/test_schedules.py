"""`tenure schedules` (list, pause, resume, delete; --json) on each store, through the real
executable (SPEC §22)."""

from __future__ import annotations

from pathlib import Path

import tenure
from tenure import RunRequest

from .conftest import Cli


def test_list_pause_resume_and_delete_a_schedule(tmp_path: Path, db_url: str) -> None:
    cli = Cli(tmp_path, db_url)
    assert cli("init").code == 0
    assert cli("schedules").out.strip() == "no schedules"
    with tenure.Runtime(db_url) as rt:
        request = RunRequest(prompt="p", model="scripted", script=[{"say": "ok"}], queue="mail")
        rt.schedule("digest", cron="0 8 * * 1-5", request=request, timezone="Europe/Paris")
    (listed,) = cli("schedules", "--json").json()
    assert listed["name"] == "digest" and listed["cron"] == "0 8 * * 1-5"
    assert (listed["timezone"], listed["queue"], listed["paused"]) == (
        "Europe/Paris",
        "mail",
        False,
    )
    assert listed["next_fire"] is not None and listed["last_fire"] is None
    header, line = cli("schedules").out.strip().splitlines()
    assert header.split()[:4] == ["name", "cron", "timezone", "state"]
    assert line.split()[0] == "digest" and "active" in line and "never" in line

    assert cli("schedules", "pause", "digest").out.strip() == "paused digest"
    assert cli("schedules", "pause", "digest").out.strip() == "digest was already paused"
    assert cli("schedules", "--json").json()[0]["paused"] is True
    assert cli("schedules", "resume", "digest").out.strip() == "resumed digest"
    assert cli("schedules", "resume", "digest").out.strip() == "digest was not paused"
    assert cli("schedules", "delete", "digest").out.strip() == "deleted digest"
    assert cli("schedules", "delete", "digest").out.strip() == "no schedule digest"
    assert cli("schedules", "--json").json() == []
