"""Runs found by their request's metadata and by when they were created, on both stores:
ended runs too (their row keeps no request), through the API and the real executable."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest

import tenure
from tenure import RunRequest, RunStatus

from .._raw import raw_execute

MakeRuntime = Callable[..., tenure.Runtime]


def request(tenant: str, tier: str = "free") -> RunRequest:
    return RunRequest(
        prompt="p",
        model="scripted",
        script=[{"say": "ok"}],
        metadata={"tenant": tenant, "tier": tier, "n": 3},
    )


def backdate(db_url: str, run_id: str, seconds: float) -> None:
    if db_url.startswith("sqlite"):
        raw_execute(db_url, "UPDATE tenure_runs SET created_at = created_at - ? WHERE id = ?",
                    seconds, run_id)  # fmt: skip
    else:
        raw_execute(db_url, "UPDATE tenure_runs SET created_at = created_at - make_interval("
                    "secs => ?) WHERE id = ?", seconds, run_id)  # fmt: skip


def test_search_by_metadata_and_creation_time(make_runtime: MakeRuntime, db_url: str) -> None:
    rt = make_runtime()
    acme = rt.enqueue(request("acme", "pro"))
    acme_free = rt.enqueue(request("acme"))
    other = rt.enqueue(request("globex", "pro"))
    old = rt.enqueue(request("acme", "pro"))
    backdate(db_url, old, 3 * 3600)
    rt.work(burst=True)  # ended runs keep no request in their row: found by their event
    assert rt.status(acme).status is RunStatus.COMPLETED  # type: ignore[union-attr]

    def ids(**kw: object) -> set[str]:
        kw.setdefault("limit", 10)
        # Runs enqueued together may share their creation time: compared as sets.
        return {r.id for r in rt.runs(**kw)}  # type: ignore[arg-type]

    assert ids(metadata={"tenant": "acme"}) == {acme_free, acme, old}
    assert ids(metadata={"tenant": "acme", "tier": "pro"}) == {acme, old}
    assert ids(metadata={"tenant": "initech"}) == set()
    assert ids(metadata={"n": 3}) == {other, acme_free, acme, old}
    assert ids(metadata={"n": "3"}) == set()  # values compare as JSON values, on both stores
    assert ids(since=3600) == {other, acme_free, acme}
    assert ids(until=3600) == {old}
    assert ids(metadata={"tier": "pro"}, since=3600, queue="default") == {other, acme}
    newest = rt.runs(metadata={"tier": "pro"}, status="completed", limit=1)
    assert len(newest) == 1 and newest[0].id in {other, acme}
    assert [r.id for r in rt.runs(metadata={"tier": "pro"}, limit=10)][-1] == old
    with pytest.raises(tenure.InvalidRequest, match="until must be more recent"):
        rt.runs(since=60, until=120)
    with pytest.raises(tenure.InvalidRequest, match="metadata must be a non-empty dict"):
        rt.runs(metadata={})
    with pytest.raises(tenure.InvalidRequest, match="since"):
        rt.runs(since=-1)


def test_tenure_runs_searches_from_the_command_line(make_runtime: MakeRuntime, db_url: str) -> None:
    rt = make_runtime()
    acme = rt.enqueue(request("acme", "pro"))
    rt.enqueue(request("globex"))
    rt.work(burst=True)

    def tenure_runs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tenure", "--database", db_url, "runs", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = tenure_runs("--meta", "tenant=acme", "--meta", "tier=pro", "--since", "1h", "--json")
    assert done.returncode == 0, done.stderr
    assert [r["id"] for r in json.loads(done.stdout)] == [acme]
    bad = tenure_runs("--meta", "tenant")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "use KEY=VALUE" in bad.stderr and "Traceback" not in bad.stderr
