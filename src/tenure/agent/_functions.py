"""Agent functions (SPEC §20): the user's own code, made durable by a journal of its steps.

A segment of an agent function's run calls the function from the top. Every `ctx.*` call is
a step at the next position (0, 1, 2 …): the first time it executes and its result (or its
error) is recorded as an event; on every later segment it is returned from the journal
without executing. A recorded step must be the step the code asks for at that position
(kind, name and a digest of its arguments): anything else stops the run as
`nondeterministic`, never a silently different result.

Steps are carried out by the segment's own machinery — the fenced tool call, the model call
with its capacity and stream, the hold for a person, the park — so that the built-in loop
and agent functions share every guarded write.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import json
import random as _random
import time
import typing
import uuid as _uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

import orjson

from tenure import _json, _loop, _requests
from tenure._budget import BudgetSpent
from tenure._classify import describe
from tenure._errors import (
    ChildFailed,
    DatabaseUnavailable,
    InvalidRequest,
    LeaseLost,
    ProviderError,
    RunCancelled,
    ToolFailed,
)
from tenure._indoubt import resolve_call
from tenure._types import (
    EventKind,
    FailureClass,
    Probe,
    RunRequest,
    RunResult,
    RunStatus,
    TerminationReason,
    ToolContext,
    ToolEffect,
    Usage,
)
from tenure.agent import _human
from tenure.agent._journal import tool_message
from tenure.agent._tools import InvalidArguments, Tool, _check_name, _field, parse_docstring
from tenure.providers._base import ModelCall, ModelReply, ToolCall, ToolSpec
from tenure.store._base import NO_USAGE, ChildState, NewEvent, NewRun, ReplayJournal, Settlement

if TYPE_CHECKING:
    from pydantic import BaseModel

    from tenure._endings import Ending
    from tenure._ladder import Segment

DEFAULT_STEP_TIMEOUT = 60.0


# -- registration --------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentFunction:
    """A registered agent function: its name, the function, and its input's model."""

    name: str
    fn: Callable[..., Any]
    arguments: type[BaseModel]
    description: str

    @functools.cached_property
    def input_schema(self) -> dict[str, Any]:
        return self.arguments.model_json_schema()

    def bind(self, values: dict[str, Any]) -> dict[str, Any]:
        """The function's keyword arguments from a run's input; InvalidRequest if the input
        does not match its signature (the first problem named, one line)."""
        from pydantic import ValidationError

        if not isinstance(values, dict):
            raise InvalidRequest(f"agent {self.name}: input must be a JSON object")
        try:
            parsed = self.arguments.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
            )
            raise InvalidRequest(f"agent {self.name}: invalid input: {problems}") from None
        return {
            info.alias or name: getattr(parsed, name)
            for name, info in type(parsed).model_fields.items()
        }


def make_agent(fn: Callable[..., Any], name: str | None = None) -> AgentFunction:
    """An agent function from `fn(ctx, ...)`: its parameters after the context, with their
    type hints and the docstring's descriptions, are its input schema."""
    from pydantic import ConfigDict, PydanticSchemaGenerationError, PydanticUserError, create_model

    if not callable(fn):
        raise InvalidRequest(f"an agent function must be callable, got {fn!r}")
    agent_name = name or getattr(fn, "__name__", "")
    if agent_name == "<lambda>":
        raise InvalidRequest("an agent function that is a lambda needs name=")
    agent_name = _check_name(agent_name, "agent")
    if inspect.iscoroutinefunction(fn):
        raise InvalidRequest(
            f"agent {agent_name}: an agent function is a plain function (its steps may be "
            "async tools)"
        )
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise InvalidRequest(f"agent {agent_name}: cannot read its type hints: {exc}") from None
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise InvalidRequest(
            f"agent {agent_name}: its first parameter receives the tenure.AgentContext"
        )
    description, documented = parse_docstring(inspect.getdoc(fn) or "")
    fields: dict[str, Any] = {}
    for param in params[1:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise InvalidRequest(f"agent {agent_name}: *args and **kwargs cannot be described")
        if param.kind is param.POSITIONAL_ONLY:
            raise InvalidRequest(f"agent {agent_name}: its input is passed by name")
        fields[param.name] = _field(param, hints, documented.get(param.name))
    try:
        arguments = create_model(
            f"{agent_name}_input", __config__=ConfigDict(extra="forbid"), **fields
        )
        arguments.model_json_schema()
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError, NameError) as exc:
        raise InvalidRequest(
            f"agent {agent_name}: its parameters cannot be described: {exc}"
        ) from None
    return AgentFunction(agent_name, fn, arguments, description or agent_name)


# -- the journal of steps ------------------------------------------------------------------


class Recorded(typing.NamedTuple):
    """A step as the journal has it (a tuple: a replay builds one per recorded step)."""

    position: int
    step: str  # model, tool, step, now, uuid, random, patched, approve, input, sleep
    name: str
    digest: str
    payload: dict[str, Any]

    def describe(self) -> str:
        return f"{self.step} {self.name!r}"


