"""A batch job over documents: one run per document, three workers sharing the queue.

    python examples/batch_documents.py              # on sqlite:///batch.db
    TENURE_DATABASE_URL=postgresql://... python examples/batch_documents.py

Each run reads its document, then stores a summary with an idempotent write keyed by the
document (running it twice would change nothing). Each run is enqueued under the document's
idempotency key, so starting the batch again enqueues nothing new. The three workers
here are threads of one process for the sake of a short example; in production they are
`tenure --app examples.batch_documents:rt worker --queue documents` processes, on as many
machines as the PostgreSQL database is reachable from.
"""

from __future__ import annotations

import os
import threading
from collections import Counter

import tenure
from tenure import RunRequest, RunStatus, ToolEffect

rt = tenure.Runtime(os.environ.get("TENURE_DATABASE_URL", "sqlite:///batch.db"))
rt.add_model("default", tenure.providers.Scripted())

DOCUMENTS = {f"doc-{i:03d}": f"Report {i}: revenue up {i % 7} percent." for i in range(30)}
SUMMARIES: dict[str, str] = {}  # stands in for your document store
_lock = threading.Lock()


@rt.tool
def read_document(doc_id: str) -> str:
    """The text of a document."""
    return DOCUMENTS[doc_id]


@rt.tool(effect=ToolEffect.IDEMPOTENT_WRITE)
def store_summary(doc_id: str, summary: str) -> dict:
    """Store a document's summary (writing it again replaces it)."""
    with _lock:
        SUMMARIES[doc_id] = summary
    return {"stored": doc_id}


def request(doc_id: str) -> RunRequest:
    return RunRequest(
        prompt=f"Summarise document {doc_id} and store the summary.",
        tools=["read_document", "store_summary"],
        queue="documents",
        idempotency_key=f"summary:{doc_id}",
        script=[
            {"call": [{"tool": "read_document", "args": {"doc_id": doc_id}}]},
            {"call": [{"tool": "store_summary", "args": {"doc_id": doc_id, "summary": "…"}}]},
            {"say": f"Stored the summary of {doc_id}."},
        ],
    )


def main(workers: int = 3) -> int:
    ids = rt.enqueue_many([request(doc_id) for doc_id in DOCUMENTS])
    work = {"concurrency": 4, "queues": ["documents"], "burst": True}
    threads = [threading.Thread(target=rt.work, kwargs=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = Counter(str(run.status) for run in (rt.status(i) for i in ids) if run)
    # A second start finds every run already enqueued (and done): it stores nothing again.
    print(f"{len(ids)} documents: {dict(statuses)}; summaries stored now: {len(SUMMARIES)}")
    return 0 if statuses[str(RunStatus.COMPLETED)] == len(DOCUMENTS) else 1


if __name__ == "__main__":
    raise SystemExit(main())
