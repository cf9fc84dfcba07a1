"""The demo's runs: scripted agents that read, write idempotently, write non-idempotently,
and meet rate limits, server errors and auth errors on the way.

Retryable failures happen on attempt 0 only, so every retried run can succeed; an auth error
happens on every attempt and dead-letters its run `not_retryable`. Many runs sleep inside a
model call so that plenty of them are in flight when a worker is killed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from tenure import RunRequest

TOOLS = ("lookup_order", "set_order_status", "send_invoice")
LONG_CALL_SECONDS = 3.0
SLOW_LEDGER = 2.0
# Where in the queue the slow invoices are (shares of the runs): some are in flight after
# the first 30 % of the runs have ended, when the demo kills a worker inside a write.
SLOW_INVOICES_AT = (0.4, 0.55, 0.7)
Turn = dict[str, Any]


def _call(tool: str, **args: Any) -> Turn:
    return {"call": [{"tool": tool, "args": args}]}


def _read(order: str, customer: str, amount: int) -> list[Turn]:
    return [_call("lookup_order", order_id=order), {"say": f"Order {order} is open."}]


def _idempotent_write(order: str, customer: str, amount: int) -> list[Turn]:
    return [
        _call("lookup_order", order_id=order),
        _call("set_order_status", order_id=order, status="shipped"),
        {"say": f"Order {order} marked as shipped."},
    ]


def _invoice(order: str, customer: str, amount: int) -> list[Turn]:
    return [
        _call("lookup_order", order_id=order),
        _call("send_invoice", customer_id=customer, amount_cents=amount),
        {"say": f"Invoiced {customer} {amount} cents."},
    ]


def _invoice_then_server_error(order: str, customer: str, amount: int) -> list[Turn]:
    # The retry resumes from the journal after the invoice: it must not be sent again.
    return [
        _call("send_invoice", customer_id=customer, amount_cents=amount),
        {"fail": "server_error", "attempts": [0]},
        _call("set_order_status", order_id=order, status="invoiced"),
        {"say": f"Invoiced {customer} and marked {order} as invoiced."},
    ]


def _rate_limited(order: str, customer: str, amount: int) -> list[Turn]:
    # Retry-After opens the model's circuit for every worker; a wait past lease / 3 (the
    # demo's lease is 2 s) parks the run, uncharged, and its next attempt is answered. (A
    # shorter one is waited inside the segment, still attempt 0: the script would fail again.)
    return [
        {"fail": "rate_limit", "attempts": [0], "retry_after": 1.0},
        _call("lookup_order", order_id=order),
        {"say": f"Order {order} is open."},
    ]


def _server_error(order: str, customer: str, amount: int) -> list[Turn]:
    return [
        _call("lookup_order", order_id=order),
        {"fail": "server_error", "attempts": [0]},
        _call("set_order_status", order_id=order, status="shipped"),
        {"say": f"Order {order} marked as shipped."},
    ]


def _long_model_call(order: str, customer: str, amount: int) -> list[Turn]:
    # A model call longer than the demo's 2 s lease: the worker's lease keeper renews the
    # lease while it is in flight, so the run is not requeued while its worker lives.
    return [
        _call("lookup_order", order_id=order),
        {"sleep": LONG_CALL_SECONDS},
        {"say": f"Order {order} reviewed at length."},
    ]


def _slow_invoice(order: str, customer: str, amount: int) -> list[Turn]:
    # The ledger is slow to acknowledge: the demo's chaos kills a worker inside this write.
    # Its run goes back in doubt, and the invoice's probe finds the row by its key.
    return [
        _call("lookup_order", order_id=order),
        _call("send_invoice", customer_id=customer, amount_cents=amount, ledger_delay=SLOW_LEDGER),
        {"say": f"Invoiced {customer} {amount} cents."},
    ]


def _auth_error(order: str, customer: str, amount: int) -> list[Turn]:
    return [_call("lookup_order", order_id=order), {"fail": "auth"}, {"say": "unreachable"}]


SCENARIOS: dict[str, tuple[int, Callable[[str, str, int], list[Turn]]]] = {
    "read": (22, _read),
    "idempotent write": (18, _idempotent_write),
    "non-idempotent write": (24, _invoice),
    "write, server error": (8, _invoice_then_server_error),
    "rate limit": (10, _rate_limited),
    "server error": (10, _server_error),
    "auth error": (8, _auth_error),
    "long model call": (6, _long_model_call),
}


# Not drawn by weight: placed at SLOW_INVOICES_AT.
SLOW_INVOICE = "slow invoice"


def _with_sleep(script: list[Turn], rng: random.Random) -> list[Turn]:
    """A model call that takes a while, before one of the answers."""
    answers = [i for i, turn in enumerate(script) if "say" in turn or "call" in turn]
    at = rng.choice(answers[:-1] or answers)
    return [*script[:at], {"sleep": round(rng.uniform(0.1, 0.8), 2)}, *script[at:]]


def workload(runs: int, seed: int = 7) -> list[RunRequest]:
    """`runs` requests in a shuffled mix of the scenarios (the same mix for the same seed)."""
    rng = random.Random(seed)
    names = list(SCENARIOS)
    weights = [SCENARIOS[n][0] for n in names]
    requests = []
    slow = {int(runs * share) for share in SLOW_INVOICES_AT}
    for i in range(runs):
        scenario = rng.choices(names, weights)[0]
        if i in slow:
            scenario = SLOW_INVOICE
        order, customer = f"o{i:04d}", f"c{rng.randrange(1000):03d}"
        make = _slow_invoice if scenario == SLOW_INVOICE else SCENARIOS[scenario][1]
        script = make(order, customer, rng.randrange(500, 20_000))
        if rng.random() < 0.7 and scenario not in ("long model call", SLOW_INVOICE):
            script = _with_sleep(script, rng)
        requests.append(
            RunRequest(
                prompt=f"Handle order {order} for customer {customer}",
                model="default",
                tools=TOOLS,
                metadata={"scenario": scenario},
                script=script,
            )
        )
    return requests


# Not drawn by weight: run in the demo's own process with `rt.run` (interactive), before
# the workers start, so that the audit covers runs that never wait in the queue.
INTERACTIVE = "interactive"
INTERACTIVE_RUNS = (_read, _idempotent_write, _invoice, _auth_error)


def interactive(seed: int = 7) -> list[RunRequest]:
    """A handful of requests to run interactively: a read, an idempotent write, an invoice
    (a non-idempotent write) and an auth error."""
    rng = random.Random(seed + 1)
    requests = []
    for i, make in enumerate(INTERACTIVE_RUNS):
        order, customer = f"i{i:04d}", f"c{rng.randrange(1000):03d}"
        requests.append(
            RunRequest(
                prompt=f"Handle order {order} for customer {customer}",
                model="default",
                tools=TOOLS,
                metadata={"scenario": INTERACTIVE},
                script=make(order, customer, rng.randrange(500, 20_000)),
            )
        )
    return requests
