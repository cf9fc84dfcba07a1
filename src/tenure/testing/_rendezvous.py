"""Where the k deciders of one hold meet before any of them decides (SPEC §19 consume-once).

Starting the deciders together is not enough: a decider whose handler reads late (its process
scheduled later on a busy machine, a slow step before its check) finds the run already decided
(on SQLite a decision commits within a millisecond), and a handler that checks, then acts
is never seen acting twice. So each decider waits just before its decision is written until
every other one has reached its own decision or returned without one; then all write at once.
The meeting place is a folder: a file `met-WHO` or `left-WHO` per decider."""

from __future__ import annotations

import time
from pathlib import Path

MET = "met-"
LEFT = "left-"
POLL = 0.002


class Rendezvous:
    def __init__(self, folder: Path, who: str, parties: int, timeout: float) -> None:
        self.folder, self.who, self.parties, self.timeout = folder, who, parties, timeout
        # None: this decider reached no decision; False: it decided without all the others
        # there (the timeout ran out), so the race was not forced.
        self.met: bool | None = None

    def _here(self) -> set[str]:
        names = (p.name for p in self.folder.iterdir())
        return {n.removeprefix(MET).removeprefix(LEFT) for n in names if n.startswith((MET, LEFT))}

    def meet(self) -> None:
        """Wait here until every decider has reached its decision or left, or the timeout
        runs out. Only this process's first decision waits: a later one is not in the race."""
        if self.met is not None:
            return
        (self.folder / f"{MET}{self.who}").touch()
        deadline = time.monotonic() + self.timeout
        while len(self._here()) < self.parties and time.monotonic() < deadline:
            time.sleep(POLL)
        self.met = len(self._here()) >= self.parties

    def leave(self) -> None:
        """This decider is done: whoever still waits for it waits no longer."""
        (self.folder / f"{LEFT}{self.who}").touch()
