"""A product that runs reports for many customers on one shared queue (docs/queues.md).

    python examples/multi_tenant.py              # on sqlite:///tenants.db
    TENURE_DATABASE_URL=postgresql://... python examples/multi_tenant.py

Each tenant's runs carry its `concurrency_key`. Acme enqueues a batch of twelve reports
first and may run at most two at once (`rt.set_concurrency_limit`); Globex then asks for
two, and Initech for one urgent report (`priority=10`). The claim, in the database, takes
Initech's first, lets Globex's runs take turns with Acme's instead of waiting behind all
twelve, and never runs more than two of Acme's at once, whichever worker claims. A nightly
digest per tenant is stored as a cron schedule in the tenant's time zone: every worker
fires due schedules, each tick exactly once. Two workers (threads of one process here;
`tenure --app examples.multi_tenant:rt worker` processes on any number of hosts in
production) drain the queue.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from datetime import datetime

import tenure
from tenure import EventKind, RunRequest, RunStatus

rt = tenure.Runtime(os.environ.get("TENURE_DATABASE_URL", "sqlite:///tenants.db"))
rt.add_model("default", tenure.providers.Scripted())

TENANTS = {  # tenant: (reports, priority, time zone)
    "acme": (12, 0, "Europe/Berlin"),
    "globex": (2, 0, "America/New_York"),
    "initech": (1, 10, "Asia/Tokyo"),
}
ACME_LIMIT = 2
_running: Counter[str] = Counter()
_most: Counter[str] = Counter()
_lock = threading.Lock()


@rt.tool
def build_report(tenant: str, number: int) -> str:
    """Build one report of a tenant (a stand-in for the real work)."""
    with _lock:
        _running[tenant] += 1
        _most[tenant] = max(_most[tenant], _running[tenant])
    time.sleep(0.05)
    with _lock:
        _running[tenant] -= 1
    return f"report {number} of {tenant}"


def report(tenant: str, number: int, priority: int = 0) -> RunRequest:
    return RunRequest(
        prompt=f"Build report {number} for {tenant}.",
        tools=["build_report"],
        concurrency_key=tenant,
        priority=priority,
        script=[
            {"call": [{"tool": "build_report", "args": {"tenant": tenant, "number": number}}]},
            {"say": f"Report {number} of {tenant} is ready."},
        ],
    )


def main(workers: int = 2) -> int:
    rt.set_concurrency_limit("acme", ACME_LIMIT)
    ids: dict[str, str] = {}
    for tenant, (count, priority, zone) in TENANTS.items():
        for run_id in rt.enqueue_many([report(tenant, n, priority) for n in range(count)]):
            ids[run_id] = tenant
        rt.schedule(
            f"digest-{tenant}",
            cron="0 3 * * *",
            timezone=zone,
            request=RunRequest(prompt=f"Digest for {tenant}.", concurrency_key=tenant),
        )
    work = {"concurrency": 4, "burst": True, "poll_interval": 0.05}
    threads = [threading.Thread(target=rt.work, kwargs=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # When each run was first claimed (a worker claims several runs at once: those share
    # the time of their claim).
    first: dict[str, list[datetime]] = {}
    for run_id, tenant in ids.items():
        when = min(e.created_at for e in rt.events(run_id) if e.kind is EventKind.CLAIMED)
        first.setdefault(tenant, []).append(when)

    def before(tenant: str, of: str | None = None) -> int:
        """Runs (of one tenant, or of all) claimed before the tenant's first one."""
        start = min(first[tenant])
        counted = [first[of]] if of else first.values()
        return sum(1 for times in counted for t in times if t < start)

    statuses = Counter(str(run.status) for run in (rt.status(i) for i in ids) if run)
    # On PostgreSQL two workers claim side by side: a claim in flight at the same moment as
    # the one that took Initech's report may be stamped first (never more than one claim).
    # Globex's first report is in the first claims whichever worker makes them; of Acme's
    # twelve, only as many as its limit can have been claimed before it.
    print(f"runs claimed before initech's urgent one: {before('initech')} (enqueued after 14)")
    acme_first = before("globex", of="acme")
    print(f"acme reports claimed before globex's first: {acme_first} (12 queued first)")
    print(f"most acme reports running at once: {_most['acme']} (limit {ACME_LIMIT})")
    print(f"{len(ids)} reports: {dict(statuses)}")
    for s in rt.schedules():
        assert s.next_fire is not None
        print(f"{s.name}: next fire {s.next_fire:%Y-%m-%d %H:%M} UTC ({s.cron}, {s.timezone})")
    done = statuses[str(RunStatus.COMPLETED)] == len(ids)
    return 0 if done and _most["acme"] <= ACME_LIMIT else 1


if __name__ == "__main__":
    raise SystemExit(main())