@dataclass
class StepLog:
    """An agent function's recorded steps by position, and the decisions of people.

    `raw` holds each position's first event as the journal has it, (kind, payload): a
    replay reads most steps straight from there (`AgentContext.tool`), so a `Recorded` is
    built only for a step looked at otherwise."""

    raw: dict[int, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    approvals: dict[int, dict[str, Any]] = field(default_factory=dict)
    inputs: dict[int, dict[str, Any]] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    # The steps read in their replay form (`Store.replay_journal`), flat: position,
    # "step:digest:name", result, error for each; `at` maps a position to the index of its
    # "step:digest:name". A position is in `raw` or in `at`, never both.
    flat: list[Any] = field(default_factory=list)
    at: dict[int, int] = field(default_factory=dict)

    @classmethod
    def rebuild(cls, events: Iterable[tuple[str, dict[str, Any]]]) -> StepLog:
        """From a run's (kind, payload) pairs in order. A damaged event stops the replay:
        a step whose record cannot be read must never run again as if it had not run."""
        log = cls()
        raw = log.raw
        for event in events:
            p = event[1]
            if "_damaged" in p:
                raise AgentFailed(
                    FailureClass.CONFIGURATION,
                    f"the run's journal holds a damaged {event[0]} event: {p['_damaged']}",
                )
            kind = event[0]
            if kind in _NOTED:
                if kind == "llm":
                    log.usage += Usage(**p.get("usage", {}))
                elif kind == "approval" and "turn" in p:
                    log.approvals[p["turn"]] = p
                elif kind == "input" and "turn" in p:
                    log.inputs[p["turn"]] = p
            position = p.get("position")
            if position is not None and position not in raw:
                raw[position] = event
        return log

    @classmethod
    def from_replay(cls, journal: ReplayJournal) -> StepLog | None:
        """From a journal read in replay form; None when its steps do not give each position
        exactly one event (a position recorded twice, or a form that is not one): the
        caller then rebuilds from the whole journal, where the first event of a position
        is the one replayed."""
        log = cls.rebuild(journal.others)
        flat = journal.steps
        if flat:
            positions = flat[0::4]
            at = dict(zip(positions, range(1, len(flat), 4), strict=True))
            if (
                len(at) != len(positions)
                or set(map(type, positions)) != {int}
                or set(map(type, flat[1::4])) != {str}
                or not set(map(type, flat[3::4])) <= {str, type(None)}
                or not at.keys().isdisjoint(log.raw)
            ):
                return None
            log.flat, log.at = flat, at
        return log

    def recorded(self, position: int) -> Recorded | None:
        """The step recorded at `position`, if any."""
        found = self.raw.get(position)
        if found is not None:
            return _recorded(*found)
        i = self.at.get(position)
        return None if i is None else _from_form(position, self.flat, i)

    @property
    def steps(self) -> dict[int, Recorded]:
        """Every recorded step by position."""
        found = {position: _recorded(*found) for position, found in self.raw.items()}
        for position, i in self.at.items():
            found[position] = _from_form(position, self.flat, i)
        return found

    @property
    def last(self) -> int:
        return max(max(self.raw, default=-1), max(self.at, default=-1))

    def first_from(self, position: int) -> int | None:
        """The first recorded position at or after `position`."""
        if self.last < position:
            return None
        return min(p for p in (*self.raw, *self.at) if p >= position)


def _recorded(kind: str, p: dict[str, Any]) -> Recorded:
    step = p.get("step", "sleep" if kind == "sleeping" else "")
    name, d = p.get("name"), p.get("digest")
    return Recorded(
        p["position"],
        step if type(step) is str else str(step),
        name if type(name) is str else str(name),
        d if type(d) is str else str(d),
        p,
    )


def _from_form(position: int, flat: list[Any], i: int) -> Recorded:
    """A step read in its replay form, as `_recorded` gives a step read from its payload."""
    step, _, rest = str(flat[i]).partition(":")
    d, _, name = rest.partition(":")
    payload = {
        "position": position,
        "step": step,
        "name": name,
        "digest": d,
        "result": flat[i + 1],
        "error": flat[i + 2],
    }
    return Recorded(position, step, name, d, payload)


# The kinds of event a step log notes besides their steps.
_NOTED = frozenset({"llm", "approval", "input"})


def _hash(text: bytes) -> str:
    if len(text) <= _MEMO_TEXT:
        return _short_hash(text)
    return hashlib.blake2b(text, digest_size=8).hexdigest()


# The arguments of most steps are short and repeat (a tool's, the clock's, a replay's): their
# digests are kept, looked up by their JSON text.
_MEMO_TEXT = 256


@functools.lru_cache(maxsize=4096)
def _short_hash(text: bytes) -> str:
    return hashlib.blake2b(text, digest_size=8).hexdigest()


_NO_ARGUMENTS = _hash(b"null")


def digest(value: Any) -> str:
    """A short digest of a step's arguments as JSON (keys sorted), the same in every process."""
    if value is None:
        return _NO_ARGUMENTS
    try:
        text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # what orjson does not write (a big integer, a custom object)
        text = json.dumps(
            _json.json_safe(value), sort_keys=True, default=str, separators=(",", ":")
        ).encode()
    return _short_hash(text) if len(text) <= _MEMO_TEXT else _hash(text)


# `digest({})`: the arguments of a tool called without any, compared at every replayed step.
_NO_TOOL_ARGUMENTS = _hash(b"{}")


class TranscriptDigest:
    """The digest of a model step's arguments — exactly `digest({"messages": ..., "tools":
    ..., "options": ...})`, so journals recorded before it replay unchanged — hashed
    incrementally: a conversation grows by appending, and hashing its whole transcript at
    every turn made a run's digests quadratic in its length. The transcript is still written
    out whole at every turn (in C), and only what follows the text hashed last time is
    hashed: a message changed in place changes the text, and the hash starts over."""

    _OPEN = b'{"messages":'

    def __init__(self) -> None:
        self._hashed = b""  # the transcript's text hashed so far, without its closing "]"
        self._hasher: Any = None

    def __call__(self, messages: list[Any], tools: list[Any], options: dict[str, Any]) -> str:
        try:
            text = orjson.dumps(messages, option=orjson.OPT_SORT_KEYS)
            rest = orjson.dumps({"options": options, "tools": tools}, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # what orjson does not write: digest's own way
            return digest({"messages": messages, "tools": tools, "options": options})
        # Keys sorted: {"messages":[…],"options":…,"tools":…}, written in three parts.
        head = text[:-1]
        if self._hasher is not None and head.startswith(self._hashed):
            self._hasher.update(memoryview(head)[len(self._hashed) :])
        else:
            self._hasher = hashlib.blake2b(self._OPEN, digest_size=8)
            self._hasher.update(head)
        self._hashed = head
        final = self._hasher.copy()
        final.update(b"],")
        final.update(memoryview(rest)[1:])
        return str(final.hexdigest())


class AgentFailed(ProviderError):
    """An agent function's run cannot go on: its text names the agent or the step."""

    says_itself = True


class Nondeterministic(AgentFailed):
    """The code asked, at a recorded position, for another step than the journal holds."""

    def __init__(self, position: int, recorded: str, asked: str) -> None:
        super().__init__(
            FailureClass.CONFIGURATION,
            f"nondeterministic at step {position}: the journal has {recorded}, "
            f"the code asked {asked}",
        )


class _Yield(BaseException):
    """The segment ends inside the function (a long sleep, a hold for a person, a budget
    spent): carries the segment's result up through the user's code. A BaseException, so
    that the function's own `except Exception` does not swallow it."""

    def __init__(self, result: RunResult | Ending) -> None:
        super().__init__("the segment ended")
        self.result = result


# -- the context ---------------------------------------------------------------------------


class AgentContext:
    """What an agent function receives: every method is a durable step (SPEC §20)."""

    def __init__(
        self, segment: Segment, request: RunRequest, log: StepLog, agent: AgentFunction
    ) -> None:
        self._segment = segment
        self._request = request
        self._log = log
        self._raw = log.raw  # the recorded steps, read at every replayed tool step
        self._flat, self._at = log.flat, log.at  # the same, in their replay form
        # Per tool name looked up in this segment: the "step:digest:name" of its call
        # without arguments, as the replay form has it.
        self._tool_keys: dict[str, str] = {}
        self._agent = agent
        self._position = 0
        self._model_turns = 0
        self._fence_call: dict[str, Any] | None = (
            json.loads(segment.fence_call) if segment.fence_call else None
        )
        # What ends the segment whatever the function does with it, raised again at every
        # later step and when the function returns: a write whose fence it left standing
        # (it did not answer in time, or its event was not stored: it may have happened,
        # so failure recovery takes the in-doubt way), or a step out of step with the
        # journal (the run stops as nondeterministic).
        self._doubt: Exception | None = None
        self._root: str | None = None  # the root of this run's tree, read once if needed
        # Per tool name: the tool and whether a person approves its calls (fixed for the
        # segment: its engine's registry and settings), looked up once, not at every step.
        self._tools: dict[str, tuple[Tool, bool]] = {}
        self._check_held = segment.steps.check_held
        self._steps = segment.steps
        self._model_digest = TranscriptDigest()

    # -- plain values ----------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self._segment.run_id

    @property
    def attempt(self) -> int:
        return self._segment.lease.attempt

    @property
    def cancelled(self) -> bool:
        """Whether the run was cancelled (or is no longer this segment's)."""
        segment = self._segment
        if segment.abort_signal.is_set():
            return True
        return segment.store.run_status(segment.run_id) is RunStatus.CANCELLED

    def raise_if_cancelled(self) -> None:
        self._record_held()
        if self.cancelled:
            raise RunCancelled(self.run_id)

    # -- the journal -----------------------------------------------------------------------

    def _lacking(self, missing: list[str]) -> NoReturn:
        """This process lacks what the step needs. Before this segment recorded anything
        the run goes back untouched, for a worker that has it; after, the segment has
        started and cannot be given back unstarted: the run fails `configuration` (every
        worker that serves an agent must register the models and tools it uses)."""
        self._record_held()  # then the run has started: it is not given back
        segment = self._segment
        if not segment.wrote_anything:
            raise _Yield(segment.hand_back_unserved(missing))
        raise AgentFailed(
            FailureClass.CONFIGURATION,
            f"agent {self._agent.name}: this worker lacks {', '.join(missing)}",
        )

    def _check_doubt(self) -> None:
        if self._doubt is not None:
            raise self._doubt

    def _record_held(self) -> None:
        """The model answer this segment holds, recorded before the next step: a step that
        runs (or a person asked, or a segment ended by the function) follows a durable
        answer, exactly as in the built-in loop. Only the function's return carries it with
        the run's end (`Segment.end`). If it cannot be recorded, the segment cannot go on:
        the error is raised again at every later step and at the function's return."""
        if self._steps.held:
            try:
                self._steps.record_held()
            except Exception as exc:
                self._doubt = exc
                raise

    def _next(self, step: str, name: str, args_digest: str) -> tuple[int, Recorded | None]:
        """The next position, and its recorded step if the journal has one (checked)."""
        if self._doubt is not None:
            raise self._doubt
        position = self._position
        found = self._log.recorded(position)
        if found is not None and (found.step, found.name, found.digest) == (
            step,
            name,
            args_digest,
        ):
            # Replayed: nothing outside happens, so the lease is not looked at here; the
            # first step that runs (or is out of step) looks at it.
            self._position = position + 1
            return position, found
        self._record_held()
        self._check_held()
        self._position = position + 1
        try:
            fenced = self._fence_call
            if found is None and fenced is not None and fenced.get("position") == position:
                # The write this run came back in doubt for must be the step asked here: any
                # other would run while its fence stands, and the write would never be settled.
                interrupted = (fenced.get("step"), fenced.get("name"))
                if interrupted != (step, name) or digest(fenced.get("args")) != args_digest:
                    what = f"an interrupted write, {interrupted[0]} {interrupted[1]!r}"
                    _mismatch(position, what, interrupted == (step, name), step, name)
            if found is not None and (found.step, found.name, found.digest) != (
                step,
                name,
                args_digest,
            ):
                same = (found.step, found.name) == (step, name)
                _mismatch(position, found.describe(), same, step, name)
        except Nondeterministic as exc:
            self._doubt = exc
            raise
        return position, found

    def _as_recorded(self, step: str, name: str, args_digest: str) -> dict[str, Any] | None:
        """The payload recorded at the next position if it is exactly this step (which then
        takes the position), else None: `_next` then says how it differs, or runs it."""
        i = self._at.get(self._position)
        if i is not None:
            flat = self._flat
            if self._doubt is None and flat[i] == f"{step}:{args_digest}:{name}":
                self._position += 1
                return {"result": flat[i + 1], "error": flat[i + 2]}
            return None
        found = self._raw.get(self._position)
        if found is None or self._doubt is not None:
            return None
        p = found[1]
        if p.get("step") == step and p.get("name") == name and p.get("digest") == args_digest:
            self._position += 1
            return p
        return None

    def _record(self, events: list[NewEvent], usage: Usage = NO_USAGE) -> None:
        self._segment.steps.record(events, usage)

    def _value_step(self, kind: str, name: str, args: Any, make: Callable[[], Any]) -> Any:
        d = digest(args)
        position, found = self._next(kind, name, d)
        if found is not None:
            return found.payload.get("result")
        value = _json.json_safe(make())
        payload = {"position": position, "step": kind, "name": name, "digest": d, "result": value}
        self._record([NewEvent(EventKind.STEP, payload)])
        return value

    def now(self) -> datetime:
        """The time, recorded once: the same on replay."""
        text = self._value_step("now", "now", None, lambda: datetime.now(UTC).isoformat())
        return datetime.fromisoformat(text)

    def uuid(self) -> str:
        """A random UUID (version 4), recorded once."""
        return str(self._value_step("uuid", "uuid", None, lambda: str(_uuid.uuid4())))

    def random(self) -> float:
        """A random number in [0, 1), recorded once."""
        return float(self._value_step("random", "random", None, _random.random))

    def patched(self, change_id: str) -> bool:
        """True for a run that reaches this point first under code with the change; False
        while replaying a journal recorded before it (the old code's steps follow here)."""
        if not isinstance(change_id, str) or not change_id:
            raise InvalidRequest("patched: change_id must be a non-empty string")
        position = self._position
        found = self._log.recorded(position)
        if found is not None and (found.step, found.name) != ("patched", change_id):
            return False  # recorded by code without the change: no position taken
        return bool(self._value_step("patched", change_id, None, lambda: True))

    # -- model and tools -------------------------------------------------------------------

    def model(
        self,
        messages: Sequence[dict[str, Any]] | str,
        *,
        model: str | None = None,
        tools: Sequence[str | ToolSpec] | None = None,
        **options: Any,
    ) -> ModelReply:
        """One model call (capacity, streaming and budgets apply); a string is one user
        message. `tools` names registered tools, or gives a `ToolSpec` the model is shown
        as is (a framework's own tool, run by the framework as a step of its own)."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        name = model or self._request.model
        given = list(tools or ())
        tool_names = [t for t in given if isinstance(t, str)]
        shown = [dataclasses.asdict(t) if isinstance(t, ToolSpec) else t for t in given]
        listed = list(messages)
        d = self._model_digest(listed, shown, options)
        position, found = self._next("model", name, d)
        turn = self._model_turns
        self._model_turns += 1
        if found is not None:
            return _reply(found.payload)
        segment, engine = self._segment, self._segment.engine
        if over_budget(self._request, self._log.usage):
            raise _Yield(segment.finish(TerminationReason.BUDGET_EXHAUSTED))
        provider = engine.models.get(name)
        if provider is None:
            self._lacking([f"model {name!r}"])
        missing = [t for t in tool_names if engine.tools.get(t) is None]
        if missing:
            self._lacking([f"tool {t!r}" for t in missing])
        request = (
            self._request
            if name == self._request.model
            else dataclasses.replace(self._request, model=name)
        )
        specs = iter(engine.tools.specs(tool_names))
        call = ModelCall(
            messages=listed,
            tools=[t if isinstance(t, ToolSpec) else next(specs) for t in given],
            run_id=segment.run_id,
            attempt=segment.lease.attempt,
            request=request,
            abort=segment.abort_signal,
            timeout=engine.model_timeout(name),
            through=segment.through,
            turn=turn,
            options=options,
        )
        try:
            reply = segment.ask(provider, call)
        except BudgetSpent:  # the tree's budget, spent by other runs of it too
            raise _Yield(segment.finish(TerminationReason.BUDGET_EXHAUSTED)) from None
        payload = {
            **llm_payload(reply),
            "position": position,
            "step": "model",
            "name": name,
            "digest": d,
        }
        # Held, not recorded yet: recorded before whatever the function does next, or carried
        # with the run's end if it returns (one transaction fewer, as the built-in loop's
        # last answer). A crash before then loses it as the loop's is lost: the next attempt
        # asks the model again.
        self._steps.hold(NewEvent(EventKind.LLM, payload), reply.usage)
        self._log.usage += reply.usage
        return reply

    def tool(self, name: str, /, **args: Any) -> Any:
        """A registered tool with its effect, fence, probe, timeout, approval and the
        idempotency key `RUN_ID:POSITION`; a tool that raises raises `tenure.ToolFailed`."""
        position = self._position
        i = self._at.get(position)
        if i is not None and self._doubt is None:
            # A replay's step, read from its replay form: the position (the index), then the
            # kind, name and argument digest in one compare, and the result returned (or
            # the error raised again) as the long way does. Before the tool's first lookup
            # in this segment, or if anything differs, the long way goes on.
            key = self._tool_keys.get(name)
            if key is not None:
                flat = self._flat
                if flat[i] == (key if not args else f"tool:{digest(args)}:{name}"):
                    self._position = position + 1
                    error = flat[i + 2]
                    if error is not None:
                        raise ToolFailed(name, str(error))
                    return flat[i + 1]
        found = self._raw.get(position)
        if found is not None and self._doubt is None and name in self._tools:
            # A replay's step, read straight from its payload: what `_fenced` returns for it
            # (a recorded tool step asks no person again). Anything else — another step, or
            # other arguments — goes the long way, which says how it differs. The digest is
            # compared as at every step: it is the replay's check.
            p = found[1]
            if (
                p.get("step") == "tool"
                and p.get("name") == name
                and p.get("digest") == digest(args)
            ):
                self._position += 1
                return _recorded_result(name, p)
        self._check_doubt()
        known = self._tools.get(name)
        if known is None:
            engine = self._segment.engine
            tool = engine.tools.get(name)
            if tool is None:
                self._lacking([f"tool {name!r}"])
            known = self._tools[name] = (
                tool,
                _human.needs_approval(tool, engine.settings.approve_writes),
            )
            self._tool_keys[name] = f"tool:{_NO_TOOL_ARGUMENTS}:{name}"
        return self._fenced(known[0], "tool", args, known[1])

    def step(
        self,
        fn: Callable[..., Any],
        *args: Any,
        name: str | None = None,
        effect: ToolEffect | str = ToolEffect.READ_ONLY,
        timeout: float = DEFAULT_STEP_TIMEOUT,
        probe: Callable[..., Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Any function as a step: its JSON result recorded once, with the effect rules of
        a tool (a write is fenced; a non-idempotent one may have a probe, called as
        `probe(ctx, *args, **kwargs)`). A function whose first parameter is annotated
        `tenure.ToolContext` receives it (its `idempotency_key` is `RUN_ID:POSITION`)."""
        try:
            hash((fn, name, effect, timeout, probe))
        except TypeError:  # an argument that cannot be a key: built for this call alone
            tool = step_tool(fn, name, effect, timeout, probe)
        else:
            tool = _step_tool(fn, name, effect, timeout, probe)
        return self._fenced(tool, "step", {"args": list(args), "kwargs": kwargs}, False)

    def _fenced(self, tool: Tool, kind: str, args: dict[str, Any], needs_person: bool) -> Any:
        """A tool or step function at the next position: replayed when recorded; else
        (after a person's approval, if its tool needs one, and its probe, if its write is in
        doubt here) run by the segment's fenced call, and its event recorded."""
        d = digest(args)
        recorded = self._as_recorded(kind, tool.name, d)
        if recorded is not None:  # as in `tool`: a recorded tool step asks no person again
            return _recorded_result(tool.name, recorded)
        if needs_person:
            approved, who = self._decided(self._position, "approval", tool.name, args, tool)
            if not approved:
                return self._denied(tool, kind, args, d, who)
        position, found = self._next(kind, tool.name, d)
        if found is not None:
            return _replayed(found)
        return self._execute(tool, kind, position, d, args)

    def _execute(self, tool: Tool, kind: str, position: int, d: str, args: dict[str, Any]) -> Any:
        """A tool or step function not recorded yet, at `position`: its probe asked if its
        write is in doubt here, else run by the segment's fenced call."""
        segment = self._segment
        key = f"{segment.run_id}:{position}"
        started = time.monotonic()
        done, result = self._in_doubt(tool, kind, position, d, args, key)
        if done:
            return result
        error: str | None = None
        values = args
        if kind == "tool":
            try:
                values = tool.validate(args)
            except InvalidArguments as exc:
                error = str(exc)
        try:
            where = (position, d, key, started)
            result, error = self._run(tool, kind, where, args, values, error)
        except Exception as exc:
            if segment.fence is not None:
                self._doubt = exc
            raise
        if error is not None:
            raise ToolFailed(tool.name, error)
        return result

    def _run(
        self,
        tool: Tool,
        kind: str,
        where: tuple[int, str, str, float],
        args: dict[str, Any],
        values: dict[str, Any],
        error: str | None,
    ) -> tuple[Any, str | None]:
        """The step at `where` (position, digest, key, start) run by the segment's fenced
        call (unless its arguments were refused), and its event recorded (with its fence
        cleared, for a write)."""
        segment = self._segment
        position, d, key, started = where
        result: Any = None
        ran = error is None
        if ran:
            located = {"position": position, "step": kind}
            result, error = segment.steps.fenced_call(
                tool, args, key, located, lambda context: tool.call(context, values)
            )
        event = _written(kind, tool, position, d, args, result, error, key, started)
        if ran and tool.effect.is_write:  # its fence stands: cleared with its event
            segment.steps.record_written(tool.name, event)
        else:
            self._record([event])
        return result, error

    def _denied(self, tool: Tool, kind: str, args: dict[str, Any], d: str, who: str) -> Any:
        """A tool call a person denied: recorded as the step's error, never run."""
        position, found = self._next(kind, tool.name, d)
        if found is not None:
            return _replayed(found)
        error = f"denied by {who or 'a person'}"
        self._record([_written(kind, tool, position, d, args, None, error, "", 0.0)])
        raise ToolFailed(tool.name, error)

    def _in_doubt(
        self, tool: Tool, kind: str, position: int, d: str, args: dict[str, Any], key: str
    ) -> tuple[bool, Any]:
        """The write this run came back in doubt for, if it is this step's: its probe asked
        (SPEC §16). (True, result): it happened, its event now recorded; (False, None): run
        it (again, same key); an unknown verdict dead-letters the run and ends the segment."""
        fenced = self._fence_call
        if fenced is None or fenced.get("position") != position:
            return False, None
        self._fence_call = None

        def written(result: Any, began: float) -> NewEvent:
            # Recorded by this segment for a write an earlier one made: it says so, as the
            # built-in loop's does (the audit matches the write's token to it by this).
            event = _written(kind, tool, position, d, args, result, None, key, began)
            return NewEvent(event.kind, {**event.payload, "resolved_by": "probe"})

        settled = resolve_call(self._segment.steps, tool, fenced, written, located=True)
        if not isinstance(settled, Probe):  # dead-lettered: the probe could not tell
            raise _Yield(self._segment.result(settled))
        return settled.verdict == "done", settled.result

    def agent_loop(
        self,
        prompt: str,
        *,
        tools: Sequence[str] = (),
        model: str | None = None,
        max_iterations: int = 10,
        system: str | None = None,
    ) -> str:
        """The built-in model/tool loop, each of its calls a step of this run: the model is
        asked, its tool calls run (a failed one goes back to it as the call's result), until
        it answers without calls or `max_iterations` answers were given."""
        if not isinstance(max_iterations, int) or max_iterations < 1:
            raise InvalidRequest("agent_loop: max_iterations must be a positive integer")
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prompt})
        for _ in range(max_iterations):
            reply = self.model(messages, model=model, tools=tools)
            messages.append(_json.json_safe(reply.message()))
            if not reply.tool_calls:
                return reply.text or ""
            for call in reply.tool_calls:
                messages.append(self._loop_call(call, tools))
        raise ToolFailed("agent_loop", f"no answer within {max_iterations} iterations")

    def _loop_call(self, call: ToolCall, allowed: Sequence[str]) -> dict[str, Any]:
        if call.name not in allowed:
            return tool_message(call.id, None, f"tool {call.name!r} is not available to this run")
        try:
            result = self.tool(call.name, **call.args)
        except ToolFailed as exc:
            return tool_message(call.id, None, exc.error)
        return tool_message(call.id, result, None)

    # -- child runs (SPEC §21) -------------------------------------------------------------

    def child(
        self,
        request: RunRequest | None = None,
        /,
        *,
        agent: str | None = None,
        input: dict[str, Any] | None = None,
        **fields: Any,
    ) -> ChildHandle:
        """Create a child run (an agent function's, or a `RunRequest`): a step, whose child
        has the idempotency key `PARENT_ID:POSITION`, so that a crash between creating it
        and recording the step never creates two. With `agent=`, its model and queue are this
        run's unless given (a RunRequest is taken as it is). Returns its handle."""
        made = self._child_request(request, agent, input, fields)
        (handle,) = self._create([made])
        return handle

    def map(self, agent: str, inputs: Iterable[dict[str, Any]], **fields: Any) -> list[ChildHandle]:
        """One child run of `agent` per input, created in one transaction (each a step at
        its own position, recorded together)."""
        if not isinstance(agent, str) or not agent:
            raise InvalidRequest("map: agent must be the name of an agent function")
        made = [self._child_request(None, agent, values, fields) for values in inputs]
        return self._create(made) if made else []

    def _child_request(
        self,
        request: RunRequest | None,
        agent: str | None,
        values: dict[str, Any] | None,
        fields: dict[str, Any],
    ) -> RunRequest:
        if request is not None:
            if agent is not None or values is not None or fields:
                raise InvalidRequest("child: give a RunRequest, or agent= and input=, not both")
            if not isinstance(request, RunRequest):
                raise InvalidRequest(f"child: expected a RunRequest, got {request!r}")
            made = request
        else:
            if agent is None:
                raise InvalidRequest("child: name its agent= (or give a RunRequest)")
            defaults = {"model": self._request.model, "queue": self._request.queue}
            try:
                made = RunRequest(agent=agent, input=values or {}, **{**defaults, **fields})
            except TypeError as exc:
                raise InvalidRequest(f"child: {exc}") from None
        if made.idempotency_key is not None:
            raise InvalidRequest(
                "child: a child's idempotency key is PARENT_ID:POSITION; do not set one"
            )
        return self._in_budget(made)

    def _in_budget(self, made: RunRequest) -> RunRequest:
        """A child spends from its tree's budget, the root's (SPEC §21): it carries the
        parent's limits (which are the root's), so that its calls go through the tree's
        ledger with the same limits; a budget of its own is refused."""
        tree = (self._request.max_tokens, self._request.max_cost)
        own = (made.max_tokens, made.max_cost)
        if own not in ((None, None), tree):
            raise InvalidRequest(
                "child: a child spends from its tree's budget (the root's max_tokens and "
                "max_cost); do not set one of its own"
            )
        if own == tree:  # nothing to carry (a copy checks the whole request again)
            return made
        return dataclasses.replace(made, max_tokens=tree[0], max_cost=tree[1])

    def _create(self, requests: list[RunRequest]) -> list[ChildHandle]:
        """The children at the next positions: replayed when recorded; else checked,
        enqueued in one transaction under their keys (a key taken by an earlier try that
        crashed before its step was recorded gives back that child), and recorded."""
        segment = self._segment
        asked = []
        for req in requests:
            data = _requests.to_json(req)
            d = digest(data)
            position, found = self._next("child", req.agent or "run", d)
            asked.append((position, found, req, d))
        if all(found is not None for _, found, _, _ in asked):
            return [_handle(found.payload) for _, found, _, _ in asked if found is not None]
        validate = segment.engine.validate
        root = self._root_id()
        runs, steps = [], []
        for position, found, req, d in asked:
            if found is not None:
                continue
            checked = validate(req) if validate is not None else req
            keyed = dataclasses.replace(checked, idempotency_key=f"{self.run_id}:{position}")
            data = _requests.to_json(keyed)
            runs.append(
                NewRun(
                    run_id=_requests.new_run_id(),
                    queue=keyed.queue,
                    request=_requests.dumps_checked(data),
                    idempotency_key=keyed.idempotency_key,
                    events=(NewEvent(EventKind.REQUEST, data),),
                    parent_id=self.run_id,
                    root_id=root,
                )
            )
            steps.append((position, req, d))
        segment.steps.check_held()
        created = segment.store.enqueue_many(runs)
        events = []
        for (position, req, d), (child_id, _) in zip(steps, created, strict=True):
            payload = {
                "position": position,
                "step": "child",
                "name": req.agent or "run",
                "digest": d,
                "result": {"run_id": child_id, "agent": req.agent},
            }
            events.append(NewEvent(EventKind.STEP, payload))
        self._record(events)
        by_position = {e.payload["position"]: e.payload for e in events}
        return [
            _handle(found.payload if found is not None else by_position[position])
            for position, found, _, _ in asked
        ]

    def _root_id(self) -> str:
        if self._root is None:
            run = self._segment.store.get_run(self.run_id)
            self._root = (run.root_id if run is not None else None) or self.run_id
        return self._root

    def wait(self, handle: ChildHandle) -> Any:
        """The child's output (an agent function's JSON value; a built-in run's text), or
        `tenure.ChildFailed` if it failed or was cancelled. While it is not done the run
        waits without a lease or a slot (`waiting_for_children`), woken when it ends."""
        (result,) = self._await("wait", [handle], return_exceptions=False)
        return result

    def gather(self, *handles: ChildHandle, return_exceptions: bool = False) -> list[Any]:
        """Every child's output, in order, once all of them are done; the first failed one
        raises its `tenure.ChildFailed`, or with `return_exceptions=True` stands in the list
        in its place."""
        return self._await("gather", list(handles), return_exceptions=return_exceptions)

    def _await(self, name: str, handles: list[ChildHandle], return_exceptions: bool) -> list[Any]:
        for h in handles:
            if not isinstance(h, ChildHandle):
                raise InvalidRequest(f"{name}: expected a child's handle (ctx.child), got {h!r}")
        ids = [h.run_id for h in handles]
        d = digest({"children": ids, "return_exceptions": bool(return_exceptions)})
        position, found = self._next("wait", name, d)
        if found is not None:
            outcomes = list(found.payload.get("result") or [])
        else:
            outcomes = self._settled(name, handles, position, d)
        values = [_child_value(o) for o in outcomes]
        if not return_exceptions:
            for v in values:
                if isinstance(v, ChildFailed):
                    raise v
        return values

    def _settled(
        self, name: str, handles: list[ChildHandle], position: int, d: str
    ) -> list[dict[str, Any]]:
        """The children's ends, recorded as this step; while one is not done, the segment
        ends and the run waits for them (unless the last settled meanwhile)."""
        segment = self._segment
        ids = list(dict.fromkeys(h.run_id for h in handles))
        while True:
            states = {c.id: c for c in segment.store.children_of(self.run_id, ids)}
            unknown = [i for i in ids if i not in states]
            if unknown:
                raise InvalidRequest(f"{name}: run {unknown[0]} is not a child of this run")
            pending = [i for i in ids if not RunStatus(states[i].status).is_terminal]
            if not pending:
                break
            ended = segment.wait_for_children(self._request, pending)
            if ended is not None:
                raise _Yield(ended)
        outcomes = [_child_outcome(h, states[h.run_id]) for h in handles]
        payload = {"position": position, "step": "wait", "name": name, "digest": d}
        self._record([NewEvent(EventKind.STEP, {**payload, "result": outcomes})])
        return outcomes

    # -- waiting ---------------------------------------------------------------------------

    def sleep(self, seconds: float) -> None:
        """A durable timer: a sleep up to the lease is slept here (the lease kept); a longer
        one ends the segment and the run waits in the queue, uncharged, until it is due."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise InvalidRequest(f"sleep: seconds must be a number >= 0, got {seconds!r}")
        segment = self._segment
        d = digest(seconds)
        position, found = self._next("sleep", "sleep", d)
        if found is not None:
            if self._log.last > position:
                return  # the journal goes on past it: the sleep is over
            until = datetime.fromisoformat(str(found.payload["until"]))
        else:
            until = datetime.now(UTC) + timedelta(seconds=float(seconds))
        left = (until - datetime.now(UTC)).total_seconds()
        payload = {
            "position": position,
            "step": "sleep",
            "name": "sleep",
            "digest": d,
            "until": until.isoformat(),
        }
        if left > segment.lease_seconds:
            raise _Yield(segment.sleep_until(left, {**payload, "parked": True}))
        if found is None:
            self._record([NewEvent(EventKind.SLEEPING, {**payload, "parked": False})])
        if left > 0:
            with segment.step_deadline(left + segment.lease_seconds, "sleep"):
                if segment.abort_signal.wait(left):
                    segment.steps.check_held()

    def approve(self, name: str, args: dict[str, Any] | None = None) -> bool:
        """A person approves (True) or denies (False); the run waits without a slot."""
        _check_step_name("approve", name)
        values = dict(args or {})
        position = self._position
        approved, _ = self._decided(position, "approval", name, values, None)
        return bool(self._value_step("approve", name, values, lambda: approved))

    def input(self, prompt: str, schema: dict[str, Any] | type[BaseModel]) -> Any:
        """Values a person submits, checked against `schema` (a pydantic model, whose
        instance is returned, or an object JSON schema, whose dict is); the run waits for
        them without a slot. The values are recorded in the run's journal."""
        _check_step_name("input", prompt)
        gate = _human.make_gate(
            "input",
            requires_approval=False,
            input_schema=schema,
            sensitive=False,
            approval_timeout=None,
        )
        assert gate.input_schema is not None
        args = {"prompt": prompt}
        position = self._position
        values = None
        if self._log.recorded(position) is None:
            values, _ = self._decided(position, "input", prompt, args, None, gate.input_schema)
        result = self._value_step("input", prompt, args, lambda: values)
        if gate.input_model is not None:
            return gate.input_model.model_validate(result)
        return result

    def _decided(
        self,
        position: int,
        kind: str,
        name: str,
        args: dict[str, Any],
        tool: Tool | None,
        schema: dict[str, Any] | None = None,
    ) -> tuple[Any, str]:
        """A person's decision at `position`: (approved, by whom) or, for input, (values,
        by whom). Holds the run for a person when none is recorded yet."""
        self._check_doubt()
        self._record_held()
        found = self._log.recorded(position)
        if found is not None:
            # Decided and recorded: the step itself replays it (or finds it changed).
            result = found.payload.get("result")
            return (result if found.step != "tool" else True), ""
        if kind == "approval" and position in self._log.approvals:
            decision = self._log.approvals[position]
            note = decision.get("note")
            who = str(decision.get("decided_by", "a person")) + (f": {note}" if note else "")
            return bool(decision.get("approved")), who
        if kind == "input" and position in self._log.inputs:
            values = _human.decided_values(self._segment.decision, position)
            if values is not None:
                return values, str(self._log.inputs[position].get("submitted_by", ""))
        segment = self._segment
        held_call = {
            "call_id": f"step-{position}",
            "tool": name,
            "name": name,
            "effect": str(tool.effect if tool else ToolEffect.READ_ONLY),
            "args": args,
            "kind": kind,
            "sensitive": bool(tool and tool.gate.sensitive),
            "input_schema": schema,
            "approval_timeout": tool.gate.approval_timeout if tool else None,
            "position": position,
        }
        status = (
            RunStatus.WAITING_FOR_APPROVAL if kind == "approval" else RunStatus.WAITING_FOR_INPUT
        )
        hold = _human.Hold(status, position, [held_call])
        raise _Yield(segment.suspend(self._request, hold))


