"""Crash-testing your own agent (SPEC §19): `tenure.testing.crashtest(runtime, scenarios)`.

Each scenario runs once uncrashed (the reference), then once per crash point with a real
worker process SIGKILLed there, and a fresh worker finishes it; six properties are judged
per case. `tenure --app MODULE:ATTR crashtest --scenarios FILE.json` is the same from the
command line.
"""

from tenure.testing._harness import CrashReport, Result, crashtest
from tenure.testing._hooks import POINT_KINDS
from tenure.testing._properties import PROPERTIES, Verdict
from tenure.testing._scenarios import Scenario, load_scenarios

__all__ = [
    "POINT_KINDS",
    "PROPERTIES",
    "CrashReport",
    "Result",
    "Scenario",
    "Verdict",
    "crashtest",
    "load_scenarios",
]
