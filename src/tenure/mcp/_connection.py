"""One MCP server's client session, held open on the process's loop thread (`tenure._loop`),
reopened after a drop.

Every failure to reach the server leaves as a classified `ProviderError` (`connection` or
`timeout`): the step fails and failure recovery decides, so an idempotent write is retried
with the same idempotency key and a non-idempotent one stays fenced. An error the server
reports about the call itself (a JSON-RPC error, or a result with `isError`) is the tool's
ordinary error: the model sees it and the run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from typing import Any

import anyio
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, CallToolResult, Tool

import mcp
from tenure import _loop
from tenure._errors import ProviderError
from tenure._types import FailureClass

log = logging.getLogger("tenure")

_MAX_PAGES = 100
_MAX_TEXT = 300


class ToolFailed(Exception):
    """The MCP server reported that the call failed; the model is told why."""


class Connection:
    """A session with one server. `server` is what `mcp.Client` takes: a URL (streamable
    HTTP) or `mcp.StdioServerParameters` (a subprocess spoken to over stdin/stdout)."""

    def __init__(self, server: Any, label: str, *, connect_timeout: float) -> None:
        self.server = server
        self.label = label
        self.connect_timeout = connect_timeout
        self._client: mcp.Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None
        self._opening: asyncio.Lock | None = None
        # The loop the session state above belongs to (see `_current`).
        self._on: asyncio.AbstractEventLoop | None = None

    # -- the synchronous side (tenure's tools and registration) ---------------------------

    def list_tools(self) -> list[Tool]:
        tools: list[Tool] = self._wait(
            self._list_tools(), self.connect_timeout, "listing its tools"
        )
        return tools

    def call(self, name: str, args: dict[str, Any], meta: dict[str, Any], timeout: float) -> Any:
        result = self._wait(self._call(name, args, meta, timeout), timeout, f"calling {name}")
        return result_value(name, result)

    def close(self) -> None:
        with contextlib.suppress(_loop.TimedOut, _loop.LoopUnavailable):
            _loop.run(self._close(), timeout=self.connect_timeout, what="closing the session")
        _loop.forget(self.close)

    def _wait(self, coro: Any, timeout: float, doing: str) -> Any:
        try:
            return _loop.run(coro, timeout=timeout, what=f"MCP server {self.label}")
        except _loop.LoopDied as exc:
            # The session went with the loop; what the server did is unknown: a classified
            # failure, so that a write's fence stands and failure recovery decides.
            raise ProviderError(
                FailureClass.CONNECTION, f"MCP server {self.label}: {exc} while {doing}"
            ) from None
        except _loop.TimedOut:
            raise ProviderError(
                FailureClass.TIMEOUT,
                f"MCP server {self.label}: no answer within {timeout:g}s while {doing}",
            ) from None
        except (ProviderError, ToolFailed):
            raise
        except Exception as exc:
            # The SDK's task groups wrap what happened in exception groups.
            mcp_error = _find_mcp_error(exc)
            if mcp_error is not None:
                raise self._classified(mcp_error, doing) from exc
            if _is_transport_failure(exc):
                raise ProviderError(
                    FailureClass.CONNECTION,
                    f"MCP server {self.label}: {_describe(exc)} while {doing}",
                ) from exc
            raise

    def _classified(self, exc: MCPError, doing: str) -> Exception:
        said = f"MCP server {self.label}: {_describe(exc)} while {doing}"
        if exc.code == CONNECTION_CLOSED:
            return ProviderError(FailureClass.CONNECTION, said)
        if exc.code == REQUEST_TIMEOUT:
            return ProviderError(FailureClass.TIMEOUT, said)
        return ToolFailed(said)

    # -- the loop side ----------------------------------------------------------------------

    def _current(self) -> None:
        """Forget a session opened on a loop that has stopped since: its streams and its
        holder task belong to that loop (which cancelled them as it ended), and waiting on
        them from this one would never end. The next call opens a new session."""
        loop = asyncio.get_running_loop()
        if self._on is not loop:
            self._client = self._holder = self._closing = None
            self._opening = None
            self._on = loop

    async def _session(self) -> mcp.Client:
        self._current()
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._client is not None and self._holder is not None and not self._holder.done():
                return self._client
            return await self._open()

    async def _open(self) -> mcp.Client:
        # anyio requires a cancel scope to be left by the task that entered it, so one task
        # holds the session open for its whole life and the calls run beside it.
        ready: asyncio.Future[mcp.Client] = asyncio.get_running_loop().create_future()
        closing = asyncio.Event()

        async def hold() -> None:
            try:
                async with mcp.Client(self.server) as client:
                    ready.set_result(client)
                    await closing.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                elif not closing.is_set():
                    log.warning("MCP server %s: the session ended: %s", self.label, _describe(exc))
                if isinstance(exc, asyncio.CancelledError):
                    raise

        self._closing = closing
        self._holder = asyncio.create_task(hold(), name=f"tenure-mcp {self.label}")
        self._client = await ready
        return self._client

    async def _list_tools(self) -> list[Tool]:
        client = await self._session()
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def _call(
        self, name: str, args: dict[str, Any], meta: dict[str, Any], timeout: float
    ) -> CallToolResult:
        client = await self._session()
        try:
            return await client.call_tool(name, args, read_timeout_seconds=timeout, meta=meta)  # type: ignore[arg-type]
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                await self._drop()
            raise
        except Exception as exc:
            if _is_transport_failure(exc):
                await self._drop()  # the next call opens a new session
            raise

    async def _drop(self) -> None:
        self._current()
        closing, holder = self._closing, self._holder
        self._client = self._holder = self._closing = None
        if closing is not None:
            closing.set()
        if holder is not None:
            # wait() never raises the holder's own failure: a broken session may fail on its
            # way out, and it is gone either way.
            await asyncio.wait({holder}, timeout=self.connect_timeout)

    async def _close(self) -> None:
        await self._drop()


def result_value(name: str, result: CallToolResult) -> Any:
    """A tool result as JSON for the journal: the structured content when the server gave
    one, else the text, else the content blocks themselves."""
    if result.is_error:
        raise ToolFailed(_text(result) or f"the MCP tool {name} failed")
    if result.structured_content is not None:
        return result.structured_content
    blocks = result.content
    if all(getattr(b, "type", None) == "text" for b in blocks):
        return _text(result)
    return [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in blocks]


def _text(result: CallToolResult) -> str:
    return "\n".join(str(getattr(b, "text", "")) for b in result.content if b.type == "text")


def _find_mcp_error(exc: BaseException) -> MCPError | None:
    if isinstance(exc, MCPError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find_mcp_error(inner)
            if found is not None:
                return found
    return None


def _is_transport_failure(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return any(_is_transport_failure(e) for e in exc.exceptions)
    transport: tuple[type[BaseException], ...] = (
        OSError,
        anyio.ClosedResourceError,
        anyio.BrokenResourceError,
        anyio.EndOfStream,
    )
    for module_name in ("httpx2", "httpx"):
        module: Any = sys.modules.get(module_name)
        if module is not None:
            transport += (module.TransportError,)
    return isinstance(exc, transport)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:_MAX_TEXT]
