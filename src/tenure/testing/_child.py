"""A crash-test process: `python -m tenure.testing._child ROLE ...` (started by the harness).

`work`: a worker of the app on one queue until the run ends or waits for a person.
`decide`: one of the k concurrent deciders of a waiting run; it continues the run inline
when its decision wins. Either may SIGKILL itself at the crash point it is given.
Exit codes: 0 done, 3 the run did not end or wait in time, 4 no such run; a decider prints
one JSON line: `{"won": bool, "error": str | null, "met": bool | null}` (`met`: whether all
the deciders were at the rendezvous when its decision was written; null: it wrote none).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from tenure import Runtime
from tenure._classify import describe
from tenure._command import load_app
from tenure._errors import DecisionConflict
from tenure._types import RunStatus
from tenure.testing._cases import MEET_TIMEOUT
from tenure.testing._hooks import HookedStore, Hooks, hook_steps, hooked_toolbox
from tenure.testing._rendezvous import Rendezvous

# Failed attempts come back at once: the harness must not wait out production backoff.
BACKOFF_BASE = 0.05
BACKOFF_CAP = 0.2
POLL = 0.05
WAITING = (RunStatus.WAITING_FOR_APPROVAL, RunStatus.WAITING_FOR_INPUT)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tenure.testing._child")
    p.add_argument("role", choices=["work", "decide"])
    p.add_argument("--app", required=True)
    p.add_argument("--database", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--lease", type=float, required=True)
    p.add_argument("--timeout-cap", type=float, required=True)
    p.add_argument("--deadline", type=float, default=60.0)
    p.add_argument("--kind")
    p.add_argument("--target")
    p.add_argument("--trace")
    p.add_argument("--who", default="crashtest")
    p.add_argument("--gate", help="a folder: say ready in it, decide once `go` appears there")
    p.add_argument("--deciders", type=int, default=1, help="how many meet in the gate folder")
    p.add_argument("--meet-timeout", type=float, default=MEET_TIMEOUT)
    p.add_argument("--deny", action="store_true")
    p.add_argument("--input", default="{}")
    return p


def hooked_runtime(args: argparse.Namespace, rendezvous: Rendezvous | None = None) -> Runtime:
    rt = load_app(args.app)
    rt.use_database(args.database)
    trace = Path(args.trace) if args.trace else None
    hooks = Hooks(args.kind, args.target, trace, worker=args.role == "work")
    # This process only: the Runtime's own store and tools, wrapped (tenure is unchanged).
    rt._store = HookedStore(rt.store, hooks, rendezvous)
    rt._tools = hooked_toolbox(rt._tools, hooks, args.timeout_cap)
    hook_steps(hooks, args.timeout_cap)
    rt.settings = dataclasses.replace(
        rt.settings, lease_seconds=args.lease, backoff_base=BACKOFF_BASE, backoff_cap=BACKOFF_CAP
    )
    rt.reap_interval = args.lease / 4
    return rt


def work(rt: Runtime, args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.deadline
    while time.monotonic() < deadline:
        status = rt.store.run_status(args.run)
        if status is None:
            return 4
        if status.is_terminal or status in WAITING:
            return 0
        rt.reap()
        rt.work(concurrency=1, queues=[args.queue], burst=True, poll_interval=POLL)
        time.sleep(POLL)
    return 3


def _default_decide(rt: Runtime, args: argparse.Namespace) -> None:
    run = rt.status(args.run)
    if run is not None and run.status is RunStatus.WAITING_FOR_INPUT:
        rt.submit_input(args.run, json.loads(args.input), args.who, execute="inline")
    else:
        rt.approve(args.run, not args.deny, args.who, execute="inline")


def decide(rt: Runtime, args: argparse.Namespace, rendezvous: Rendezvous | None) -> int:
    module = importlib.import_module(args.app.partition(":")[0])
    custom: Any = getattr(module, "decide", None)
    if args.gate:
        # Every decider is started and set up before any begins (the rendezvous then has
        # each decision wait for the others).
        gate = Path(args.gate)
        (gate / f"ready-{args.who}").touch()
        deadline = time.monotonic() + args.deadline
        while not (gate / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.002)
    outcome: dict[str, Any] = {"won": True, "error": None}
    try:
        if callable(custom):
            custom(args.run, args.who)
        else:
            _default_decide(rt, args)
    except DecisionConflict:
        outcome["won"] = False
    except Exception as exc:
        outcome = {"won": False, "error": describe(exc)}
    finally:
        # A handler that returned without deciding must not keep the others waiting.
        if rendezvous is not None:
            rendezvous.leave()
    outcome["met"] = None if rendezvous is None else rendezvous.met
    print(json.dumps(outcome), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    rendezvous = None
    if args.role == "decide" and args.gate:
        rendezvous = Rendezvous(Path(args.gate), args.who, args.deciders, args.meet_timeout)
    rt = hooked_runtime(args, rendezvous)
    try:
        return work(rt, args) if args.role == "work" else decide(rt, args, rendezvous)
    finally:
        rt.close()


if __name__ == "__main__":
    sys.exit(main())
