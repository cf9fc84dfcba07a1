"""What the framework integrations share: tool effects declared at registration, and the
reduction of a step's outcome to what a framework expects back."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from tenure import _loop
from tenure._errors import InvalidRequest
from tenure._types import ToolEffect

log = logging.getLogger("tenure.integrations")

# A framework tool with no declared effect may write: fenced, at most once (as for MCP tools).
DEFAULT_EFFECT = ToolEffect.NON_IDEMPOTENT_WRITE


def declared_effects(
    framework: str, effects: Mapping[str, ToolEffect | str] | None
) -> dict[str, ToolEffect]:
    """`effects` checked: each value a ToolEffect (InvalidRequest, one line, otherwise)."""
    declared: dict[str, ToolEffect] = {}
    for name, effect in (effects or {}).items():
        try:
            declared[name] = ToolEffect(effect)
        except ValueError:
            choices = ", ".join(e.value for e in ToolEffect)
            raise InvalidRequest(
                f"{framework} tool {name}: unknown effect {effect!r} (one of {choices})"
            ) from None
    return declared


def check_effects(
    framework: str,
    agent_name: str,
    declared: Mapping[str, ToolEffect],
    known: Iterable[str],
    *,
    more_at_run_time: bool = False,
) -> dict[str, bool]:
    """Each known tool's effect decided at registration: {tool: defaulted}. An effect for a
    tool the agent does not have is refused (a typo would leave the real tool defaulted),
    unless the agent has toolsets whose tools are known only at run time (an MCP server's);
    an undeclared tool is a `non_idempotent_write`, and the log says so."""
    names = sorted(set(known))
    unknown = sorted(set(declared) - set(names))
    if unknown and not more_at_run_time:
        raise InvalidRequest(
            f"{framework} agent {agent_name}: effects name tools it does not have: "
            f"{', '.join(unknown)}"
        )
    defaulted = {name: name not in declared for name in names}
    for name in names:
        if defaulted[name]:
            log.warning(
                "%s agent %s: tool %r has no declared effect; registered as %s (fenced, at "
                "most once). Declare it in effects= to change this.",
                framework,
                agent_name,
                name,
                DEFAULT_EFFECT,
            )
    return defaulted


class HeldOnProcessLoop:
    """An async context manager (an MCP server's session) entered and exited by one task on
    tenure's process loop, for a segment whose framework runs on a loop of its own.

    A framework's tool call runs as a step, on the process loop (`ctx.step`): the session it
    uses must live there too, since anyio binds a session's streams and tasks to the loop that
    opened it (opened on the segment's loop, a call from a step waited for an answer that
    never came until the step's timeout). One task enters and exits it: anyio's cancel
    scopes end in the task that began them."""

    def __init__(self, held: AbstractAsyncContextManager[Any]) -> None:
        self._held = held
        self._holder: concurrent.futures.Future[None] | None = None
        self._release: Callable[[], None] | None = None

    async def _hold(self, ready: concurrent.futures.Future[None]) -> None:
        released = asyncio.Event()
        loop = asyncio.get_running_loop()

        def release() -> None:
            loop.call_soon_threadsafe(released.set)

        self._release = release
        try:
            async with self._held:
                ready.set_result(None)
                await released.wait()
        except BaseException as exc:
            if not ready.done():  # it could not be entered: `enter` raises the error
                ready.set_exception(exc)
                return
            raise

    async def enter(self) -> None:
        """Entered on the process loop; awaited from the segment's."""
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._holder = _loop.submit(self._hold(ready))
        try:
            await asyncio.wrap_future(ready)
        except BaseException:
            self._holder = None
            raise

    async def exit(self) -> None:
        holder, self._holder = self._holder, None
        if holder is None:
            return
        if self._release is not None:
            self._release()
        await asyncio.wrap_future(holder)


async def on_process_loop(coro: Any) -> Any:
    """`coro` run on tenure's process loop, awaited from the segment's."""
    return await asyncio.wrap_future(_loop.submit(coro))


def say_listed_at_run_time(
    framework: str, agent_name: str, source: str, declared: Mapping[str, ToolEffect]
) -> None:
    """At registration: a toolset (an MCP server's) names its tools only at run time."""
    log.warning(
        "%s agent %s: %s lists its tools at run time; each one effects= does not name "
        "(it names %s) is registered as %s (fenced, at most once).",
        framework,
        agent_name,
        source,
        ", ".join(sorted(declared)) or "none",
        DEFAULT_EFFECT,
    )


class Undeclared:
    """The tools of run-time toolsets that took the default effect, each said once a process
    (at its first listing), by name."""

    def __init__(self, framework: str, agent_name: str, declared: Mapping[str, ToolEffect]):
        self._framework, self._agent, self._declared = framework, agent_name, declared
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def seen(self, source: str, names: Iterable[str]) -> None:
        with self._lock:
            new = sorted(set(names) - set(self._declared) - self._said)
            self._said.update(new)
        for name in new:
            log.warning(
                "%s agent %s: tool %r of %s has no declared effect; it runs as %s (fenced, "
                "at most once). Declare it in effects= to change this.",
                self._framework,
                self._agent,
                name,
                source,
                DEFAULT_EFFECT,
            )


def effect_of(declared: Mapping[str, ToolEffect], name: str) -> ToolEffect:
    return declared.get(name, DEFAULT_EFFECT)


def check_probes(
    framework: str,
    agent_name: str,
    declared: Mapping[str, ToolEffect],
    probes: Mapping[str, Callable[..., Any]] | None,
    known: Iterable[str],
) -> dict[str, Callable[..., Any]]:
    """Probes only for write tools the agent has (one line, InvalidRequest, otherwise)."""
    names = set(known)
    for name, probe in (probes or {}).items():
        if name not in names and name not in declared:
            raise InvalidRequest(
                f"{framework} agent {agent_name}: a probe for tool {name!r}, which it does not have"
            )
        if not callable(probe):
            raise InvalidRequest(
                f"{framework} agent {agent_name}: the probe for {name} is not callable"
            )
        if not effect_of(declared, name).is_write:
            raise InvalidRequest(
                f"{framework} agent {agent_name}: tool {name} is read_only: it needs no probe"
            )
    return dict(probes or {})
