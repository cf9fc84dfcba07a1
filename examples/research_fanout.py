"""A research agent that fans out: one child run per source, then a summary of what they
found (SPEC §21, child runs).

    python examples/research_fanout.py            # on sqlite:///research.db
    TENURE_DATABASE_URL=postgresql://... python examples/research_fanout.py

`research` asks the model which sources to read, creates one `read_source` child run per
source with `ctx.map` (all in one transaction, each under the key PARENT_ID:POSITION, so a
crash never creates one twice), and waits for all of them with `ctx.gather`. While it waits
it holds no lease and no worker slot (`waiting_for_children`): here one worker with a single
slot runs the parent and every child. The child that settles last wakes the parent in its
own transaction. One source is unreachable: its child fails, and the parent, gathering with
`return_exceptions=True`, reports it instead of failing.

The model is scripted per run (deterministic, no API key).
As a worker for the command line: `tenure --app examples.research_fanout:rt worker`.
"""

from __future__ import annotations

import os

import tenure
from tenure import AgentContext, ChildFailed, RunRequest, RunStatus

rt = tenure.Runtime(os.environ.get("TENURE_DATABASE_URL", "sqlite:///research.db"))
rt.add_model("default", tenure.providers.Scripted())

# Stands in for the web: what each source says.
SOURCES = {
    "encyclopedia": "Tardigrades survive near absolute zero and in open space.",
    "journal": "Tardigrade proteins protect their DNA from radiation.",
}


@rt.tool
def fetch(source: str) -> str:
    """Fetch a source's text."""
    if source not in SOURCES:
        raise ConnectionRefusedError(f"{source} is unreachable")
    return SOURCES[source]


@rt.agent
def read_source(ctx: AgentContext, source: str, question: str) -> dict:
    """Read one source for a question (a child run of `research`).

    Args:
        source: the source to read
        question: what the research is about
    """
    text = ctx.tool("fetch", source=source)
    return {"source": source, "finding": text}


@rt.agent
def research(ctx: AgentContext, question: str) -> dict:
    """Fan out to one reader per source, then summarise what they found.

    Args:
        question: what to find out
    """
    plan = ctx.model(f"Which sources answer: {question}? Comma-separated.").text or ""
    sources = [s.strip() for s in plan.split(",") if s.strip()]
    readers = ctx.map("read_source", [{"source": s, "question": question} for s in sources])
    results = ctx.gather(*readers, return_exceptions=True)
    found = [r for r in results if not isinstance(r, ChildFailed)]
    failed = [f"{r.run_id}: {r.error}" for r in results if isinstance(r, ChildFailed)]
    return {"question": question, "findings": found, "failed": failed}


def main() -> int:
    run_id = rt.enqueue(
        RunRequest(
            agent="research",
            input={"question": "How do tardigrades survive?"},
            script=[{"say": "encyclopedia, journal, forum"}],
        )
    )
    rt.work(concurrency=1, burst=True)
    run = rt.status(run_id)
    assert run is not None
    print(f"run {run_id}: {run.status}")
    for child in rt.runs(parent=run_id):
        print(f"  child {child.id}: {child.status}")
    print(run.output)
    return 0 if run.status is RunStatus.COMPLETED else 1


if __name__ == "__main__":
    raise SystemExit(main())
