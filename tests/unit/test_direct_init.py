"""`direct_init`: a frozen dataclass's `__init__` that fills the instance's `__dict__`,
building the same object as the `__init__` that `dataclass` writes."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

import pytest

from tenure._types import Usage, direct_init
from tenure.store._base import Lease, NewEvent, Settlement


def _record() -> Any:
    """A new frozen dataclass with each kind of field `direct_init` fills (no default, a
    default, a default factory, one left out of comparisons) and a `__post_init__`: made
    twice, once for each `__init__` compared."""

    @dataclass(frozen=True)
    class Record:
        a: int
        b: str = "b"
        c: list[int] = field(default_factory=list)
        d: dict[str, Any] = field(default_factory=dict, compare=False)

        def __post_init__(self) -> None:
            object.__setattr__(self, "c", [*self.c, self.a])

    return Record


_Plain = _record()
_Direct = direct_init(_record())


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((1,), {}), ((1, "x"), {}), ((1,), {"c": [5]}), ((), {"a": 2, "d": {"k": 1}})],
)
def test_the_same_object_as_the_dataclass_init(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    plain, direct = _Plain(*args, **kwargs), _Direct(*args, **kwargs)
    assert vars(plain) == vars(direct)
    assert list(vars(plain)) == list(vars(direct))  # the fields in the same order
    with pytest.raises(dataclasses.FrozenInstanceError):
        direct.a = 3


def test_each_instance_gets_its_own_factory_value() -> None:
    first, second = _Direct(1), _Direct(1)
    assert first.d == second.d == {} and first.d is not second.d


def test_the_same_signature_and_errors() -> None:
    direct, plain = (inspect.signature(c.__init__).parameters for c in (_Direct, _Plain))
    assert list(direct) == list(plain)
    assert [p.default is p.empty for p in direct.values()] == [
        p.default is p.empty for p in plain.values()
    ]
    with pytest.raises(TypeError):
        _Direct()
    with pytest.raises(TypeError):
        _Direct(1, "b", [], {}, "one too many")
    with pytest.raises(TypeError):
        _Direct(1, e=2)


def test_the_records_of_a_run_are_built_as_before() -> None:
    assert Usage(1, 2) == Usage(input_tokens=1, output_tokens=2, cost=0.0)
    assert Lease("r", "w", 3, 0).has_parent is True
    event = NewEvent("llm", {"a": 1})  # type: ignore[arg-type]
    assert (event.kind, event.payload, event.text) == ("llm", {"a": 1}, None)
    settlement = Settlement("completed", "completed")  # type: ignore[arg-type]
    assert settlement.events == () and settlement.usage == Usage()


@pytest.mark.parametrize(
    "make",
    [
        lambda: dataclass(type("Mutable", (), {"__annotations__": {"a": "int"}})),
        lambda: dataclass(frozen=True, slots=True)(
            type("Slotted", (), {"__annotations__": {"a": "int"}})
        ),
        lambda: dataclass(frozen=True)(
            type("KwOnly", (), {"__annotations__": {"a": "int"}, "a": field(kw_only=True)})
        ),
        lambda: dataclass(frozen=True)(
            type("NotInit", (), {"__annotations__": {"a": "int"}, "a": field(init=False)})
        ),
    ],
)
def test_what_it_cannot_reproduce_is_refused(make: Any) -> None:
    with pytest.raises(TypeError):
        direct_init(make())
