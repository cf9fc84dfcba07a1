"""How the command line shows things: aligned tables (coloured on a terminal, plain when
piped), one-line event summaries, JSON for `--json`."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.text import Text

from tenure import Event, EventKind, ForkPlan, Run, RunStatus, TerminationReason
from tenure.agent._runviews import AgentCall, AgentStep, Parameter, agent_call, parameters
from tenure.store._base import Budget, ModelState

# markup=False: run outputs, errors and prompts are user text and must print verbatim.
out = Console(highlight=False, markup=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)

STATUS_STYLE = {
    RunStatus.QUEUED: "cyan",
    RunStatus.RUNNING: "blue",
    RunStatus.WAITING_FOR_APPROVAL: "magenta",
    RunStatus.WAITING_FOR_INPUT: "magenta",
    RunStatus.WAITING_FOR_CHILDREN: "magenta",
    RunStatus.COMPLETED: "green",
    RunStatus.FAILED: "red",
    RunStatus.CANCELLED: "yellow",
}
REASON_STYLE = {
    TerminationReason.COMPLETED: "green",
    TerminationReason.RETRIES_EXHAUSTED: "bold red",
    TerminationReason.NOT_RETRYABLE: "bold red",
    TerminationReason.CANCELLED: "yellow",
}
Cell = str | Text


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def error(message: str) -> None:
    err.print(Text("tenure: ", style="bold red") + Text(message))


def status_text(status: RunStatus | str) -> Text:
    return Text(str(status), style=STATUS_STYLE.get(RunStatus(status), ""))


def reason_text(reason: TerminationReason | str | None) -> Text:
    if not reason:
        return Text("")
    return Text(str(reason), style=REASON_STYLE.get(TerminationReason(reason), "yellow"))


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


def clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def table(headers: Sequence[str], rows: Iterable[Sequence[Cell]], console: Console = out) -> None:
    """Columns padded to their widest cell, two spaces apart; no wrapping, no borders."""
    cells = [[Text(c) if isinstance(c, str) else c for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, c.cell_len) for w, c in zip(widths, row, strict=True)]
    console.print(_line([Text(h, style="bold") for h in headers], widths))
    for row in cells:
        console.print(_line(row, widths))


def table_with_notes(
    headers: Sequence[str],
    rows: Iterable[tuple[Sequence[Cell], Sequence[str]]],
    console: Console = out,
) -> None:
    """A table whose rows each carry lines of text printed under them, indented (text too
    long for a column)."""
    listed = [([Text(c) if isinstance(c, str) else c for c in row], notes) for row, notes in rows]
    widths = [len(h) for h in headers]
    for row, _ in listed:
        widths = [max(w, c.cell_len) for w, c in zip(widths, row, strict=True)]
    console.print(_line([Text(h, style="bold") for h in headers], widths))
    for row, notes in listed:
        console.print(_line(row, widths))
        for note in notes:
            console.print(Text("  " + note))


def _line(cells: Sequence[Text], widths: Sequence[int]) -> Text:
    line = Text()
    for i, (cell, width) in enumerate(zip(cells, widths, strict=True)):
        if i:
            line.append("  ")
        line.append_text(cell)
        if i < len(cells) - 1:
            line.append(" " * (width - cell.cell_len))
    line.rstrip()
    return line


def runs_table(runs: Sequence[Run], full_keys: set[str] | frozenset[str] = frozenset()) -> None:
    """The runs, one a line; a queued run whose concurrency key is in `full_keys` (at its
    limit) says in the last column that it waits for its key."""
    table(
        ["id", "queue", "status", "reason", "attempt", "requeues", "fence", "updated", "error"],
        (
            [
                r.id,
                r.queue,
                status_text(r.status),
                reason_text(r.termination_reason),
                str(r.attempt),
                str(r.requeue_count),
                str(r.pending_effect or ""),
                when(r.updated_at),
                clip(f"DAMAGED {r.damaged}" if r.damaged else _why(r, full_keys), 60),
            ]
            for r in runs
        ),
    )


def _why(run: Run, full_keys: set[str] | frozenset[str]) -> str:
    if run.status is RunStatus.QUEUED and run.concurrency_key in full_keys:
        return f"waits for key {run.concurrency_key} (at its limit)"
    return run.error


def _limit(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def models_table(models: Sequence[ModelState]) -> None:
    table(
        ["name", "requests/min", "tokens/min", "concurrency", "in use", "circuit open until"],
        (
            [
                m.name,
                _limit(m.limits.requests_per_minute),
                _limit(m.limits.tokens_per_minute),
                _limit(m.limits.concurrency),
                str(m.in_use),
                Text(when(m.circuit_open_until), style="bold red") if m.circuit_open_until else "",
            ]
            for m in models
        ),
    )


def run_json(run: Run, call: AgentCall | None) -> dict[str, Any]:
    """A run as `status --json` shows it: its row, and for an agent function's run the
    function's name and input."""
    fields = run.to_json()
    fields["agent"] = call.agent if call else None
    fields["input"] = call.input if call else None
    return fields


