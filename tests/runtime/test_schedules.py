"""Cron schedules (SPEC §22), on both stores: each tick enqueues exactly one run whatever
the number of workers firing, missed ticks fire once for the latest, bad input stores
nothing, and time zones follow zoneinfo through the changes of daylight saving time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

import tenure
from tenure import RunRequest
from tenure._schedules import latest_at_or_before, next_after
from tests._raw import raw_execute

MakeRuntime = Callable[..., tenure.Runtime]


def say() -> RunRequest:
    return RunRequest(prompt="report", model="scripted", script=[{"say": "ok"}])


def overdue(db_url: str, name: str, minutes: int) -> None:
    """Move the schedule's next tick `minutes` into the past, as if no worker had run since
    (neither store's clock can be moved from a test)."""
    if db_url.startswith("sqlite"):
        sql = "UPDATE tenure_schedules SET next_fire = next_fire - ? WHERE name = ?"
        raw_execute(db_url, sql, minutes * 60 + 3600, name)
    else:
        sql = (
            "UPDATE tenure_schedules SET next_fire = next_fire - make_interval(mins => ?) "
            "- interval '1 hour' WHERE name = ?"
        )
        raw_execute(db_url, sql, minutes, name)


def test_missed_ticks_fire_once_for_the_latest_whatever_the_number_of_workers(
    make_runtime: MakeRuntime, db_url: str
) -> None:
    runtimes = [make_runtime() for _ in range(4)]
    first = runtimes[0]
    first.schedule("every-minute", cron="* * * * *", request=say())
    overdue(db_url, "every-minute", 30)  # thirty ticks missed
    start = threading.Barrier(len(runtimes))
    fired: list[int] = []

    def fire(rt: tenure.Runtime) -> None:
        start.wait()
        fired.append(rt.fire_schedules())

    threads = [threading.Thread(target=fire, args=(rt,)) for rt in runtimes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(fired) == [0, 0, 0, 1]
    runs = first.runs(limit=100)
    assert len(runs) == 1
    (schedule,) = first.schedules()
    now = first.store.now()
    assert schedule.last_run_id == runs[0].id and schedule.fired == 1
    assert schedule.last_fire is not None and now - schedule.last_fire < timedelta(minutes=1)
    assert schedule.next_fire is not None and schedule.next_fire > now
    key = runs[0].idempotency_key
    assert key == f"schedule:every-minute:{schedule.last_fire:%Y-%m-%dT%H:%M:%SZ}"
    assert first.fire_schedules() == 0  # not due again before its next tick


def test_a_paused_schedule_fires_nothing_and_delete_removes_it(
    make_runtime: MakeRuntime, db_url: str
) -> None:
    rt = make_runtime()
    rt.schedule("nightly", cron="0 3 * * *", request=say(), timezone="Europe/Berlin")
    assert rt.pause_schedule("nightly") and not rt.pause_schedule("nightly")
    overdue(db_url, "nightly", 5)
    assert rt.fire_schedules() == 0
    assert rt.resume_schedule("nightly") and not rt.resume_schedule("nightly")
    (schedule,) = rt.schedules()
    assert schedule.next_fire is not None and schedule.next_fire > rt.store.now()
    assert not schedule.paused and schedule.fired == 0
    assert rt.delete_schedule("nightly") and not rt.delete_schedule("nightly")
    assert rt.schedules() == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "61 * * * *"}, "not a cron expression"),
        ({"cron": "every day"}, "not a cron expression"),
        ({"cron": "* * * * * *"}, "not a cron expression"),  # croniter's seconds: not ours
        ({"cron": "0 0 31 2 *"}, "never fires"),
        ({"cron": "* * * * *", "timezone": "x" * 300}, "unknown time zone"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"cron": "* * * * *", "request": RunRequest(prompt="x", priority=500)}, "priority"),
        ({"cron": "* * * * *", "request": RunRequest(prompt="x", model="nope")}, "nope"),
    ],
)
def test_bad_input_is_one_clear_error_and_stores_nothing(
    make_runtime: MakeRuntime, kwargs: dict[str, object], message: str
) -> None:
    rt = make_runtime()
    arguments: dict[str, object] = {"request": say(), **kwargs}
    with pytest.raises(tenure.InvalidRequest, match=message) as caught:
        rt.schedule("bad", **arguments)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)
    assert rt.schedules() == []


def test_a_wall_clock_time_fires_once_through_both_changes_of_daylight_saving_time() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    # Clocks go back on 25 October 2026 (03:00 CEST -> 02:00 CET): 02:30 happens twice.
    t = datetime(2026, 10, 24, 12, 0, tzinfo=UTC)
    ticks = []
    for _ in range(3):
        t = next_after("30 2 * * *", berlin, t)
        ticks.append(t)
    assert ticks == [
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),  # 02:30 CEST, the first one
        datetime(2026, 10, 26, 1, 30, tzinfo=UTC),  # 02:30 CET
        datetime(2026, 10, 27, 1, 30, tzinfo=UTC),
    ]
    # Clocks go forward on 29 March 2026 (02:00 CET -> 03:00 CEST): 02:30 never happens;
    # that day's tick comes at the first time after it.
    spring = next_after("30 2 * * *", berlin, datetime(2026, 3, 28, 12, 0, tzinfo=UTC))
    assert spring == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 03:00 CEST
    # An hourly schedule in UTC is unaffected by anyone's daylight saving.
    utc = ZoneInfo("UTC")
    now = datetime(2026, 10, 25, 1, 45, tzinfo=UTC)
    assert latest_at_or_before("0 * * * *", utc, now) == datetime(2026, 10, 25, 1, 0, tzinfo=UTC)


def test_a_worker_fires_due_schedules_in_its_maintenance_pass(
    make_runtime: MakeRuntime, db_url: str
) -> None:
    rt = make_runtime(lease_seconds=1.0)  # maintenance every quarter of a lease
    rt.schedule("tick", cron="* * * * *", request=say())
    overdue(db_url, "tick", 1)
    worker = rt.worker(concurrency=1, poll_interval=0.05)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not rt.runs(status=tenure.RunStatus.COMPLETED):
            assert time.monotonic() < deadline, "the worker fired nothing"
            time.sleep(0.05)
    finally:
        worker.stop()
        thread.join()
    (schedule,) = rt.schedules()
    assert schedule.fired == 1
