"""`tenure cancel` and `tenure redrive` with filters on each store, through the real
executable: the count is printed and confirmed (`--yes` skips the question); nothing changes
without a yes; what cannot be acted on is refused in one line."""

from __future__ import annotations

from pathlib import Path

import tenure
from tenure import RunStatus

from .conftest import Cli, one_line_error

SAY = [{"say": "done"}]
AUTH_FAILURE = [{"fail": "auth"}, {"say": "never"}]


def enqueue(cli: Cli, queue: str, turns: list[dict[str, object]] = SAY) -> str:
    result = cli("enqueue", "--prompt", "p", "--queue", queue, "--script", cli.script(turns))
    assert result.code == 0, result.err
    return result.out.strip()


def statuses(rt: tenure.Runtime, ids: list[str]) -> list[RunStatus]:
    return [rt.status(i).status for i in ids]  # type: ignore[union-attr]


def test_bulk_cancel_counts_asks_and_cancels_only_on_yes(tmp_path: Path, db_url: str) -> None:
    cli = Cli(tmp_path, db_url)
    mail = [enqueue(cli, "mail") for _ in range(3)]
    other = enqueue(cli, "other")
    with tenure.Runtime(db_url) as rt:
        refused = cli("cancel", "--status", "queued", "--queue", "mail", input="n\n")
        assert refused.code == 1
        assert refused.out.startswith("3 runs to cancel (status queued, queue mail): ")
        assert all(run_id in refused.out for run_id in mail)
        assert "cancel 3 runs? [y/N]" in refused.err
        assert "not confirmed: nothing cancelled" in refused.err
        assert statuses(rt, mail) == [RunStatus.QUEUED] * 3
        # No answer at all (standard input closed) is no.
        assert cli("cancel", "--status", "queued", "--queue", "mail").code == 1
        assert statuses(rt, mail) == [RunStatus.QUEUED] * 3

        done = cli("cancel", "--status", "queued", "--queue", "mail", input="y\n")
        assert done.code == 0, done.err
        assert done.out.splitlines()[-1] == "cancelled 3"
        assert statuses(rt, mail) == [RunStatus.CANCELLED] * 3
        assert statuses(rt, [other]) == [RunStatus.QUEUED]

        nothing = cli("cancel", "--status", "queued", "--queue", "mail")
        assert (nothing.code, nothing.out.strip()) == (
            0,
            "no run to cancel (status queued, queue mail)",
        )
        yes = cli("cancel", "--queue", "other", "--yes")
        assert yes.code == 0 and yes.out.splitlines()[-1] == "cancelled 1"
        assert "[y/N]" not in yes.err
        assert statuses(rt, [other]) == [RunStatus.CANCELLED]


def test_bulk_redrive_counts_asks_and_skips_nothing_silently(tmp_path: Path, db_url: str) -> None:
    cli = Cli(tmp_path, db_url)
    dead = [enqueue(cli, "mail", AUTH_FAILURE) for _ in range(2)]
    elsewhere = enqueue(cli, "other", AUTH_FAILURE)
    assert cli("worker", "--burst").code == 0
    with tenure.Runtime(db_url) as rt:
        assert all(rt.status(i).is_dead_letter for i in [*dead, elsewhere])  # type: ignore[union-attr]
        asked = cli("redrive", "--queue", "mail", "--reason", "not_retryable", input="no\n")
        assert asked.code == 1 and asked.out.startswith("2 runs to redrive (")
        assert statuses(rt, dead) == [RunStatus.FAILED] * 2
        done = cli("redrive", "--queue", "mail", input="yes\n")
        assert done.code == 0, done.err
        assert done.out.splitlines()[-1] == "redriven 2"
        assert statuses(rt, dead) == [RunStatus.QUEUED] * 2
        assert statuses(rt, [elsewhere]) == [RunStatus.FAILED]


def test_what_a_bulk_action_cannot_do_is_one_line(tmp_path: Path, db_url: str) -> None:
    cli = Cli(tmp_path, db_url)
    run_id = enqueue(cli, "mail")
    for args, message in [
        (("cancel", "--status", "completed"), "completed runs have ended"),
        (("cancel", "--reason", "cancelled"), "ended runs cannot be cancelled"),
        (("cancel",), "name a RUN, or filter"),
        (("cancel", run_id, "--queue", "mail"), "not both"),
        (("cancel", "--yes"), "--yes confirms a filter"),
        (("redrive", "--status", "queued"), "only dead-lettered"),
        (("redrive", "--queue", "mail", "--force"), "takes no --force"),
        (("redrive", "--queue", "mail", "--all-dead-letters"), "no filter"),
    ]:
        result = cli(*args, input="y\n")
        assert result.code == 2, (args, result.err)
        assert message in one_line_error(result), args
    with tenure.Runtime(db_url) as rt:
        assert statuses(rt, [run_id]) == [RunStatus.QUEUED]