def run_details(run: Run, call: AgentCall | None = None, budget: Budget | None = None) -> None:
    fields = run.to_json()
    fields.pop("request", None)
    if budget is not None:  # the run tree's, from its ledger (SPEC §21)
        fields["budget"] = budget.summary()
    if call is not None:  # what the run was asked, first after its id
        fields = {
            "id": fields.pop("id"),
            "agent": call.agent,
            "input": _compact(call.input),
            **fields,
        }
    width = max(len(k) for k in fields)
    for key, value in fields.items():
        line = Text(key.ljust(width) + "  ", style="bold")
        if key == "status":
            line.append_text(status_text(run.status))
        elif key == "termination_reason":
            line.append_text(reason_text(run.termination_reason))
        elif key == "forked_from" and run.forked_from is not None:
            line.append(f"{run.forked_from.run_id} at {run.forked_from.sequence}")
        else:
            line.append("" if value is None else str(value))
        out.print(line)


def tree_json(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """A run's tree (SPEC §21) as `show --tree --json` prints it: each run's id, parent,
    status, reason and error, parents before children."""
    return [
        {
            "id": r.id,
            "parent_id": r.parent_id,
            "status": str(r.status),
            "termination_reason": str(r.termination_reason or ""),
            "error": r.error,
        }
        for r in runs
    ]


def run_tree(runs: Sequence[Run]) -> None:
    """A run and its descendants (parents before children) as a tree, with statuses."""
    from rich.tree import Tree

    def label(run: Run) -> Text:
        text = Text(run.id + "  ")
        text.append_text(status_text(run.status))
        if run.termination_reason and str(run.termination_reason) != str(run.status):
            text.append(" (")
            text.append_text(reason_text(run.termination_reason))
            text.append(")")
        if run.error:
            text.append("  " + clip(run.error, 60))
        return text

    if not runs:
        return
    root = Tree(label(runs[0]))
    nodes = {runs[0].id: root}
    for run in runs[1:]:
        parent = nodes.get(str(run.parent_id))
        if parent is not None:
            nodes[run.id] = parent.add(label(run))
    out.print(root)


# A step's result or error in the steps table, clipped; `status --json` has it whole.
STEP_RESULT_WIDTH = 80


def steps_table(steps: Sequence[AgentStep]) -> None:
    """An agent function's steps by position; a write's effect is shown with it."""
    table(
        ["position", "step", "name", "effect", "attempt", "duration", "result"],
        (
            [
                str(s.position),
                s.step,
                s.name,
                Text(s.effect or "", style=EFFECT_STYLE.get(s.effect or "", "")),
                str(s.attempt),
                "" if s.duration_ms is None else f"{s.duration_ms:g} ms",
                Text(s.summary(STEP_RESULT_WIDTH), style="red" if s.error is not None else ""),
            ]
            for s in steps
        ),
    )


EFFECT_STYLE = {"non_idempotent_write": "bold magenta", "idempotent_write": "magenta"}


def agents_table(agents: Sequence[dict[str, Any]]) -> None:
    """Each agent function with its parameters under it: name, type, required or default,
    description."""
    rows: list[tuple[Sequence[Cell], Sequence[str]]] = []
    for agent in agents:
        found = parameters(agent.get("input_schema"))
        rows.append(
            (
                [
                    str(agent.get("name")),
                    plural(len(found), "parameter"),
                    str(agent.get("description")),
                ],
                [_parameter(p) for p in found],
            )
        )
    table_with_notes(["name", "input", "description"], rows)


def _parameter(p: Parameter) -> str:
    if p.required:
        need = "required"
    elif p.has_default:
        need = f"default {_compact(p.default)}"
    else:
        need = "optional"
    about = f" — {p.description}" if p.description else ""
    return f"{p.name}: {p.type}, {need}{about}"


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")
    sys.stdout.flush()


def print_json_line(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n")
    sys.stdout.flush()


# -- events ------------------------------------------------------------------------------


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _at(p: dict[str, Any], named: bool = True) -> str:
    """An agent function's step: its position, kind and name, before what it did."""
    position = p.get("position")
    if isinstance(position, bool) or not isinstance(position, int):
        return ""
    name = f" {p.get('name')!r}" if named else ""
    return f"step {position} {p.get('step')}{name}: "


def _step(p: dict[str, Any]) -> str:
    tail = f"error: {p['error']}" if p.get("error") is not None else _compact(p.get("result"))
    effect = p.get("effect")
    return f"{_at(p)}{tail}" + (f"  [{effect}]" if effect and effect != "read_only" else "")


def _sleeping(p: dict[str, Any]) -> str:
    parked = ", parked in the queue" if p.get("parked") else ""
    return f"{_at(p)}until {p.get('until')}{parked}"


def _request(p: dict[str, Any]) -> str:
    call = agent_call(p)
    if call is not None:
        return f"agent {call.agent}, input {_compact(call.input)}, model {p.get('model')}"
    tools = ", ".join(p.get("tools") or []) or "none"
    return f"prompt {p.get('prompt')!r}, model {p.get('model')}, tools {tools}"


def _llm(p: dict[str, Any]) -> str:
    message = p.get("message") or {}
    calls = message.get("tool_calls") or []
    if calls:
        named = [f"{c['function']['name']}({c['function']['arguments']})" for c in calls]
        return _at(p) + "calls " + ", ".join(named)
    return f"{_at(p)}says {message.get('content')!r}"


def _tool(p: dict[str, Any]) -> str:
    head = f"{_at(p, named=False)}{p.get('name')}({_compact(p.get('args', {}))})"
    tail = f"error: {p['error']}" if p.get("error") else _compact(p.get("result"))
    return f"{head} -> {tail}  [{p.get('effect')}, key {p.get('idempotency_key')}]"


def _requeued(p: dict[str, Any]) -> str:
    cause = p.get("cause")
    doubt = "; still in doubt, for its write's probe" if p.get("in_doubt") else ""
    if cause == "failure":
        return f"after a failure: {p.get('error')}; retry in {p.get('delay')}s"
    if cause == "stale":
        return f"stale: its worker stopped renewing lease token {p.get('lease_token')}"
    if cause == "step_deadline":
        token = p.get("lease_token")
        return f"step deadline: {p.get('why')}; its worker gave it up (lease token {token})"
    if cause == "in_doubt" and p.get("step_deadline"):
        return f"in doubt: {p.get('why')}"
    if cause == "drain":
        return f"handed back by {p.get('worker')} on drain"
    if cause == "unstarted":
        return f"handed back unstarted by {p.get('worker')}: {p.get('why')}{doubt}"
    if cause == "unserved":
        missing = ", ".join(map(str, p.get("missing") or []))
        return f"handed back: {p.get('why')} {missing}{doubt}"
    return _compact(p)


def _dead_lettered(p: dict[str, Any]) -> str:
    detail = "; ".join(str(p[k]) for k in ("why", "error") if p.get(k))
    return f"{p.get('reason')} ({p.get('cause')}): {detail}"


_SUMMARIES: dict[EventKind, Callable[[dict[str, Any]], str]] = {
    EventKind.REQUEST: _request,
    EventKind.CLAIMED: lambda p: f"by {p.get('worker')} (lease token {p.get('lease_token')})",
    EventKind.LLM: _llm,
    EventKind.TOOL: _tool,
    EventKind.STEP: _step,
    EventKind.SLEEPING: _sleeping,
    EventKind.ASSEMBLED: lambda p: f"answer {p.get('output')!r}",
    EventKind.REQUEUED: _requeued,
    EventKind.DEAD_LETTERED: _dead_lettered,
    EventKind.REDRIVEN: lambda p: "by an operator" + (" with --force" if p.get("force") else ""),
}


def summarize(event: Event) -> str:
    if event.damaged is not None:
        return f"DAMAGED {event.damaged}"
    p = event.payload
    summary = _SUMMARIES.get(event.kind)
    if summary is not None:
        return summary(p)
    return _compact(p) if p else ""


EVENT_STYLE = {
    EventKind.REQUEUED: "yellow",
    EventKind.DEAD_LETTERED: "bold red",
    EventKind.CANCELLED: "yellow",
    EventKind.ASSEMBLED: "green",
    EventKind.REDRIVEN: "cyan",
    EventKind.THROTTLED: "yellow",
}


def event_line(event: Event) -> Text:
    line = Text(f"{event.sequence:>4}  ")
    line.append(f"a{event.attempt}  ", style="dim")
    line.append(event.created_at.strftime("%H:%M:%S.%f")[:-3] + "  ", style="dim")
    line.append(f"{event.kind!s:<13}", style=EVENT_STYLE.get(event.kind, "bold"))
    line.append("  " + clip(summarize(event), 200))
    line.rstrip()
    return line


def fork_plan_lines(plan: ForkPlan, allow_repeat_writes: bool) -> list[str]:
    """A fork's plan as people read it (SPEC §23): kept, run again, writes that repeat."""

    def step(e: dict[str, Any]) -> str:
        return f"{e['sequence']} {e['kind']}" + (f" {e['name']}" if e["name"] != e["kind"] else "")

    lines = [f"fork of run {plan.run_id} ({plan.status}) at {plan.at}"]
    lines.append(f"kept ({len(plan.kept)} events): " + ", ".join(step(e) for e in plan.kept))
    again = ", ".join(step(e) for e in plan.again) or "nothing recorded: the run goes on"
    lines.append(f"runs again ({len(plan.again)} steps): {again}")
    for w in plan.repeated_writes:
        where = "interrupted, in doubt" if w.get("in_doubt") else f"sequence {w['sequence']}"
        lines.append(f"would repeat: {w['name']} ({where}, key {w['idempotency_key']})")
    if plan.in_doubt is not None:
        lines.append(
            f"in doubt: {plan.in_doubt['name']} (key {plan.in_doubt['idempotency_key']}): "
            "its probe is asked first"
        )
    refusal = plan.refusal(allow_repeat_writes)
    lines.append(f"refused: {refusal}" if refusal else "can be forked")
    return lines
