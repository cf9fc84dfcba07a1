"""Inside a crash-test worker process only: the app's store and write tools, wrapped so that
the process SIGKILLs itself at one chosen crash point, and records what it passed.

Nothing here changes tenure: the wrappers call through to the real store and the real tools,
and the process dies by a real SIGKILL (no `finally`, no flush, no goodbye) at the point.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tenure import _loop
from tenure._types import ToolContext
from tenure.agent._tools import Tool, Toolbox
from tenure.store._base import Claimed
from tenure.testing._rendezvous import Rendezvous

# Kinds of crash point (SPEC §19), in the order a run meets them.
# After the commit of the step boundary that recorded event TARGET (in an agent function's
# run: after every `ctx.*` step, and after a probe's verdict).
STEP = "step"
# Inside the write whose key ends in TARGET (TURN:INDEX of a model's call, or the POSITION
# of an agent function's `ctx.tool` / `ctx.step`), before it runs.
WRITE_BEFORE = "write-before"
WRITE_AFTER = "write-after"  # that write returned; its event is not recorded yet
# That write ran, but its answer is held past the tool's timeout: the process dies at its
# next commit (what it recorded of the unknown outcome), or when the hold ends.
WRITE_TIMEOUT = "write-timeout"
# The run was handed to a person at model turn TARGET (an agent function's step position).
WAITING = "waiting"
RESUME = "resume"  # the decision on turn (position) TARGET was claimed to continue the run
DRAIN = "drain"  # SIGTERM after the commit of event TARGET; SIGKILL during the grace
# An agent function's child run (SPEC §21) at POSITION TARGET was created (committed); the
# step that records it is not yet.
CHILD = "child"
POINT_KINDS = (STEP, WRITE_BEFORE, WRITE_AFTER, WRITE_TIMEOUT, WAITING, RESUME, DRAIN, CHILD)
# A drain that has not died at the next commit dies this long after its SIGTERM.
DRAIN_KILL_AFTER = 0.5
# A held write's answer comes this long after its timeout (never, as far as the step knows).
HOLD_PAST_TIMEOUT = 1.0


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Hooks:
    """The one point to die at (kind, target), and a trace file of what was passed."""

    def __init__(
        self, kind: str | None, target: str | None, trace: Path | None, worker: bool = True
    ) -> None:
        self.kind, self.target, self.trace = kind, target, trace
        # Only a worker drains on SIGTERM: a decider continuing a run inline (the first step
        # of an agent function that begins by asking a person) is no drain point.
        self.worker = worker
        self._drain_noted = False
        self._draining = False
        self._timed_out = False  # a held write timed out: die after the next commit
        self._lock = threading.Lock()

    def _note(self, kind: str, target: str, extra: str = "") -> None:
        if self.trace is not None:
            with self._lock, self.trace.open("a", encoding="utf-8") as f:
                f.write(f"{kind} {target} {extra}".rstrip() + "\n")

    def _at(self, kind: str, target: str) -> bool:
        return self.kind == kind and self.target == target

    def committed(self, sequences: Sequence[int] | None, events: Sequence[Any] = ()) -> None:
        if sequences is None:
            return
        if self._draining or self._timed_out:
            die()
        for i, sequence in enumerate(sequences):
            self._note(STEP, str(sequence), _agent_step(events[i] if i < len(events) else None))
            if self._at(STEP, str(sequence)):
                die()
            if self.worker and not self._drain_noted:
                self._drain_noted = True
                self._note(DRAIN, str(sequence))
            if self.worker and self._at(DRAIN, str(sequence)):
                self._drain()

    def _drain(self) -> None:
        # The worker's own SIGTERM handler starts the drain; the segment in flight goes on
        # during the grace, and dies at its next commit or shortly after.
        self._draining = True
        os.kill(os.getpid(), signal.SIGTERM)
        timer = threading.Timer(DRAIN_KILL_AFTER, die)
        timer.daemon = True
        timer.start()

    def write(self, when: str, ctx: ToolContext, tool: Tool) -> None:
        suffix = ctx.idempotency_key.removeprefix(f"{ctx.run_id}:")
        if when == WRITE_BEFORE:
            self._note(WRITE_BEFORE, suffix, f"{tool.name} {tool.effect}")
        if self._at(when, suffix):
            die()

    def holds(self, ctx: ToolContext) -> bool:
        """Whether this write's answer is the one to hold past its timeout."""
        return self._at(WRITE_TIMEOUT, ctx.idempotency_key.removeprefix(f"{ctx.run_id}:"))

    def timed_out(self) -> None:
        self._timed_out = True

    def ended(self, won: Any) -> None:
        """A segment ended by a commit other than a step's (a requeue, a settle): after a
        held write timed out, that is what the process recorded of it."""
        if self._timed_out and won is not None and won is not False:
            die()

    def children(self, runs: Sequence[Any]) -> None:
        for run in runs:
            if run.parent_id is None or run.idempotency_key is None:
                continue
            position = run.idempotency_key.removeprefix(f"{run.parent_id}:")
            self._note(CHILD, position)
            if self._at(CHILD, position):
                die()

    def suspended(self, waiting: dict[str, Any]) -> None:
        turn = str(waiting.get("turn"))
        self._note(WAITING, turn)
        if self._at(WAITING, turn):
            die()

    def resumed(self, claimed: Claimed) -> None:
        if claimed.decision is None:
            return
        turn = str(json.loads(claimed.decision).get("turn"))
        self._note(RESUME, turn)
        if self._at(RESUME, turn):
            die()