@dataclass(frozen=True)
class ChildHandle:
    """A child run created by `ctx.child` / `ctx.map` (SPEC §21): its id, and its agent
    (None for a built-in run), which tells how its output is read."""

    run_id: str
    agent: str | None = None


def _handle(payload: dict[str, Any]) -> ChildHandle:
    result = payload.get("result") or {}
    return ChildHandle(str(result.get("run_id")), result.get("agent"))


def _child_outcome(handle: ChildHandle, state: ChildState) -> dict[str, Any]:
    """A child's end as the parent's step records it."""
    if state.status == RunStatus.COMPLETED:
        output: Any = state.output
        if handle.agent is not None and output is not None:
            # Not written by an agent function's return (a redriven run, say): kept as text.
            with contextlib.suppress(ValueError):
                output = json.loads(output)
        return {"run_id": state.id, "status": state.status, "output": output}
    return {
        "run_id": state.id,
        "status": state.status,
        "reason": state.reason,
        "error": state.error,
    }


def _child_value(outcome: dict[str, Any]) -> Any:
    if outcome.get("status") == RunStatus.COMPLETED:
        return outcome.get("output")
    return ChildFailed(
        str(outcome.get("run_id")),
        str(outcome.get("status")),
        str(outcome.get("reason", "")),
        str(outcome.get("error", "")),
    )


