"""An MCP server's tools in a durable tenure run.

    python examples/mcp_tools.py [DATABASE_URL]

The same file is the MCP server (`--serve`, spoken to over stdio): a notes service with a
read, an idempotent write and a write it does not describe. The app registers the server's
tools with tenure.mcp, prints which effect each got (the undeclared one is fenced as a
non-idempotent write, whatever the server claims), runs a scripted run that reads, then
writes, and prints what the server saw: each write once, with the idempotency key tenure
recorded for it. Needs `pip install 'tenure[mcp]'`.
"""

# No `from __future__ import annotations` here: the SDK reads the server tools' annotations
# (`ctx: Context`) at registration, and Context is imported inside serve().

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def serve() -> None:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.types import ToolAnnotations

    server = MCPServer("notes", log_level="WARNING")
    log = Path(os.environ["NOTES_LOG"])

    def record(tool: str, ctx: Context, **args: Any) -> None:
        meta = dict(ctx.request_context.meta or {})
        entry = {"tool": tool, "args": args, "key": meta.get("tenure/idempotency_key")}
        with log.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def list_notes(customer_id: str) -> dict[str, Any]:
        """The notes kept on a customer."""
        return {"customer_id": customer_id, "notes": ["prefers email"]}

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True))
    def put_note(customer_id: str, note: str, ctx: Context) -> dict[str, Any]:
        """Store a note on a customer (the same note twice is kept once)."""
        record("put_note", ctx, customer_id=customer_id, note=note)
        return {"stored": True}

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))  # it is not read-only
    def notify_owner(customer_id: str, ctx: Context) -> str:
        """Tell the account owner about the customer."""
        record("notify_owner", ctx, customer_id=customer_id)
        return "owner notified"

    server.run("stdio")


def main(database: str) -> int:
    import tenure
    import tenure.mcp
    from mcp import StdioServerParameters

    log = Path(tempfile.mkdtemp(prefix="tenure-mcp-")) / "notes.log"
    rt = tenure.Runtime(database)
    notes = tenure.mcp.tools(
        rt,
        StdioServerParameters(
            command=sys.executable,
            args=[__file__, "--serve"],
            env={**os.environ, "NOTES_LOG": str(log)},
        ),
        effects={"list_notes": "read_only", "put_note": "idempotent_write"},
        timeout=30,
    )
    with notes, rt:
        print(notes.table())
        result = rt.run(
            tenure.RunRequest(
                prompt="Note the call with c-42 and tell the owner.",
                model="scripted",
                tools=notes.names,
                script=[
                    {"call": [{"tool": "list_notes", "args": {"customer_id": "c-42"}}]},
                    {
                        "call": [
                            {"tool": "put_note", "args": {"customer_id": "c-42", "note": "called"}},
                            {"tool": "notify_owner", "args": {"customer_id": "c-42"}},
                        ]
                    },
                    {"say": "Noted, and the owner knows."},
                ],
            )
        )
        print(f"\nrun {result.run_id}: {result.outcome} — {result.output}")
        for event in rt.events(result.run_id):
            if event.kind is tenure.EventKind.TOOL:
                p = event.payload
                print(f"  tool {p['name']:<13} {p['effect']:<21} key {p['idempotency_key']}")
    print("\nthe server saw:")
    for line in log.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        print(f"  {entry['tool']:<13} key {entry['key']}")
    return 0 if result.outcome is tenure.Outcome.COMPLETED else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        default = Path(tempfile.mkdtemp(prefix="tenure-mcp-")) / "runs.db"
        url = sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{default}"
        sys.exit(main(url))
