"""The tools of an MCP server as tenure tools, each with a declared effect.

    import tenure.mcp
    from mcp import StdioServerParameters

    crm = tenure.mcp.tools(
        rt,
        StdioServerParameters(command="crm-mcp"),      # or "http://127.0.0.1:8000/mcp"
        effects={"find_customer": "read_only", "upsert_note": "idempotent_write"},
    )
    print(crm.table())

Every registered tool has an effect. A tool that `effects` does not classify is registered as
`non_idempotent_write` — fenced, at most once, a run that crashes inside it is dead-lettered
rather than repeated — and the registration says so: a warning in the log, and `defaulted`
in the listing it returns. The server's `readOnlyHint` and `idempotentHint` annotations are
shown in that listing (with the effect they suggest) but never applied on their own: they are
the server's claims, and a wrong `read_only` would let a crash repeat a write.

Each call carries the step's idempotency key and fencing token in its `_meta`
(`tenure/idempotency_key`, `tenure/fencing_token`, with `tenure/run_id` and
`tenure/attempt`), so a server can recognise a repeated write. Install with the optional
extra `tenure[mcp]`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

try:
    import mcp as _mcp_sdk  # noqa: F401 - fail here, with the install hint, not deeper in
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("tenure.mcp needs the mcp package: pip install 'tenure[mcp]'") from exc

from tenure import _loop
from tenure._errors import InvalidRequest
from tenure._types import ToolContext, ToolEffect
from tenure.agent._tools import DEFAULT_TOOL_TIMEOUT, make_schema_tool
from tenure.integrations._common import declared_effects
from tenure.mcp._connection import Connection, ToolFailed

if TYPE_CHECKING:
    from mcp_types import Tool as ServerTool

    from tenure.runtime import Runtime

IDEMPOTENCY_KEY_META = "tenure/idempotency_key"
FENCING_TOKEN_META = "tenure/fencing_token"
RUN_ID_META = "tenure/run_id"
ATTEMPT_META = "tenure/attempt"
DEFAULT_EFFECT = ToolEffect.NON_IDEMPOTENT_WRITE
DEFAULT_CONNECT_TIMEOUT = 30.0
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_-]")
_HINTS = (
    ("readOnlyHint", "read_only_hint"),
    ("idempotentHint", "idempotent_hint"),
    ("destructiveHint", "destructive_hint"),
    ("openWorldHint", "open_world_hint"),
)

log = logging.getLogger("tenure")


@dataclass(frozen=True)
class McpTool:
    """One registered tool: under which name, with which effect, and why."""

    name: str  # the tenure tool name a RunRequest lists
    server_name: str  # the name the MCP server gave it
    effect: ToolEffect
    defaulted: bool  # True: `effects` did not classify it, so it got DEFAULT_EFFECT
    hints: Mapping[str, bool] = field(default_factory=dict)  # the server's annotations
    suggested: ToolEffect | None = None  # what the hints would make it; never applied
    description: str = ""


@dataclass(frozen=True)
class Registration:
    """What `tools()` registered from one server; close it to end the session."""

    server: str
    tools: tuple[McpTool, ...]
    connection: Connection = field(repr=False, compare=False)

    def __iter__(self) -> Iterator[McpTool]:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    def __getitem__(self, name: str) -> McpTool:
        for tool in self.tools:
            if name in (tool.name, tool.server_name):
                return tool
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        return [tool.name for tool in self.tools]

    def table(self) -> str:
        """The listing for a person: each tool, its effect, whether it was defaulted, and
        what the server's hints say."""
        rows = [("tool", "effect", "declared", "server hints")]
        for t in self.tools:
            hints = ", ".join(f"{k}={str(v).lower()}" for k, v in t.hints.items()) or "-"
            if t.suggested is not None and t.suggested is not t.effect:
                hints += f" (suggests {t.suggested})"
            declared = "DEFAULTED" if t.defaulted else "yes"
            rows.append((t.name, str(t.effect), declared, hints))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        return "\n".join(
            "  ".join(cell.ljust(width) for cell, width in zip(r[:3], widths, strict=True))
            + "  "
            + r[3]
            for r in rows
        )

    def close(self) -> None:
        """End the session (a stdio server's process exits). Registered tools then fail
        with a `connection` error until the process registers them again."""
        self.connection.close()

    def __enter__(self) -> Registration:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def tools(
    rt: Runtime,
    server: Any,
    *,
    effects: Mapping[str, ToolEffect | str] | None = None,
    timeout: float = DEFAULT_TOOL_TIMEOUT,
    prefix: str = "",
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
) -> Registration:
    """Register every tool of an MCP server on `rt`.

    `server` is a URL (streamable HTTP) or `mcp.StdioServerParameters`. `effects` maps the
    server's tool names to their effect; any other tool is registered as
    `non_idempotent_write`, with a warning. `timeout` bounds each call (and, for a write,
    the lease stamped with its fence). `prefix` goes before every tool name, for two servers
    whose names collide. Raises `InvalidRequest` for an unknown effect or an `effects` name
    the server does not offer, and `ProviderError` (`connection`, `timeout`) when the
    server cannot be reached.
    """
    declared = declared_effects("MCP", effects)
    label = _label(server)
    connection = Connection(server, label, connect_timeout=connect_timeout)
    _loop.on_exit(connection.close)
    try:
        offered = connection.list_tools()
        unknown = sorted(set(declared) - {t.name for t in offered})
        if unknown:
            raise InvalidRequest(
                f"MCP server {label}: effects name tools it does not offer: {', '.join(unknown)}"
            )
        registered = tuple(
            _register(rt, connection, tool, declared, prefix=prefix, timeout=timeout)
            for tool in offered
        )
    except BaseException:
        connection.close()
        raise
    return Registration(label, registered, connection)


