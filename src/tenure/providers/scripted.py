"""A deterministic provider for tests and the demo (SPEC §12).

A script is a list of turns:

- `{"say": TEXT}`: the final answer;
- `{"call": [{"tool": NAME, "args": {...}}, ...], "text": TEXT}`: tool calls, and (optional)
  what the model says in the same turn;
- `{"fail": FAILURE_CLASS, "attempts": [0, 1], "retry_after": S}`: the model call fails with
  that class on the listed attempts (on every attempt when `attempts` is absent);
- `{"sleep": SECONDS}`: the model call takes that long.

`say` and `call` turns answer a model call; `fail` and `sleep` turns happen on the way to
the next answering turn. The position in the script is the number of answers already in
the transcript, so a resumed run continues where its journal ends.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import TYPE_CHECKING, Any, cast

import orjson

from tenure._errors import Cancelled, InvalidRequest, ProviderError
from tenure._types import FailureClass, Usage
from tenure.providers._base import ModelCall, ModelReply, ToolCall

if TYPE_CHECKING:
    from tenure.providers._turns import Turn, _Call, _Fail, _Say, _Sleep

MAX_SLEEP_SECONDS = 3600.0
# Scripts already validated, by their JSON text: a worker plays the same few scripts over and
# over (tests, the demo, benchmarks), and validating one cost more than the rest of a trivial
# run's model step. Emptied whole when full.
_PARSED_MAX = 256
_parsed: dict[bytes, tuple[Turn, ...]] = {}
# The turn classes, once imported (`_kinds`): an `import` statement in a function costs a
# failed attribute lookup (a module's `__path__`) at every call.
_KINDS: tuple[type[_Call], type[_Fail], type[_Say], type[_Sleep]] | None = None


def _kinds() -> tuple[type[_Call], type[_Fail], type[_Say], type[_Sleep]]:
    """The classes of the turns (`_turns` is imported on first use: it needs pydantic)."""
    global _KINDS
    if _KINDS is None:
        from tenure.providers._turns import _Call, _Fail, _Say, _Sleep

        _KINDS = (_Call, _Fail, _Say, _Sleep)
    return _KINDS


def parse_script(script: Any) -> list[Turn]:
    """Validate a script; a malformed one raises InvalidRequest naming the bad turn."""
    key: bytes | None
    try:
        key = orjson.dumps(script)
    except TypeError:  # not JSON as it stands (orjson's error is a TypeError): never cached
        key = None
    # orjson writes NaN and infinities as null: a text with a null could stand for a script
    # other than the one cached under it, so such texts are not cached. (`find`, not `in`:
    # `in` on bytes first tries its operand as an integer, an exception raised and cleared.)
    if key is not None and key.find(b"null") >= 0:
        key = None
    if key is not None and (cached := _parsed.get(key)) is not None:
        return list(cached)
    from tenure.providers._turns import parse

    turns = parse(script)
    if key is not None:
        if len(_parsed) >= _PARSED_MAX:
            _parsed.clear()
        _parsed[key] = tuple(turns)  # the turns are frozen; the list is each caller's own
    return turns


def _estimate(call: ModelCall, text: str) -> Usage:
    prompt_chars = 0
    for m in call.messages:  # a loop, not a generator: one frame fewer per message
        prompt_chars += len(str(m.get("content") or ""))
    return Usage(input_tokens=prompt_chars // 4 + 1, output_tokens=len(text) // 4 + 1)


class Scripted:
    """Plays a script: the request's own `script`, else the one given here."""

    streams = False  # its answers come whole

    def __init__(self, script: list[dict[str, Any]] | None = None) -> None:
        self._script = parse_script(script) if script is not None else None

    def complete(self, call: ModelCall) -> ModelReply:
        raw = call.request.script
        try:
            turns = parse_script(raw) if raw is not None else self._script
        except InvalidRequest as exc:  # a stored script that is no longer valid
            raise ProviderError(FailureClass.CONFIGURATION, str(exc)) from None
        if turns is None:
            raise ProviderError(
                FailureClass.CONFIGURATION, "Scripted model: the request carries no script"
            )
        answered = (
            call.turn
            if call.turn is not None
            else sum(1 for m in call.messages if m.get("role") == "assistant")
        )
        kinds = _kinds()
        call_kind, fail_kind, say_kind, sleep_kind = kinds
        for turn in self._turns_before_answer(turns, answered, kinds):
            if isinstance(turn, sleep_kind):
                _sleep(turn.sleep, call.abort)
            elif isinstance(turn, fail_kind) and (
                turn.attempts is None or call.attempt in turn.attempts
            ):
                raise ProviderError(
                    turn.fail,
                    turn.message or f"scripted {turn.fail} failure",
                    retry_after=turn.retry_after,
                )
            elif isinstance(turn, (say_kind, call_kind)):
                return self._reply(call, turn, answered, call_kind)
        raise ProviderError(
            FailureClass.CONFIGURATION,
            f"Scripted model: the script has no answer left after {answered} answers",
        )

    @staticmethod
    def _turns_before_answer(
        turns: list[Turn],
        answered: int,
        kinds: tuple[type[_Call], type[_Fail], type[_Say], type[_Sleep]],
    ) -> list[Turn]:
        """The turns from just after answer number `answered - 1` through the next answer."""
        call_kind, _, say_kind, _ = kinds
        seen = 0
        start = 0
        for index, turn in enumerate(turns):
            if isinstance(turn, (say_kind, call_kind)):
                if seen == answered:
                    return turns[start : index + 1]
                seen += 1
                start = index + 1
        return turns[start:]

    @staticmethod
    def _reply(
        call: ModelCall, turn: _Say | _Call, answered: int, call_kind: type[_Call]
    ) -> ModelReply:
        if not isinstance(turn, call_kind):
            say = cast("_Say", turn)
            usage = Usage(**say.usage.model_dump()) if say.usage else _estimate(call, say.say)
            return ModelReply(text=say.say, usage=usage, model="scripted")
        # A copy: the turn may be shared by every run of the same script (`parse_script`).
        calls = tuple(
            ToolCall(id=f"call_{answered}_{i}", name=item.tool, args=copy.deepcopy(item.args))
            for i, item in enumerate(turn.call)
        )
        usage = (
            Usage(**turn.usage.model_dump())
            if turn.usage
            else _estimate(call, (turn.text or "") + str([c.args for c in calls]))
        )
        return ModelReply(text=turn.text, tool_calls=calls, usage=usage, model="scripted")


def _sleep(seconds: float, abort: threading.Event | None) -> None:
    """A `sleep` turn: the model call takes that long, unless its segment loses the run."""
    if abort is None:
        time.sleep(seconds)
    elif abort.wait(seconds):
        raise Cancelled("the model call was aborted: the segment no longer holds its run")
