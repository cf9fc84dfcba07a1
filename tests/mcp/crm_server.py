"""A small MCP server for the tests, written with the official SDK.

Run as `python crm_server.py stdio` (spoken to over stdin/stdout) or
`python crm_server.py http PORT` (streamable HTTP on 127.0.0.1). Every call of a writing
tool appends one JSON line to the file named by $CRM_LOG: the tool, its arguments and the
`_meta` tenure sent (idempotency key, fencing token), as a real server would log them to
recognise a repeated write.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("crm", log_level="WARNING")


def log_write(tool: str, args: dict[str, Any], ctx: Context) -> None:
    meta = dict(ctx.request_context.meta or {})
    line = {
        "tool": tool,
        "args": args,
        "idempotency_key": meta.get("tenure/idempotency_key"),
        "fencing_token": meta.get("tenure/fencing_token"),
        "run_id": meta.get("tenure/run_id"),
    }
    with open(os.environ["CRM_LOG"], "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def find_customer(customer_id: str) -> dict[str, Any]:
    """Find a customer by id."""
    if customer_id != "c-42":
        raise ToolError(f"no customer {customer_id}")
    return {"id": customer_id, "name": "Ada", "email": "ada@example.com"}


@server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
def upsert_note(customer_id: str, note: str, ctx: Context) -> dict[str, Any]:
    """Attach a note to a customer (the same note twice is stored once)."""
    log_write("upsert_note", {"customer_id": customer_id, "note": note}, ctx)
    return {"stored": True}


# The server claims this is read-only. It is not, and tenure must not take its word for it.
@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def send_email(to: str, subject: str, ctx: Context) -> str:
    """Send an email."""
    log_write("send_email", {"to": to, "subject": subject}, ctx)
    return f"sent to {to}"


@server.tool()
def slow_lookup(seconds: float) -> str:
    """Answer after a while."""
    time.sleep(seconds)
    return "late"


if __name__ == "__main__":
    if sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
