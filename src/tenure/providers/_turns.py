"""The turns of a script, as pydantic models: imported on first use of a script, so that
importing tenure (and every `tenure` command's start) does not wait for pydantic."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tenure._errors import InvalidRequest
from tenure._types import FailureClass
from tenure.providers.scripted import MAX_SLEEP_SECONDS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Usage(_Strict):
    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    cost: float = Field(0.0, ge=0)


class _Say(_Strict):
    say: str
    usage: _Usage | None = None


class _CallItem(_Strict):
    tool: Annotated[str, Field(min_length=1)]
    args: dict[str, Any] = Field(default_factory=dict)


class _Call(_Strict):
    call: Annotated[list[_CallItem], Field(min_length=1)]
    text: str | None = None  # what the model says in the turn, before its calls
    usage: _Usage | None = None


class _Fail(_Strict):
    fail: FailureClass
    attempts: list[Annotated[int, Field(ge=0)]] | None = None
    retry_after: Annotated[float, Field(ge=0)] | None = None
    message: str | None = None


class _Sleep(_Strict):
    sleep: Annotated[float, Field(ge=0, le=MAX_SLEEP_SECONDS)]


Turn = _Say | _Call | _Fail | _Sleep
_KIND: dict[str, type[_Strict]] = {"say": _Say, "call": _Call, "fail": _Fail, "sleep": _Sleep}


def parse(script: Any) -> list[Turn]:
    """Validate a script; a malformed one raises InvalidRequest naming the bad turn."""
    if not isinstance(script, list):
        raise InvalidRequest("a script must be a JSON array of turns")
    turns: list[Turn] = []
    for index, raw in enumerate(script):
        kinds = [k for k in _KIND if isinstance(raw, dict) and k in raw]
        if len(kinds) != 1:
            raise InvalidRequest(
                f"script turn {index}: expected exactly one of say, call, fail, sleep; got {raw!r}"[
                    :300
                ]
            )
        try:
            turns.append(_KIND[kinds[0]].model_validate(raw))  # type: ignore[arg-type]
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InvalidRequest(
                f"script turn {index} ({kinds[0]}): {where or 'turn'}: {first['msg']}"
            ) from None
    return turns
