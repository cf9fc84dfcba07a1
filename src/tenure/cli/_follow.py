"""`tenure events RUN --follow`: a run's events as they are recorded and, in between, the
text of a streaming model call as it arrives (SPEC §18)."""

from __future__ import annotations

import sys
import time

from tenure import Delta, Event, Runtime
from tenure.cli._output import event_line, out, print_json_line

# While the run waits for a person the stream has ended; this is how often it is looked at.
WAITING_POLL_SECONDS = 0.25


class _Printer:
    def __init__(self, run_id: str, as_json: bool) -> None:
        self.run_id = run_id
        self.as_json = as_json
        self._open: int | None = None  # the call whose text is being written on a line

    def print(self, item: Event | Delta) -> None:
        if isinstance(item, Delta):
            self._delta(item)
            return
        self._end_line()
        if self.as_json:
            print_json_line(item.to_json())
        else:
            out.print(event_line(item))

    def _delta(self, delta: Delta) -> None:
        if self.as_json:
            print_json_line(delta.to_json(self.run_id))
            return
        if self._open != delta.sequence:
            self._end_line()
            # A new sequence: the call's text starts (again, if an earlier call failed).
            sys.stdout.write(f"{delta.sequence:>4}  … ")
            self._open = delta.sequence
        sys.stdout.write(delta.text)
        sys.stdout.flush()

    def _end_line(self) -> None:
        if self._open is not None:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self._open = None


def follow(app: Runtime, run_id: str, after: int, as_json: bool) -> int:
    printer = _Printer(run_id, as_json)
    while True:
        for item in app.stream(run_id, after):
            printer.print(item)
            if isinstance(item, Event):
                after = item.sequence
        current = app.status(run_id)
        if current is None or current.status.is_terminal:
            return 0
        # Waiting for a person: the run goes on once they decide; keep following it.
        time.sleep(WAITING_POLL_SECONDS)