def _agent_step(event: Any) -> str:
    """`POSITION:STEP:NAME` of an agent function's step event (SPEC §20), else ''."""
    payload = getattr(event, "payload", None)
    if not isinstance(payload, dict) or not isinstance(payload.get("position"), int):
        return ""
    name = str(payload.get("name", "")).replace(" ", "_")
    return f"{payload['position']}:{payload.get('step', '')}:{name}"


class HookedStore:
    """The real store; the transitions that end a crash point call the hooks after they
    commit (the kill then lands after the commit, as a real crash there would). A decider's
    decision waits first at the `rendezvous` of its hold, so that the k decide at once."""

    def __init__(self, store: Any, hooks: Hooks, rendezvous: Rendezvous | None = None) -> None:
        self._store, self._hooks, self._rendezvous = store, hooks, rendezvous

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def record_step(self, lease: Any, lease_seconds: Any, events: Any, *args: Any) -> Any:
        sequences = self._store.record_step(lease, lease_seconds, events, *args)
        self._hooks.committed(sequences, list(events))
        return sequences

    def enqueue_many(self, runs: Any) -> Any:
        created = self._store.enqueue_many(runs)
        self._hooks.children(runs)
        return created

    def clear_fence(self, lease: Any, lease_seconds: Any, event: Any) -> Any:
        sequence = self._store.clear_fence(lease, lease_seconds, event)
        self._hooks.committed(None if sequence is None else [sequence], [event])
        return sequence

    def resolve_fence(self, lease: Any, lease_seconds: Any, events: Any) -> Any:
        # A probe's verdict: `not_done` alone (the write runs again next), or `done` with the
        # write's event.
        sequences = self._store.resolve_fence(lease, lease_seconds, events)
        self._hooks.committed(sequences, list(events))
        return sequences

    def requeue_in_doubt(self, *args: Any, **kwargs: Any) -> Any:
        won = self._store.requeue_in_doubt(*args, **kwargs)
        self._hooks.ended(won)
        return won

    def requeue(self, *args: Any, **kwargs: Any) -> Any:
        won = self._store.requeue(*args, **kwargs)
        self._hooks.ended(won)
        return won

    def settle(self, *args: Any, **kwargs: Any) -> Any:
        won = self._store.settle(*args, **kwargs)
        self._hooks.ended(won)
        return won

    def suspend(self, lease: Any, status: Any, waiting: dict[str, Any], *args: Any) -> Any:
        sequences = self._store.suspend(lease, status, waiting, *args)
        if sequences is not None:
            self._hooks.suspended(waiting)
        return sequences

    def _decision(self) -> None:
        if self._rendezvous is not None:
            self._rendezvous.meet()

    def decide_queued(self, *args: Any, **kwargs: Any) -> Any:
        self._decision()
        return self._store.decide_queued(*args, **kwargs)

    def decide_inline(self, *args: Any, **kwargs: Any) -> Any:
        self._decision()
        claimed = self._store.decide_inline(*args, **kwargs)
        if claimed is not None:
            self._hooks.resumed(claimed)
        return claimed

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        claimed = self._store.claim(*args, **kwargs)
        for item in claimed:
            self._hooks.resumed(item)
        return claimed

    def claim_run(self, *args: Any, **kwargs: Any) -> Any:
        claimed = self._store.claim_run(*args, **kwargs)
        if claimed is not None:
            self._hooks.resumed(claimed)
        return claimed

    def settle_and_claim(self, *args: Any, **kwargs: Any) -> Any:
        settled, claimed = self._store.settle_and_claim(*args, **kwargs)
        self._hooks.ended(settled or None)
        for item in claimed:
            self._hooks.resumed(item)
        return settled, claimed


