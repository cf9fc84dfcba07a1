"""claim_cost: what one claim costs behind a backlog, with and without concurrency keys,
in CPU time (client and server), against another checkout in the same invocation.

    python bench/claim_cost.py [--size 10000] [--claims 1000] [--repeat 3] [--against DIR]
                               [--postgres URL] [--no-postgres] [--no-sqlite]

Each measurement is a child process (its `sys.path` starts at the checkout measured) on a
fresh database: SIZE runs are queued — without keys, or each with a concurrency key of its
own (SIZE keys, SPEC §22; skipped for a checkout without keys) — the database is quiesced
(VACUUM ANALYZE and a CHECKPOINT on PostgreSQL, a WAL checkpoint on SQLite), then CLAIMS
claims of one run each are timed. Reported per claim: the wall time (p50) and the CPU time
of the client process plus, on PostgreSQL, of the server's processes (every child of the
cluster's postmaster, read from /proc). CPU time depends on the machine's load far less
than a latency does, so it is the figure to compare on a busy machine. `--against DIR`
(repeatable) measures DIR's `src/` alternately with this checkout's (`tenure`); the ratio
column compares with the last DIR's claim of a backlog without keys.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import _common as c

BATCH = 5000


def child_main(url: str, size: int, claims: int, keyed: bool) -> None:
    """In a child process whose `sys.path` starts at the checkout being measured."""
    import dataclasses

    from tenure import RunRequest, Runtime
    from tenure.store import _bench

    def request(i: int) -> RunRequest:
        plain = RunRequest(prompt="x", model="scripted", script=[{"say": "ok"}])
        return dataclasses.replace(plain, concurrency_key=f"tenant-{i}") if keyed else plain

    with Runtime(url, lease_seconds=900.0) as rt:
        store = rt.store
        for start in range(0, size + claims, BATCH):
            rt.enqueue_many([request(start + i) for i in range(min(BATCH, size + claims - start))])
        _bench.quiesce(store)  # type: ignore[arg-type]
        store.claim("worker:bench:0:1", None, 900.0, 1)  # connections and statements warm
        walls = []
        server = c.cluster_cpu(url) or 0.0
        cpu = time.process_time()
        for _ in range(claims - 1):
            began = time.perf_counter()
            got = store.claim("worker:bench:0:1", None, 900.0, 1)
            walls.append(time.perf_counter() - began)
            if len(got) != 1:
                raise SystemExit(f"a claim took {len(got)} runs")
        client = time.process_time() - cpu
        server = (c.cluster_cpu(url) or 0.0) - server
    walls.sort()
    n = claims - 1
    print(json.dumps({"wall": walls[n // 2], "client": client / n, "server": server / n}))


def run_child(src: Path, url: str, size: int, claims: int, keyed: bool) -> dict[str, Any]:
    return c.checkout_child(__file__, src, "--child", url, size, claims, int(keyed))


def has_keys(src: Path) -> bool:
    """Whether the checkout's RunRequest takes a concurrency key (SPEC §22)."""
    text = (src / "tenure" / "_requests.py").read_text() if (src / "tenure").exists() else ""
    return "concurrency_key" in text


def main() -> None:
    parser = c.parser(__doc__.splitlines()[0], default_size=10_000, quick_size=500)
    parser.add_argument("--claims", type=int, default=1000, help="claims timed per measurement")
    c.add_against(parser)
    args = parser.parse_args()
    size, times = c.size_and_repeat(args)
    if args.claims < 2:
        raise SystemExit("claim_cost: --claims must be at least 2")
    claims = min(args.claims, 200) if args.quick else args.claims
    checkouts = c.checkouts(args, this="tenure")
    tables = []
    with c.scratch_dir() as tmp, c.maybe_postgres(args) as pg:
        count = iter(range(10**6))
        stores: list[tuple[str, Any]] = []
        if not args.no_sqlite:
            stores.append(("SQLite", lambda: f"sqlite:///{tmp}/c{next(count)}.db"))
        if pg is not None:
            stores.append(("PostgreSQL", lambda: pg.fresh("claim")))
        for store, fresh in stores:
            tables.append(measure(store, fresh, checkouts, size, claims, times))
    c.emit(*tables, preamble=c.machine())


def measure(
    store: str, fresh: Any, checkouts: dict[str, Path], size: int, claims: int, times: int
) -> c.Table:
    table = c.Table(
        f"claim_cost on {store}: one claim behind {size:,} queued runs, "
        f"{claims:,} claims (µs per claim)"
    )
    series: dict[tuple[str, str, str], c.Series] = {}
    for _ in range(times):
        for name, src in checkouts.items():  # alternating: the machine's drift falls on all
            for keyed in (False, True) if has_keys(src) else (False,):
                got = run_child(src, fresh(), size, claims, keyed)
                label = f"{size:,} keys" if keyed else "no keys"
                for metric in ("wall", "client", "server"):
                    series.setdefault((name, label, metric), c.Series()).add(got[metric] * 1e6)
    base_name = list(checkouts)[-1]  # the last --against, or this checkout
    names = {"wall": "wall p50", "client": "client CPU", "server": "server CPU"}
    for (name, label, metric), values in series.items():
        if metric == "server" and store == "SQLite":
            continue
        base = series[(base_name, "no keys", metric)]
        table.add(
            f"{name}: {label}",
            names[metric],
            values,
            note=f"{values.median / base.median:.2f}x of {base_name}, no keys",
        )
    return table


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1")
    else:
        main()
