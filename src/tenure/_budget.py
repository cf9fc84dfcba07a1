"""One budget for a run tree (SPEC §21): the engine's side of the root's ledger.

A run whose request has a budget (`max_tokens` / `max_cost`) reserves each model call's
estimate on its tree's ledger in the store before the call (a compare-and-set shared by
every worker), settles what the call used after it, and gives the reservation back when the
call fails. The ledger refuses a call while what was spent plus what the calls in flight
reserved leaves nothing of a limit:

- the budget is spent: the run ends `budget_exhausted`, as a lone run always has;
- only the calls in flight hold what is left: they may give some back, so the call waits
  for them (in place while the lease keeper holds the lease, else the run is parked,
  uncharged), never ending a run whose tree has budget left.

A lone run has no other call in flight, so it is refused exactly when it has spent its
budget. A run without a budget never touches the ledger.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from tenure._capacity import CHARS_PER_TOKEN, estimate_tokens, prompt_text
from tenure._errors import Cancelled, Throttled
from tenure._types import Run, RunRequest
from tenure.providers._base import ModelCall, ModelReply, Provider

if TYPE_CHECKING:
    from tenure._ladder import Segment
    from tenure.store._base import Store

log = logging.getLogger("tenure")

# How often a call refused because the tree's calls in flight hold the rest of its budget
# looks again, while it waits for them in place.
RECHECK_SECONDS = 0.05
# How long a run is parked for when that wait is longer than a segment may wait in place.
PARK_SECONDS = 1.0


class BudgetSpent(Exception):
    """The tree's budget is spent: the run ends `budget_exhausted`."""


class BudgetBusy(Throttled):
    """The tree's calls in flight hold what is left of its budget: the call waits for them
    (parked, uncharged, if that takes longer than a segment may wait in place)."""

    def __init__(self, model: str, wait: float) -> None:
        super().__init__(model, wait, circuit=False)
        self.args = (f"the run tree's budget is held by its calls in flight for {wait:.1f} s",)


def root_of(run: Run) -> str:
    """The run whose ledger a run's model calls spend from: its tree's root (a run without a
    parent is its own)."""
    return run.root_id or run.id


def tree_of(store: Store, run_id: str) -> str:
    """The root of a run's tree, from its row (a run gone from the store is its own)."""
    run = store.get_run(run_id)
    return run_id if run is None else root_of(run)


def has_budget(request: RunRequest) -> bool:
    return request.max_tokens is not None or request.max_cost is not None


def estimate_cost(call: ModelCall, provider: Provider) -> float:
    """What a call may cost at most, by its provider's price for the model (0: no price)."""
    prices = getattr(provider, "prices", None)
    price = prices.get(call.request.model) if isinstance(prices, dict) else None
    if price is None:
        return 0.0
    total = estimate_tokens(call, provider)
    prompt = max(1, math.ceil(len(prompt_text(call)) / CHARS_PER_TOKEN))
    return float(price.cost(prompt, total - prompt))


def spend(
    segment: Segment, provider: Provider, call: ModelCall, make: Callable[[], ModelReply]
) -> ModelReply:
    """Make the call `make` stands for on the tree's ledger: reserve, call, settle."""
    request = call.request
    store = segment.store
    root = segment.tree_root()
    limits = (request.max_tokens, request.max_cost)
    tokens = estimate_tokens(call, provider)
    cost = estimate_cost(call, provider)
    timeout = segment.engine.model_timeout(request.model)
    # A reservation counts while its run holds its lease, and never longer than the call
    # may take plus one lease (for its end to be settled).
    hold = timeout + segment.lease_seconds
    # An interactive run cannot be parked (no worker would pick it up): its caller waits.
    longest = timeout if segment.interactive else segment.lease_seconds / 3
    waited = 0.0
    while True:
        grant = store.reserve_budget(root, segment.lease, limits, tokens, cost, hold)
        if grant.reservation is not None:
            break
        if grant.spent:
            raise BudgetSpent(f"the budget of run tree {root} is spent")
        if waited >= longest:
            raise BudgetBusy(request.model, PARK_SECONDS)
        if segment.abort_signal.wait(RECHECK_SECONDS):
            raise Cancelled(f"run {segment.run_id} was lost while it waited") from None
        waited += RECHECK_SECONDS
    try:
        reply = make()
    except BaseException:
        _settle(store, root, grant.reservation, 0, 0.0)  # nothing was used
        raise
    _settle(store, root, grant.reservation, reply.usage.total_tokens, reply.usage.cost)
    return reply


def _settle(store: Store, root: str, reservation: str, tokens: int, cost: float) -> None:
    # A settlement that cannot be stored must not fail a call that was made: the
    # reservation stops counting with its run's lease, and the run's own usage (recorded
    # with its step) still ends a lone run at its budget.
    try:
        store.settle_budget(root, reservation, tokens, cost)
    except Exception as exc:
        log.warning("run tree %s: a call's spending could not be settled: %s", root, exc)