# -- helpers ------------------------------------------------------------------------------


def _mismatch(position: int, recorded: str, same_step: bool, step: str, name: str) -> NoReturn:
    """The journal holds `recorded` at `position`; the code asked `step` `name` (with other
    arguments, when `same_step`)."""
    if same_step:
        recorded += " with other arguments"
    raise Nondeterministic(position, recorded, f"{step} {name!r}")


def _check_step_name(what: str, name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"{what}: a name must be a non-empty string")


def _replayed(found: Recorded) -> Any:
    return _recorded_result(found.name, found.payload)


def _recorded_result(name: str, payload: dict[str, Any]) -> Any:
    """A replayed tool or step function's result, or its recorded error raised again."""
    error = payload.get("error")
    if error is not None:
        raise ToolFailed(name, str(error))
    return payload.get("result")


def _written(
    kind: str,
    tool: Tool,
    position: int,
    d: str,
    args: dict[str, Any],
    result: Any,
    error: str | None,
    key: str,
    started: float,
) -> NewEvent:
    payload = {
        "position": position,
        "step": kind,
        "name": tool.name,
        "digest": d,
        "args": args,
        "effect": str(tool.effect),
        "result": result,
        "error": None if error is None else _json.json_safe(error),
        "idempotency_key": key,
        "duration_ms": round((time.monotonic() - started) * 1000, 3) if started else 0.0,
    }
    return NewEvent(EventKind.TOOL if kind == "tool" else EventKind.STEP, payload)


