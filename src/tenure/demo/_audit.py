"""What the demo checks at the end, read back from the database after the workers stopped.

- every run ended (SPEC §13.1);
- no non-idempotent write ran twice: at most one ledger row per (run, idempotency key)
  (SPEC §13.2);
- a ledger row that the journal does not record is a write interrupted by the kill: its run
  must have been dead-lettered with the fence standing, never resumed;
- and every promise `tenure.audit` checks on the whole event log (sequences, fencing tokens,
  the journal, the requeue budget, dead-letter reasons), with the ledger's fencing tokens.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tenure import Event, EventKind, Run, RunStatus, Runtime, TerminationReason, ToolEffect
from tenure.audit import LedgerEntry
from tenure.audit import audit as check_invariants
from tenure.demo._app import sqlite_path

LEDGER_TOOL = "send_invoice"


@dataclass
class Scenario:
    runs: int = 0
    completed: int = 0
    dead_lettered: int = 0
    retried: int = 0
    recovered: int = 0


@dataclass(frozen=True)
class Audit:
    runs: int
    ended: int
    outcomes: dict[tuple[str, str], int]
    ledger_rows: int
    ledger_keys: int
    repeated_writes: int
    journaled_writes: int
    interrupted_writes: int
    interrupted_not_fenced: int
    resolved_by_probe: dict[str, int]  # verdicts of the invoice probe: done, not_done, unknown
    stale_requeued: int
    recovered_from_killed: int
    scenarios: dict[str, Scenario]
    events: int = 0
    violations: tuple[str, ...] = ()
    refused_writes: int = 0

    @property
    def passed(self) -> bool:
        return (
            self.runs > 0
            and self.ended == self.runs
            and self.repeated_writes == 0
            and self.interrupted_not_fenced == 0
            and not self.violations
        )


def _ledger(database_url: str) -> list[LedgerEntry]:
    conn = sqlite3.connect(sqlite_path(database_url))
    try:
        rows = conn.execute(
            "SELECT run_id, idempotency_key, fencing_token FROM demo_ledger ORDER BY id"
        ).fetchall()
    finally:
        conn.close()
    return [LedgerEntry(run_id, key, int(token)) for run_id, key, token in rows]


def _journaled_keys(events: Sequence[Event]) -> set[str]:
    return {
        str(e.payload.get("idempotency_key"))
        for e in events
        if e.kind is EventKind.TOOL
        and e.payload.get("effect") == ToolEffect.NON_IDEMPOTENT_WRITE
        and not e.payload.get("error")
    }


@dataclass
class _Requeues:
    failure: bool = False
    stale: bool = False
    from_killed: bool = False


def _requeues(events: Sequence[Event], killed: Sequence[str]) -> _Requeues:
    """Was the run requeued after a failure, as stale (or in doubt), from a killed worker's
    lease?"""
    holder: dict[object, str] = {}
    found = _Requeues()
    for e in events:
        if e.kind is EventKind.CLAIMED:
            holder[e.payload.get("lease_token")] = str(e.payload.get("worker"))
        elif e.kind is EventKind.REQUEUED and e.payload.get("cause") == "failure":
            found.failure = True
        # A run whose worker died inside an invoice is requeued in doubt, for its probe.
        elif e.kind is EventKind.REQUEUED and e.payload.get("cause") in ("stale", "in_doubt"):
            found.stale = True
            worker = holder.get(e.payload.get("lease_token"), "")
            found.from_killed = found.from_killed or any(worker.startswith(k) for k in killed)
    return found


def _scenario(events: Sequence[Event]) -> str:
    request = next((e.payload for e in events if e.kind is EventKind.REQUEST), {})
    return str((request.get("metadata") or {}).get("scenario", "other"))


def audit(
    app: Runtime, total: int, killed: Sequence[str], worker_logs: Sequence[Path] = ()
) -> Audit:
    """`killed`: the identity prefixes (`worker:HOST:PID:`) of the workers that were killed;
    `worker_logs`: where the workers logged (for the segments that stopped on a refused write).
    """
    # The ledger first: a write it shows has its fence or its event committed by then.
    entries = _ledger(app.database_url)
    ledger = Counter((e.run_id, e.idempotency_key) for e in entries)
    runs: list[Run] = app.runs(limit=total + 1000)
    keys_by_run: dict[str, set[str]] = {}
    for run_id, key in ledger:
        keys_by_run.setdefault(run_id, set()).add(key)
    journaled = interrupted = interrupted_not_fenced = stale = from_killed = 0
    verdicts: Counter[str] = Counter()
    scenarios: dict[str, Scenario] = {}
    for run in runs:
        events = app.events(run.id)
        verdicts.update(str(e.payload.get("verdict")) for e in events if e.kind is EventKind.PROBE)
        keys = _journaled_keys(events)
        journaled += len(keys)
        lost = keys_by_run.get(run.id, set()) - keys
        interrupted += len(lost)
        # Fenced: dead-lettered with the fence standing, or back in doubt for its probe.
        fenced = run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE and (
            run.termination_reason is TerminationReason.NOT_RETRYABLE or run.fence_probe
        )
        interrupted_not_fenced += len(lost) if lost and not fenced else 0
        requeues = _requeues(events, killed)
        stale += requeues.stale
        from_killed += requeues.from_killed
        scenario = scenarios.setdefault(_scenario(events), Scenario())
        scenario.runs += 1
        scenario.completed += run.status is RunStatus.COMPLETED
        scenario.dead_lettered += run.is_dead_letter
        scenario.retried += requeues.failure
        scenario.recovered += requeues.from_killed
    outcomes = Counter((str(r.status), str(r.termination_reason or "")) for r in runs)
    invariants = check_invariants(
        app.store,
        entries,
        max_requeues=app.settings.max_requeues,
        ledger_tools=[LEDGER_TOOL],
        worker_logs=worker_logs,
    )
    return Audit(
        runs=len(runs),
        ended=sum(r.status.is_terminal for r in runs),
        outcomes=dict(sorted(outcomes.items())),
        ledger_rows=sum(ledger.values()),
        ledger_keys=len(ledger),
        repeated_writes=sum(1 for n in ledger.values() if n > 1),
        journaled_writes=journaled,
        interrupted_writes=interrupted,
        interrupted_not_fenced=interrupted_not_fenced,
        resolved_by_probe=dict(verdicts),
        stale_requeued=stale,
        recovered_from_killed=from_killed,
        scenarios=scenarios,
        events=invariants.events,
        violations=tuple(invariants.violations),
        refused_writes=invariants.refused_writes,
    )
