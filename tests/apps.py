"""A tenure app for tests that run real worker processes.

`python -m tests.apps DB_URL LEDGER [--lease S] [--concurrency N] [--burst]` works the queue.
The `charge` tool appends one line per execution to LEDGER (an external system the test
audits afterwards), fsynced before it returns.

`pay` and `save` are the crash tests' tools (a short timeout, so a fence's lease is short):
each notes where it is in `LEDGER.marks` (`started`, `returned`) so that a test can kill the
worker at that point. `pay` (non-idempotent) can wait for a gate file before its effect,
hold after it, and return (on a run's first attempt) a value that takes `slow_return` seconds
to serialise, which keeps the worker between the tool's return and its event. `pay_probed`
and `pay_checked` are `pay` with a probe that reads the ledger by idempotency key;
`pay_checked`'s probe can also hold the worker inside it or after its verdict.

`soak_agent` is an agent function (SPEC §20) for the chaos soak: it branches on its model's
answer (`pay`: the probe-able `pay_probed`; else a read), books the run with a `ctx.step`
write that has a probe (a line in LEDGER, as `pay_probed`'s), draws `ctx.now` and `ctx.uuid`,
may wait for a person's `ctx.approve` (then an idempotent `save`), and sleeps.

`answered` is an agent function that asks its model and then, on its first attempt, stays
between the answer and its return (noted `RUN answered` in `LEDGER.marks`): the answer is
held there, to be recorded with the run's end, and a crash test kills the worker there.

`soak_parent` and `soak_child` are the soak's run trees (SPEC §21): a parent fans out with
`ctx.map` to `soak_child` runs (a model call on the tree's budget, the same probe-able
`ctx.step` booking, perhaps a sleep, perhaps a failure by design), perhaps to one nested
`soak_parent` of its own, and gathers them (`tolerant`: with `return_exceptions=True`;
`early`: only the first half, the rest cancelled by its end). It returns each gathered
child's answer in order (its output, or `{"failed": STATUS, "reason": ...}`)
and their sum, which `tests/_trees.py` checks against the children's rows.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import tenure
from tenure import ToolContext, ToolEffect

CRASH_TOOL_TIMEOUT = 0.5
# Long enough for a test to kill a worker inside the probe, which runs under this timeout.
CHECKED_TOOL_TIMEOUT = 3.0


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _lines(path: str) -> list[str]:
    p = Path(path)
    return [ln for ln in p.read_text().splitlines() if ln.strip()] if p.exists() else []


class SlowToSerialise:
    """A tool's return value whose JSON form takes `seconds` to produce: the worker stays
    between the tool's return and the recording of its event (`json.dumps(default=str)`)."""

    def __init__(self, value: object, seconds: float, marks: str, who: str) -> None:
        self.value, self.seconds, self.marks, self.who = value, seconds, marks, who

    def __str__(self) -> str:
        _append(self.marks, f"{self.who} returned\n")
        time.sleep(self.seconds)
        return str(self.value)


def make_app(db_url: str, ledger: str, lease: float = 1.0, max_requeues: int = 3) -> tenure.Runtime:
    rt = tenure.Runtime(
        db_url,
        lease_seconds=lease,
        backoff_base=0.05,
        backoff_cap=0.2,
        max_requeues=max_requeues,
    )
    marks = ledger + ".marks"

    def who(ctx: ToolContext) -> str:
        return f"{ctx.run_id} {ctx.idempotency_key} {ctx.fencing_token}"

    def mark(ctx: ToolContext, where: str) -> None:
        _append(marks, f"{who(ctx)} {where}\n")

    _add_pay(rt, ledger, mark, who)
    _add_probed_pay(rt, ledger, mark)
    _add_soak_agent(rt, ledger)
    _add_soak_trees(rt, ledger)
    _add_checked_pay(rt, ledger, mark)
    _add_answered(rt, marks)

    @rt.tool(effect=ToolEffect.IDEMPOTENT_WRITE, timeout=CRASH_TOOL_TIMEOUT)
    def save(ctx: ToolContext, slow_return: float = 0.0) -> Any:
        """An idempotent write: the same key converges wherever it runs."""
        mark(ctx, "started")
        if slow_return and ctx.attempt == 0:
            return SlowToSerialise(ctx.idempotency_key, slow_return, marks, who(ctx))
        return ctx.idempotency_key

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=2)
    def charge(ctx: ToolContext, amount: int, hold: float = 0.0) -> dict[str, object]:
        """Charge a customer (one ledger line per execution), then wait `hold` seconds."""
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{ctx.run_id} {ctx.idempotency_key} {ctx.fencing_token}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        time.sleep(hold)
        return {"charged": amount}

    @rt.tool
    def read(ctx: ToolContext) -> str:
        return ctx.run_id

    @rt.tool
    def nap(seconds: float) -> str:
        time.sleep(seconds)
        return "rested"

    return rt