def _register(
    rt: Runtime,
    connection: Connection,
    tool: ServerTool,
    declared: Mapping[str, ToolEffect],
    *,
    prefix: str,
    timeout: float,
) -> McpTool:
    hints = _hints(tool)
    suggested = _suggested(hints)
    defaulted = tool.name not in declared
    effect = declared.get(tool.name, DEFAULT_EFFECT)
    name = _UNSAFE_NAME.sub("_", f"{prefix}{tool.name}")
    if defaulted:
        log.warning(
            "MCP server %s: tool %r has no declared effect; registered as %s (fenced, at most "
            "once). Server hints, not applied: %s. Declare it in effects= to change this.",
            connection.label,
            tool.name,
            effect,
            ", ".join(f"{k}={v}" for k, v in hints.items()) or "none",
        )
    rt._tools.add(  # the Runtime's registry; tenure.mcp is part of tenure
        make_schema_tool(
            _caller(connection, tool.name, timeout),
            name=name,
            description=tool.description or tool.title or tool.name,
            parameters=dict(tool.input_schema),
            effect=effect,
            timeout=timeout,
        )
    )
    return McpTool(name, tool.name, effect, defaulted, hints, suggested, tool.description or "")


def _caller(connection: Connection, server_name: str, timeout: float) -> Any:
    def call_mcp_tool(ctx: ToolContext, **arguments: Any) -> Any:
        meta = {
            IDEMPOTENCY_KEY_META: ctx.idempotency_key,
            FENCING_TOKEN_META: ctx.fencing_token,
            RUN_ID_META: ctx.run_id,
            ATTEMPT_META: ctx.attempt,
        }
        return connection.call(server_name, arguments, meta, timeout)

    call_mcp_tool.__name__ = f"mcp_{_UNSAFE_NAME.sub('_', server_name)}"
    return call_mcp_tool


def _hints(tool: ServerTool) -> dict[str, bool]:
    annotations = tool.annotations
    if annotations is None:
        return {}
    found = {wire: getattr(annotations, attr, None) for wire, attr in _HINTS}
    return {k: v for k, v in found.items() if isinstance(v, bool)}


def _suggested(hints: Mapping[str, bool]) -> ToolEffect | None:
    if hints.get("readOnlyHint"):
        return ToolEffect.READ_ONLY
    if hints.get("idempotentHint"):
        return ToolEffect.IDEMPOTENT_WRITE
    return None


def _label(server: Any) -> str:
    if isinstance(server, str):
        return server
    command = getattr(server, "command", None)
    if command is not None:
        args = " ".join(str(a) for a in getattr(server, "args", []) or [])
        return f"{command} {args}".strip()
    return repr(server)


__all__ = [
    "ATTEMPT_META",
    "DEFAULT_EFFECT",
    "FENCING_TOKEN_META",
    "IDEMPOTENCY_KEY_META",
    "RUN_ID_META",
    "McpTool",
    "Registration",
    "ToolFailed",
    "tools",
]