@dataclasses.dataclass(frozen=True)
class HookedTool(Tool):
    """A write tool that passes the hooks before it runs and after it returns. `call` is
    the one way in: the built-in loop's `invoke` validates and calls it, an agent function's
    `ctx.tool` and `ctx.step` call it directly."""

    hooks: Hooks | None = None

    def call(self, context: ToolContext, values: dict[str, Any]) -> Any:
        assert self.hooks is not None
        self.hooks.write(WRITE_BEFORE, context, self)
        if self.hooks.holds(context):
            result = self._held(context, values)
        else:
            result = super().call(context, values)
        self.hooks.write(WRITE_AFTER, context, self)
        return result

    def _held(self, context: ToolContext, values: dict[str, Any]) -> Any:
        """The write runs; its answer comes only after the tool's timeout. An async tool is
        cancelled by the engine at the timeout (the write done, its outcome unknown to the
        step); a sync one cannot be, so the process dies when its hold ends."""
        assert self.hooks is not None
        if not self.asynchronous:
            Tool.call(self, context, values)
            time.sleep(self.timeout + HOLD_PAST_TIMEOUT)
            die()
        fn, hold = self.fn, self.timeout + HOLD_PAST_TIMEOUT

        async def answer_late(*args: Any, **kwargs: Any) -> Any:
            result = await fn(*args, **kwargs)
            await asyncio.sleep(hold)
            return result

        try:
            # The tool's own call (the loop, its timeout), on the late function.
            return Tool.call(dataclasses.replace(self, fn=answer_late), context, values)
        except _loop.TimedOut:
            self.hooks.timed_out()
            raise


def hooked(tool: Tool, hooks: Hooks, timeout_cap: float) -> Tool:
    """A write tool wrapped, with its timeout capped (the fence's lease covers the timeout,
    so a kill inside a write is reaped after the cap, not after minutes); others as they are."""
    if not tool.effect.is_write:
        return tool
    fields = {f.name: getattr(tool, f.name) for f in dataclasses.fields(Tool)}
    fields["timeout"] = min(tool.timeout, timeout_cap)
    return HookedTool(**fields, hooks=hooks)


def hooked_toolbox(tools: Toolbox, hooks: Hooks, timeout_cap: float) -> Toolbox:
    """The same tools; each write wrapped (`hooked`)."""
    box = Toolbox()
    for name in tools.names():
        tool = tools.get(name)
        assert tool is not None
        box.add(hooked(tool, hooks, timeout_cap))
    return box


def hook_steps(hooks: Hooks, timeout_cap: float) -> None:
    """An agent function's `ctx.step` builds its tool at each call (SPEC §20): in this
    process, a write step's tool is wrapped as the app's write tools are."""
    from tenure.agent import _functions

    make = _functions.step_tool

    def step_tool(fn: Any, name: str | None, effect: Any, timeout: float, probe: Any) -> Tool:
        tool = make(fn, name, effect, timeout, probe)  # the user's mistakes, as they are
        if not tool.effect.is_write:
            return tool
        # Its own call closure runs an async step under the timeout it was built with.
        return hooked(make(fn, name, effect, min(timeout, timeout_cap), probe), hooks, timeout_cap)

    _functions.step_tool = step_tool
