"""The transitions of SPEC §5 and §7, written once for every SQL dialect: the owner's
(`_owner.py`), maintenance (`_maintenance.py`) and reads (`_reads.py`), over the shared
plumbing of `_sqlbase.py`. A dialect (sqlite.py, postgres.py) subclasses `SQLStore`."""

from __future__ import annotations

from tenure.store._budgets import BudgetStore
from tenure.store._capacity import CapacityStore
from tenure.store._maintenance import Maintenance
from tenure.store._owner import OwnerTransitions
from tenure.store._queues import QueueControls
from tenure.store._reads import Reads
from tenure.store._sqlbase import Cursor
from tenure.store._streaming import Streaming
from tenure.store._workers import WorkerRows

__all__ = ["Cursor", "SQLStore"]


class SQLStore(
    OwnerTransitions,
    Maintenance,
    Reads,
    WorkerRows,
    QueueControls,
    Streaming,
    CapacityStore,
    BudgetStore,
):
    """Every transition and read of the Store protocol, for one SQL dialect."""