@functools.lru_cache(maxsize=1024)
def _takes_context(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
        hints = typing.get_type_hints(fn)
    except Exception:
        return False
    return bool(params) and hints.get(params[0].name) is ToolContext


@functools.lru_cache(maxsize=256, typed=True)
def _step_tool(
    fn: Callable[..., Any],
    name: str | None,
    effect: ToolEffect | str,
    timeout: float,
    probe: Callable[..., Any] | None,
) -> Tool:
    """`step_tool`, built once per function and options: a loop of `ctx.step` calls (and
    its replay) asks for the same one at every step. A refusal is not kept: it is raised
    again at every call."""
    return step_tool(fn, name, effect, timeout, probe)


def step_tool(
    fn: Callable[..., Any],
    name: str | None,
    effect: ToolEffect | str,
    timeout: float,
    probe: Callable[..., Any] | None,
) -> Tool:
    """A `ctx.step` function as a tool without a schema: its arguments are recorded as
    given (`{"args": [...], "kwargs": {...}}`)."""
    from tenure._policy import check_seconds
    from tenure.agent._tools import _check_probe, _effect

    if not callable(fn):
        raise InvalidRequest(f"step: expected a function, got {fn!r}")
    step_name = name or getattr(fn, "__name__", "")
    if not name and step_name == "<lambda>":
        raise InvalidRequest(
            "step: a lambda needs name= (its name must stay the same across versions)"
        )
    step_name = _check_name(step_name, "step")
    effect = _effect(step_name, effect)
    _check_probe(step_name, effect, probe)
    seconds = check_seconds(f"step {step_name}: timeout", timeout)
    takes_context = _takes_context(fn)
    asynchronous = inspect.iscoroutinefunction(fn)

    def call(*context: ToolContext, args: list[Any], kwargs: dict[str, Any]) -> Any:
        result = fn(*context, *args, **kwargs)
        if asynchronous:
            return _loop.run(result, timeout=seconds, what=f"step {step_name!r}")
        return result

    asked = None
    if probe is not None:
        given = probe

        def asked(context: ToolContext, args: list[Any], kwargs: dict[str, Any]) -> Any:
            return given(context, *args, **kwargs)

    return Tool(
        name=step_name,
        fn=call,
        effect=effect,
        timeout=float(seconds),
        description=step_name,
        arguments=None,
        takes_context=takes_context,
        probe=asked,
    )


def _reply(payload: dict[str, Any]) -> ModelReply:
    """A recorded model step's reply, as the call returned it."""
    message = payload.get("message") or {}
    calls = tuple(
        ToolCall(
            id=str(c.get("id")),
            name=str(c["function"]["name"]),
            args=json.loads(c["function"].get("arguments") or "{}"),
        )
        for c in message.get("tool_calls") or []
    )
    return ModelReply(
        text=message.get("content"),
        tool_calls=calls,
        usage=Usage(**payload.get("usage", {})),
        model=str(payload.get("model", "")),
    )


def llm_payload(reply: ModelReply) -> dict[str, Any]:
    return {
        "message": reply.message(),
        "model": reply.model,
        "usage": {
            "input_tokens": reply.usage.input_tokens,
            "output_tokens": reply.usage.output_tokens,
            "cost": reply.usage.cost,
        },
    }


def over_budget(request: RunRequest, usage: Usage) -> bool:
    if request.max_tokens is not None and usage.total_tokens >= request.max_tokens:
        return True
    return request.max_cost is not None and usage.cost >= request.max_cost


# -- the driver ----------------------------------------------------------------------------


def _step_log(segment: Segment) -> StepLog:
    """The run's recorded steps: its journal read in replay form, or read whole when it
    cannot be read so (events written by an older version need not: their steps simply
    have no replay form)."""
    # A run's first segment has no steps to replay: its only events are its request and,
    # for a queued run, its claim. (The attempt does not tell: a segment handed back
    # unstarted does not count one.)
    if segment.last_sequence <= 1 and segment.fence_call is None:
        return StepLog.rebuild([])
    read = segment.store.replay_journal(segment.run_id)
    log = None if read is None else StepLog.from_replay(read)
    if log is None:
        log = StepLog.rebuild(segment.store.journal(segment.run_id))
    return log


def drive(segment: Segment, request: RunRequest, agent: AgentFunction) -> RunResult | Ending:
    """One segment of an agent function's run: the function called from the top, its
    recorded steps replayed, then executed on until it returns or the segment ends."""
    log = _step_log(segment)
    context = AgentContext(segment, request, log, agent)
    try:
        kwargs = agent.bind(request.input or {})
    except InvalidRequest as exc:  # the function's signature changed since the enqueue
        raise AgentFailed(FailureClass.CONFIGURATION, str(exc)) from None
    try:
        value = agent.fn(context, **kwargs)
    except _Yield as ended:
        return ended.result
    except (LeaseLost, RunCancelled, ProviderError):
        raise  # a step's failure or the run's loss: the segment's recovery decides
    except DatabaseUnavailable:
        # The store gave up on a step (an outage): a connection failure, retried as the
        # built-in loop's is, not the function's own exception; a write it left in doubt
        # (and the function caught) still decides first.
        context._check_doubt()
        raise
    except InvalidRequest as exc:  # a step asked wrongly (a lambda without name=, …)
        segment.steps.check_held()
        raise AgentFailed(FailureClass.CONFIGURATION, f"agent {agent.name}: {exc}") from exc
    except Exception as exc:
        segment.steps.check_held()
        context._check_doubt()  # its own exception, raised after a write went in doubt
        raise AgentFailed(
            FailureClass.UNKNOWN, f"agent {agent.name} raised {describe(exc)}"
        ) from exc
    context._check_doubt()  # a write in doubt whose exception the function caught
    segment.steps.check_held()
    left = log.first_from(context._position)
    if left is not None:
        step = log.recorded(left)
        assert step is not None
        raise Nondeterministic(step.position, step.describe(), "nothing: it returned")
    fenced = context._fence_call
    if fenced is not None:  # returned before the step of the write in doubt
        raise Nondeterministic(
            int(fenced.get("position", -1)),
            f"an interrupted write, {fenced.get('step')} {fenced.get('name')!r}",
            "nothing: it returned",
        )
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        from tenure._requests import check_json_value

        check_json_value("output", value)
    except (TypeError, ValueError) as exc:
        raise AgentFailed(
            FailureClass.CONFIGURATION,
            f"agent {agent.name} returned a {type(value).__name__}, which is not JSON: {exc}",
        ) from None
    assembled = NewEvent(EventKind.ASSEMBLED, {"output": text})
    settlement = Settlement(
        RunStatus.COMPLETED, TerminationReason.COMPLETED, output=text, events=(assembled,)
    )
    return segment.end(settlement, output=text)