def _add_pay(
    rt: tenure.Runtime,
    ledger: str,
    mark: Callable[[ToolContext, str], None],
    who: Callable[[ToolContext], str],
) -> None:
    marks = ledger + ".marks"

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=CRASH_TOOL_TIMEOUT)
    def pay(
        ctx: ToolContext, amount: int, gate: str = "", hold: float = 0.0, slow_return: float = 0.0
    ) -> Any:
        """Pay (one ledger line per execution); optionally wait for a gate file first."""
        mark(ctx, "started")
        while gate and not Path(gate).exists():
            time.sleep(0.02)
        _append(ledger, f"{ctx.run_id} {ctx.idempotency_key} {ctx.fencing_token}\n")
        time.sleep(hold)
        if slow_return and ctx.attempt == 0:
            return SlowToSerialise({"paid": amount}, slow_return, marks, who(ctx))
        return {"paid": amount}


class FencedLedger:
    """The outside system of the probe-able payments, made safe against a late call.

    A probe's `not_done` only holds if the interrupted call can no longer land: a worker
    frozen inside the payment (SIGSTOP, a VM pause) can wake after the probe and pay. So
    the ledger keeps, per idempotency key, the newest fencing token a probe has asked under
    (its floor), and refuses a payment under an older token; the probe's read and the floor
    it raises, and a payment's floor check and its line, are each one step under the key's
    lock, as a database would do them in one transaction on the key's row.

    The lock is per key, as a row lock would be: a worker frozen while it holds one key
    (inside its payment) keeps that key's probe waiting and no other."""

    def __init__(self, ledger: str) -> None:
        self.ledger = ledger
        self.keys = Path(ledger + ".keys")

    def _path(self, key: str, suffix: str) -> Path:
        return self.keys / (hashlib.sha1(key.encode()).hexdigest() + suffix)

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        self.keys.mkdir(exist_ok=True)
        fd = os.open(self._path(key, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _floor(self, key: str) -> int:
        return max((int(t) for t in _lines(str(self._path(key, ".floor")))), default=0)

    def paid(self, key: str, token: int) -> bool:
        """Whether `key` was paid; if not, no payment under a token older than `token`
        will be taken from now on."""
        with self._locked(key):
            if key in {line.split()[1] for line in _lines(self.ledger)}:
                return True
            _append(str(self._path(key, ".floor")), f"{token}\n")
            return False

    def pay(self, run_id: str, key: str, token: int) -> None:
        fd = os.open(self.ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            with self._locked(key):
                if token < self._floor(key):
                    raise RuntimeError(f"refused: payment {key} belongs to a newer attempt")
                os.write(fd, f"{run_id} {key} {token}\n".encode())
            # Readers see the line once written; the flush to disk need not hold the key.
            os.fsync(fd)
        finally:
            os.close(fd)


def _add_probed_pay(
    rt: tenure.Runtime, ledger: str, mark: Callable[[ToolContext, str], None]
) -> None:
    fenced = FencedLedger(ledger)

    def paid(ctx: ToolContext, amount: int, gate: str = "", hold: float = 0.0) -> tenure.Probe:
        """The probe of `pay_probed`: the ledger answers by idempotency key (SPEC §16)."""
        if fenced.paid(ctx.idempotency_key, ctx.fencing_token):
            return tenure.Probe.done({"paid": amount})
        return tenure.Probe.not_done()

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=CRASH_TOOL_TIMEOUT, probe=paid)
    def pay_probed(
        ctx: ToolContext, amount: int, gate: str = "", hold: float = 0.0
    ) -> dict[str, int]:
        """`pay`, with a probe: an interrupted payment goes back in doubt, not to a person."""
        mark(ctx, "started")
        while gate and not Path(gate).exists():
            time.sleep(0.02)
        fenced.pay(ctx.run_id, ctx.idempotency_key, ctx.fencing_token)
        time.sleep(hold)
        return {"paid": amount}


# A child's model call: a fixed usage, so that a tree's `max_tokens` is met after a few.
SOAK_CHILD_SCRIPT = [{"say": "ok", "usage": {"input_tokens": 20, "output_tokens": 10}}]


class Bookings:
    """The soak's `ctx.step` write and its probe: one ledger line per execution, refused
    to a late attempt; the probe reads the ledger by idempotency key."""

    def __init__(self, ledger: str) -> None:
        self.fenced = FencedLedger(ledger)

    def booked(self, ctx: ToolContext, amount: int) -> tenure.Probe:
        if self.fenced.paid(ctx.idempotency_key, ctx.fencing_token):
            return tenure.Probe.done({"booked": amount})
        return tenure.Probe.not_done()

    def book(self, ctx: ToolContext, amount: int) -> dict[str, int]:
        self.fenced.pay(ctx.run_id, ctx.idempotency_key, ctx.fencing_token)
        return {"booked": amount}


def _add_answered(rt: tenure.Runtime, marks: str) -> None:
    @rt.agent
    def answered(ctx: tenure.AgentContext) -> str:
        """Ask the model; on the first attempt, stay after its answer until killed."""
        text = ctx.model("answer?").text or ""
        if ctx.attempt == 0:
            _append(marks, f"{ctx.run_id} answered\n")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                time.sleep(0.05)
        return text


def _add_soak_agent(rt: tenure.Runtime, ledger: str) -> None:
    bookings = Bookings(ledger)
    book, booked = bookings.book, bookings.booked

    @rt.agent
    def soak_agent(
        ctx: tenure.AgentContext, amount: int, approve: bool, sleep: float
    ) -> dict[str, Any]:
        """Pay or read as the model says, book, perhaps ask a person, sleep.

        Args:
            amount: what to pay and book
            approve: whether to ask a person before saving
            sleep: seconds to sleep at the end (past the lease: the run is parked)
        """
        answer = ctx.model(f"pay {amount} or read?").text or ""
        if answer.startswith("pay"):
            ctx.tool("pay_probed", amount=amount)
        else:
            ctx.tool("read")
        ctx.step(
            book,
            amount,
            effect=ToolEffect.NON_IDEMPOTENT_WRITE,
            probe=booked,
            timeout=CRASH_TOOL_TIMEOUT,
        )
        stamp, ref = ctx.now(), ctx.uuid()
        approved = None
        if approve:
            approved = ctx.approve("save", {"ref": ref})
            if approved:
                ctx.tool("save")
        if sleep:
            ctx.sleep(sleep)
        return {"answer": answer, "approved": approved, "at": stamp.isoformat(), "ref": ref}


def _add_soak_trees(rt: tenure.Runtime, ledger: str) -> None:
    bookings = Bookings(ledger)

    @rt.agent
    def soak_child(
        ctx: tenure.AgentContext, value: int, fail: bool = False, sleep: float = 0.0
    ) -> dict[str, int]:
        """A child of a soak tree: a model call, a booking, perhaps a sleep and a failure.

        Args:
            value: what it answers, and books
            fail: raise after the booking (the parent sees ChildFailed)
            sleep: seconds to sleep before answering (past the lease: the run is parked)
        """
        ctx.model(f"child {value}")
        ctx.step(
            bookings.book,
            value,
            effect=ToolEffect.NON_IDEMPOTENT_WRITE,
            probe=bookings.booked,
            timeout=CRASH_TOOL_TIMEOUT,
        )
        if sleep:
            ctx.sleep(sleep)
        if fail:
            raise ValueError(f"child {value} fails by design")
        return {"value": value}

    @rt.agent
    def soak_parent(
        ctx: tenure.AgentContext,
        children: list[dict[str, Any]],
        tolerant: bool = False,
        nested: dict[str, Any] | None = None,
        early: bool = False,
    ) -> dict[str, Any]:
        """Fan out to `soak_child` runs (and perhaps a nested parent), gather their answers.

        Args:
            children: the inputs of the `soak_child` runs
            tolerant: gather with return_exceptions=True (else a failed child fails this run)
            nested: the input of a child `soak_parent` of its own, if any
            early: gather only the first half of the children (at least one) and end: the
                others still going are cancelled by this run's end
        """
        handles = ctx.map("soak_child", children, script=SOAK_CHILD_SCRIPT)
        if nested is not None:
            handles.append(ctx.child(agent="soak_parent", input=nested))
        if early:
            handles = handles[: awaited(len(handles))]
        found = ctx.gather(*handles, return_exceptions=tolerant)
        answers = [
            {"failed": f.status, "reason": f.reason} if isinstance(f, tenure.ChildFailed) else f
            for f in found
        ]
        return {"answers": answers, "sum": sum(answer_worth(a) for a in answers)}


def awaited(children: int) -> int:
    """How many children, the first ones, a `soak_parent` with `early` waits for."""
    return max(1, children // 2)


def answer_worth(answer: Any) -> int:
    """What a tree's answer adds to its parent's sum: a child's value, a nested parent's
    sum, nothing for a failed child."""
    if not isinstance(answer, dict) or "failed" in answer:
        return 0
    return int(answer.get("value", answer.get("sum", 0)))


def _add_checked_pay(
    rt: tenure.Runtime, ledger: str, mark: Callable[[ToolContext, str], None]
) -> None:
    """`pay_checked`: `pay_probed` whose probe can hold a worker where the crash sweep kills
    it, on the run's first probe (attempt 1): inside the probe (`probe_hold` seconds, less
    than the tool's timeout, after noting `probing`), or after its `done` verdict and before
    that verdict is recorded (a result that takes `slow_verdict` seconds to serialise)."""

    def checked(
        ctx: ToolContext,
        amount: int,
        gate: str = "",
        hold: float = 0.0,
        probe_hold: float = 0.0,
        slow_verdict: float = 0.0,
    ) -> tenure.Probe:
        mark(ctx, "probing")
        first = ctx.attempt == 1
        if first:
            time.sleep(probe_hold)
        if ctx.idempotency_key not in {line.split()[1] for line in _lines(ledger)}:
            return tenure.Probe.not_done()
        if first and slow_verdict:
            who = f"{ctx.run_id} {ctx.idempotency_key} {ctx.fencing_token}"
            return tenure.Probe.done(
                SlowToSerialise({"paid": amount}, slow_verdict, ledger + ".marks", who)
            )
        return tenure.Probe.done({"paid": amount})

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=CHECKED_TOOL_TIMEOUT, probe=checked)
    def pay_checked(
        ctx: ToolContext,
        amount: int,
        gate: str = "",
        hold: float = 0.0,
        probe_hold: float = 0.0,
        slow_verdict: float = 0.0,
    ) -> dict[str, int]:
        """`pay_probed` with a probe that the crash sweep can stop in."""
        mark(ctx, "started")
        while gate and not Path(gate).exists():
            time.sleep(0.02)
        _append(ledger, f"{ctx.run_id} {ctx.idempotency_key} {ctx.fencing_token}\n")
        time.sleep(hold)
        return {"paid": amount}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("db_url")
    parser.add_argument("ledger")
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--burst", action="store_true")
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("--max-requeues", type=int, default=3)
    parser.add_argument("--queue", action="append", help="only this queue (repeatable)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")
    rt = make_app(args.db_url, args.ledger, args.lease, args.max_requeues)
    print("ready", flush=True)
    rt.work(
        concurrency=args.concurrency,
        queues=args.queue,
        burst=args.burst,
        poll_interval=0.05,
        grace_seconds=args.grace,
    )
    rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
