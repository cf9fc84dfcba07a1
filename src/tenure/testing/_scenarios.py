"""Crash-test scenarios: a JSON array of objects, each `name` plus the fields of a
`RunRequest` (SPEC §19), and optionally how its person decides (`approve`, `submit`).

A scenario that names an agent function (`agent`, SPEC §20) gives the function's arguments
as `input`, the request's field; in any other scenario `input` is still accepted for what
`submit` says (the values a held input call gets), as before agent functions existed."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenure._errors import InvalidRequest
from tenure._types import RunRequest

_REQUEST_FIELDS = frozenset(f.name for f in dataclasses.fields(RunRequest))
# Besides the request: how the harness's deciders decide when the run waits for a person.
_DECISION_FIELDS = frozenset({"approve", "submit"})


@dataclass(frozen=True)
class Scenario:
    name: str
    request: RunRequest
    approve: bool = True  # approve (or deny) a call held for approval
    input: dict[str, Any] = field(default_factory=dict)  # the values a held input call gets


def scenario(data: Mapping[str, Any], where: str = "scenario") -> Scenario:
    if not isinstance(data, Mapping):
        raise InvalidRequest(f"{where}: expected an object with a name and a request's fields")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InvalidRequest(f'{where}: needs a non-empty "name"')
    unknown = sorted(set(data) - _REQUEST_FIELDS - _DECISION_FIELDS - {"name"})
    if unknown:
        raise InvalidRequest(f"scenario {name!r}: unknown fields {unknown}")
    fields = {k: v for k, v in data.items() if k in _REQUEST_FIELDS}
    submit = "submit"
    if data.get("agent") is None and "input" in fields:
        submit = "input"  # no agent function: `input` is what a person submits
        if "submit" in data:
            raise InvalidRequest(f'scenario {name!r}: give the submitted values once ("submit")')
        fields.pop("input")
    approve, values = data.get("approve", True), data.get(submit, {})
    if not isinstance(approve, bool):
        raise InvalidRequest(f'scenario {name!r}: "approve" must be true or false')
    if not isinstance(values, dict):
        raise InvalidRequest(f'scenario {name!r}: "{submit}" must be an object')
    try:
        request = RunRequest(**fields)
    except TypeError as exc:
        raise InvalidRequest(f"scenario {name!r}: {exc}") from None
    return Scenario(name, request, approve, dict(values))


def load_scenarios(source: str | Path | Iterable[Scenario | Mapping[str, Any]]) -> list[Scenario]:
    """Scenarios from a JSON file, or from objects / `Scenario`s; InvalidRequest if bad."""
    if isinstance(source, str | Path):
        path = Path(source)
        try:
            items: Any = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InvalidRequest(f"{path}: cannot read it: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise InvalidRequest(f"{path}: not JSON: {exc}") from None
        if not isinstance(items, list):
            raise InvalidRequest(f"{path}: expected a JSON array of scenario objects")
    else:
        items = list(source)
    found = [
        s if isinstance(s, Scenario) else scenario(s, f"scenario {i}") for i, s in enumerate(items)
    ]
    if not found:
        raise InvalidRequest("no scenarios: give at least one")
    names = [s.name for s in found]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InvalidRequest(f"scenario names must be unique; repeated: {repeated}")
    return found
