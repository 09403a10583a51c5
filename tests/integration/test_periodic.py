"""Periodic schedules: slots, declaration checks, exactly-once enqueue, the worker, the admin."""

from __future__ import annotations

import logging
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError, connection, transaction
from django.test import Client
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries

from django_dbqueue import InvalidJob, dashboard, periodic
from django_dbqueue.models import Job, PeriodicSlot
from django_dbqueue.periodic import Schedule, Scheduler, enqueue_due
from django_dbqueue.worker.worker import Worker, WorkerOptions
from tests.jobs.periodic_tasks import nightly, report, tick
from tests.testapp.models import Execution
from tests.waiting import wait_until

UTC = dt_timezone.utc
NOON = datetime(2025, 3, 3, 12, 0, tzinfo=UTC)
WAIT = 30.0
CHANGELIST = "/admin/django_dbqueue/job/"


@pytest.fixture(autouse=True)
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Schedule]:
    """An empty schedule registry for each test, so no schedule outlives its test."""
    fresh: dict[str, Schedule] = {}
    monkeypatch.setattr(periodic, "REGISTRY", fresh)
    return fresh


def at(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def every(cron: str, task: Any = report, **options: Any) -> Schedule:
    """Declare ``cron`` on ``task`` as ``@periodic`` would, and return its schedule."""
    periodic.periodic(cron, **options)(task)
    return periodic.REGISTRY[task.name]


def record_slot(schedule: Schedule, slot: datetime) -> None:
    PeriodicSlot.objects.update_or_create(
        task=schedule.name, defaults={"last_slot": periodic.to_epoch(slot)}
    )


def slot_of(job: Job) -> str:
    assert job.dedupe_key is not None
    return job.dedupe_key.removeprefix("periodic:")


# --- slots (no database) ---------------------------------------------------------------------


class TestSlots:
    def test_slot_is_the_latest_cron_time_at_or_before_now(self) -> None:
        schedule = every("*/5 * * * *")
        assert schedule.slot_at(at(2025, 3, 3, 12, 5)) == at(2025, 3, 3, 12, 5)
        assert schedule.slot_at(at(2025, 3, 3, 12, 5) + timedelta(microseconds=1)) == at(
            2025, 3, 3, 12, 5
        )
        assert schedule.slot_at(at(2025, 3, 3, 12, 5) - timedelta(microseconds=1)) == at(
            2025, 3, 3, 12, 0
        )

    def test_next_run_is_strictly_after_the_moment(self) -> None:
        schedule = every("*/5 * * * *")
        assert schedule.next_after(at(2025, 3, 3, 12, 5)) == at(2025, 3, 3, 12, 10)
        assert schedule.next_after(at(2025, 3, 3, 12, 4, 59)) == at(2025, 3, 3, 12, 5)

    def test_cron_times_are_wall_clock_times_in_the_schedule_time_zone(self) -> None:
        schedule = every("0 9 * * *", timezone="Europe/Paris")
        assert schedule.slot_at(at(2025, 1, 15, 10)) == at(2025, 1, 15, 8)  # CET, UTC+1
        assert schedule.slot_at(at(2025, 7, 15, 10)) == at(2025, 7, 15, 7)  # CEST, UTC+2
        assert schedule.timezone_name == "Europe/Paris"

    def test_a_sixth_field_counts_seconds(self) -> None:
        schedule = every("* * * * * */2")
        assert schedule.slot_at(at(2025, 3, 3, 12, 0, 3) + timedelta(milliseconds=500)) == at(
            2025, 3, 3, 12, 0, 2
        )
        assert schedule.next_after(at(2025, 3, 3, 12, 0, 2)) == at(2025, 3, 3, 12, 0, 4)

    def test_slots_keep_their_pace_through_the_hour_a_dst_fall_back_repeats(self) -> None:
        # Paris, 2024-10-27: 03:00 CEST becomes 02:00 CET at 01:00 UTC.
        schedule = every("*/30 * * * *", timezone="Europe/Paris")
        start = at(2024, 10, 26, 23)
        seen = [schedule.slot_at(start + timedelta(minutes=m)) for m in range(4 * 60)]
        assert seen == sorted(seen)
        assert sorted(set(seen)) == [start + timedelta(minutes=30 * n) for n in range(8)]

    def test_a_repeated_wall_clock_time_runs_twice_and_a_skipped_one_right_after_the_gap(
        self,
    ) -> None:
        schedule = every("30 2 * * *", timezone="Europe/Paris")
        # 02:30 happens twice on 2024-10-27: 00:30 UTC (CEST) and 01:30 UTC (CET).
        assert schedule.next_after(at(2024, 10, 27, 0)) == at(2024, 10, 27, 0, 30)
        assert schedule.next_after(at(2024, 10, 27, 0, 30)) == at(2024, 10, 27, 1, 30)
        assert schedule.slot_at(at(2024, 10, 27, 1, 45)) == at(2024, 10, 27, 1, 30)
        # 02:30 does not exist on 2024-03-31: the slot is 03:00 CEST, 01:00 UTC.
        assert schedule.slot_at(at(2024, 3, 31, 5)) == at(2024, 3, 31, 1)


# --- declaring (no database) -----------------------------------------------------------------


class TestDeclaring:
    def test_periodic_registers_the_schedule_under_the_task_name_and_returns_the_task(
        self, registry: dict[str, Schedule]
    ) -> None:
        decorated = periodic.periodic(
            "0 3 * * *", queue="mail", timezone="Europe/Paris", args=("us",), kwargs={"full": True}
        )(report)
        assert decorated is report
        schedule = registry["tests.jobs.periodic_tasks.report"]
        assert (schedule.task, schedule.cron, schedule.timezone_name) == (
            report,
            "0 3 * * *",
            "Europe/Paris",
        )
        assert (schedule.queue, schedule.args, schedule.kwargs) == ("mail", ("us",), {"full": True})
        assert periodic.schedules() == [schedule]

    def test_timezone_defaults_to_utc(self) -> None:
        assert every("0 3 * * *").timezone_name == "UTC"

    @pytest.mark.parametrize(
        ("cron", "reason"),
        [
            ("every five minutes", "not a cron expression"),
            ("61 * * * *", "not a cron expression"),
            ("* * * *", "not a cron expression"),
            ("0 0 31 2 *", "not a cron expression that fires"),
            ("H * * * *", "not a cron expression"),
            ("0 0 1 1 * 0 2030", "year field"),
            (5, "must be a string"),
        ],
    )
    def test_a_bad_cron_expression_is_refused_at_declaration(self, cron: Any, reason: str) -> None:
        with pytest.raises(InvalidJob, match=reason) as info:
            periodic.periodic(cron)(report)
        assert "tests.jobs.periodic_tasks.report" in str(info.value)
        assert periodic.schedules() == []

    @pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "", "../etc/passwd", 2])
    def test_an_unknown_time_zone_is_refused_at_declaration(self, zone: Any) -> None:
        with pytest.raises(InvalidJob, match="not a known time zone"):
            periodic.periodic("0 3 * * *", timezone=zone)(report)

    def test_a_bad_queue_name_is_refused_at_declaration(self) -> None:
        with pytest.raises(InvalidJob, match="Queue name"):
            periodic.periodic("0 3 * * *", queue="no spaces")(report)

    def test_arguments_must_fit_the_function_and_be_json(self) -> None:
        with pytest.raises(InvalidJob, match="do not fit"):
            periodic.periodic("0 3 * * *", kwargs={"colour": "red"})(report)
        with pytest.raises(InvalidJob, match="not JSON-serializable"):
            periodic.periodic("0 3 * * *", args=(object(),))(report)

    def test_periodic_goes_above_task(self) -> None:
        with pytest.raises(InvalidJob, match="put @periodic"):
            periodic.periodic("0 3 * * *")(report.func)  # type: ignore[type-var]

    def test_a_task_takes_one_schedule_but_may_declare_the_same_one_again(self) -> None:
        every("0 3 * * *", timezone="Europe/Paris")
        every("0 3 * * *", timezone="Europe/Paris")  # the module imported again
        with pytest.raises(InvalidJob, match="takes one schedule"):
            periodic.periodic("0 4 * * *")(report)
        assert [schedule.cron for schedule in periodic.schedules()] == ["0 3 * * *"]

    @pytest.mark.django_db
    def test_discover_imports_every_installed_apps_tasks_module(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
    ) -> None:
        app = tmp_path / "periodicdemo"
        app.mkdir()
        (app / "__init__.py").write_text("")
        (app / "tasks.py").write_text(
            "from django_dbqueue import task\n"
            "from django_dbqueue.periodic import periodic\n\n\n"
            '@periodic("0 3 * * *", timezone="Europe/Paris")\n'
            "@task\n"
            "def cleanup() -> None: ...\n"
        )
        monkeypatch.syspath_prepend(tmp_path)
        monkeypatch.delitem(sys.modules, "periodicdemo", raising=False)
        monkeypatch.delitem(sys.modules, "periodicdemo.tasks", raising=False)
        settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "periodicdemo"]
        try:
            found = periodic.discover()
        finally:
            sys.modules.pop("periodicdemo.tasks", None)
            sys.modules.pop("periodicdemo", None)
        assert [(schedule.name, schedule.cron) for schedule in found] == [
            ("periodicdemo.tasks.cleanup", "0 3 * * *")
        ]


# --- enqueueing: one job per slot ------------------------------------------------------------


@pytest.mark.django_db
class TestEnqueueDue:
    def test_first_sight_records_the_latest_slot_without_enqueueing_it(self) -> None:
        schedule = every("*/5 * * * *")
        assert enqueue_due(NOON + timedelta(minutes=2)) == []
        assert not Job.objects.exists()
        assert PeriodicSlot.objects.get(task=schedule.name).slot == NOON

    def test_the_next_slot_after_first_sight_is_enqueued_once(self) -> None:
        every("*/5 * * * *")
        enqueue_due(NOON)
        (job,) = enqueue_due(NOON + timedelta(minutes=5, seconds=1))
        assert enqueue_due(NOON + timedelta(minutes=5, seconds=1)) == []
        assert enqueue_due(NOON + timedelta(minutes=9)) == []
        assert list(Job.objects.values_list("pk", flat=True)) == [job.pk]
        assert slot_of(job) == (NOON + timedelta(minutes=5)).isoformat()

    def test_the_job_has_the_schedules_queue_and_arguments_and_the_slot_as_dedupe_key(
        self,
    ) -> None:
        schedule = every("*/5 * * * *", queue="mail", args=("us",), kwargs={"full": True})
        record_slot(schedule, NOON - timedelta(minutes=5))
        (job,) = enqueue_due(NOON)
        job.refresh_from_db()
        assert (job.task, job.queue, job.args, job.kwargs) == (
            "tests.jobs.periodic_tasks.report",
            "mail",
            ["us"],
            {"full": True},
        )
        assert job.dedupe_key == "periodic:2025-03-03T12:00:00+00:00"

    def test_without_a_queue_the_job_goes_to_the_tasks_own_queue(self) -> None:
        schedule = every("*/5 * * * *", task=nightly)
        record_slot(schedule, NOON - timedelta(minutes=5))
        (job,) = enqueue_due(NOON)
        assert job.queue == "reports"

    def test_after_downtime_only_the_latest_missed_slot_is_enqueued(self) -> None:
        schedule = every("*/5 * * * *")
        record_slot(schedule, NOON - timedelta(days=3))
        (job,) = enqueue_due(NOON + timedelta(minutes=3))
        assert Job.objects.count() == 1
        assert slot_of(job) == NOON.isoformat()
        assert PeriodicSlot.objects.get(task=schedule.name).slot == NOON

    def test_a_purged_job_does_not_make_its_slot_run_again(self) -> None:
        every("*/5 * * * *")
        enqueue_due(NOON - timedelta(minutes=5))
        (job,) = enqueue_due(NOON)
        Job.objects.filter(pk=job.pk).delete()  # finished, then purged by retention
        assert Scheduler(periodic.schedules()).enqueue_due(NOON) == []  # a fresh process
        assert not Job.objects.exists()

    def test_a_clock_behind_the_recorded_slot_enqueues_nothing(self) -> None:
        schedule = every("*/5 * * * *")
        record_slot(schedule, NOON)
        assert enqueue_due(NOON - timedelta(minutes=7)) == []
        assert PeriodicSlot.objects.get(task=schedule.name).slot == NOON

    def test_the_slot_and_its_job_commit_or_roll_back_together(self) -> None:
        schedule = every("*/5 * * * *")
        record_slot(schedule, NOON - timedelta(minutes=5))

        def enqueue_then_fail() -> None:
            with transaction.atomic():
                assert len(enqueue_due(NOON)) == 1
                raise RuntimeError("the caller's transaction fails")

        with pytest.raises(RuntimeError):
            enqueue_then_fail()
        assert not Job.objects.exists()
        assert PeriodicSlot.objects.get(task=schedule.name).slot == NOON - timedelta(minutes=5)

    def test_a_job_that_cannot_be_enqueued_is_logged_and_the_others_still_are(
        self, settings: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        settings.DBQUEUE = {"QUEUES": ["default"]}
        blocked = every("*/5 * * * *", task=nightly)  # its queue "reports" is not served
        fine = every("*/5 * * * *")
        record_slot(blocked, NOON - timedelta(minutes=5))
        record_slot(fine, NOON - timedelta(minutes=5))
        with caplog.at_level(logging.ERROR, logger="django_dbqueue.periodic"):
            (job,) = enqueue_due(NOON)
        assert job.task == fine.name
        assert (
            "periodic task=tests.jobs.periodic_tasks.nightly slot=2025-03-03T12:00:00"
            in caplog.text
        )
        assert "not in DBQUEUE['QUEUES']" in caplog.text
        assert PeriodicSlot.objects.get(task=blocked.name).slot == NOON - timedelta(minutes=5)

    def test_a_scheduler_queries_again_only_once_a_new_slot_is_due(
        self, django_assert_num_queries: DjangoAssertNumQueries
    ) -> None:
        every("*/5 * * * *")
        scheduler = Scheduler(periodic.schedules())
        scheduler.enqueue_due(NOON)
        with django_assert_num_queries(0):
            assert scheduler.enqueue_due(NOON + timedelta(minutes=4, seconds=59)) == []
        assert len(scheduler.enqueue_due(NOON + timedelta(minutes=5))) == 1

    def test_now_must_be_aware(self) -> None:
        every("*/5 * * * *")
        with pytest.raises(ValueError, match="aware"):
            enqueue_due(datetime(2025, 3, 3, 12))  # naive: the value under test

    @pytest.mark.parametrize("use_tz", [False, True])
    def test_slots_are_stored_as_utc_epoch_seconds_whatever_use_tz_says(
        self, settings: Any, use_tz: bool
    ) -> None:
        settings.USE_TZ = use_tz
        settings.TIME_ZONE = "Europe/Paris"
        schedule = every("*/5 * * * *")
        enqueue_due(NOON)
        (job,) = enqueue_due(NOON + timedelta(minutes=5))
        assert slot_of(job) == (NOON + timedelta(minutes=5)).isoformat()
        stored = PeriodicSlot.objects.get(task=schedule.name)
        assert stored.last_slot == int((NOON + timedelta(minutes=5)).timestamp())
        assert stored.slot == NOON + timedelta(minutes=5)


@pytest.mark.django_db
class TestDaylightSavingTime:
    """Every slot is enqueued through both DST transitions of ``TIME_ZONE``, whatever ``USE_TZ``.

    Paris: on 2024-10-27 03:00 CEST falls back to 02:00 CET at 01:00 UTC, so local
    02:00-03:00 happens twice; on 2024-03-31 02:00 CET springs to 03:00 CEST at
    01:00 UTC. The worker looks every minute for two hours around the change.
    """

    FALL_BACK = at(2024, 10, 27, 1)
    SPRING_FORWARD = at(2024, 3, 31, 1)

    @staticmethod
    def enqueued_across(change: datetime) -> list[str]:
        """The slots enqueued by a look every minute from an hour before ``change`` to an
        hour after, each look a fresh process (nothing remembered but the database)."""
        start = change - timedelta(hours=1)
        jobs: list[Job] = []
        for minute in range(2 * 60 + 1):
            jobs += enqueue_due(start + timedelta(minutes=minute))
        return [slot_of(job) for job in jobs]

    @pytest.mark.parametrize("use_tz", [False, True], ids=["use_tz_off", "use_tz_on"])
    @pytest.mark.parametrize("change", [FALL_BACK, SPRING_FORWARD], ids=["fall_back", "spring"])
    def test_a_utc_schedule_enqueues_every_slot_across_a_change_of_time_zone_offset(
        self, settings: Any, use_tz: bool, change: datetime
    ) -> None:
        settings.USE_TZ = use_tz
        settings.TIME_ZONE = "Europe/Paris"
        every("*/15 * * * *")
        start = change - timedelta(hours=1)
        # First sight records the first slot; the other 8 of the two hours are enqueued.
        expected = [(start + timedelta(minutes=15 * n)).isoformat() for n in range(1, 9)]
        assert self.enqueued_across(change) == expected

    @pytest.mark.parametrize("use_tz", [False, True], ids=["use_tz_off", "use_tz_on"])
    def test_a_local_schedule_runs_at_both_times_of_the_repeated_hour(
        self, settings: Any, use_tz: bool
    ) -> None:
        settings.USE_TZ = use_tz
        settings.TIME_ZONE = "Europe/Paris"
        every("30 2 * * *", timezone="Europe/Paris")
        # 02:30 local is 00:30 UTC (CEST), then again 01:30 UTC (CET).
        assert self.enqueued_across(self.FALL_BACK) == [
            at(2024, 10, 27, 0, 30).isoformat(),
            at(2024, 10, 27, 1, 30).isoformat(),
        ]


# --- concurrency: many workers, one job per slot ---------------------------------------------


def race(callers: int, call: Callable[[], list[Job]]) -> list[Job]:
    """Run ``call`` on ``callers`` threads released together, each on its own connection."""
    start = threading.Barrier(callers, timeout=WAIT)
    results: list[Job] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        try:
            start.wait()
            jobs = call()
            with lock:
                results.extend(jobs)
        except BaseException as exc:  # noqa: BLE001 - reported to the test below.
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, daemon=True) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()
    assert errors == []
    return results


@pytest.mark.locking
@pytest.mark.django_db(transaction=True)
class TestConcurrentWorkers:
    def test_concurrent_callers_enqueue_each_slot_exactly_once(self) -> None:
        schedule = every("*/5 * * * *")
        record_slot(schedule, NOON - timedelta(minutes=5))
        slots = [NOON + timedelta(minutes=5 * n) for n in range(10)]
        for slot in slots:
            (job,) = race(8, lambda slot=slot: enqueue_due(slot + timedelta(seconds=30)))
            assert slot_of(job) == slot.isoformat()
        assert Job.objects.count() == len(slots)
        assert PeriodicSlot.objects.get(task=schedule.name).slot == slots[-1]

    def test_concurrent_first_sight_records_one_row_and_enqueues_nothing(self) -> None:
        schedule = every("*/5 * * * *")
        assert race(8, lambda: enqueue_due(NOON)) == []
        assert [(row.task, row.slot) for row in PeriodicSlot.objects.all()] == [
            (schedule.name, NOON)
        ]
        assert not Job.objects.exists()


# --- the worker schedules while it runs ------------------------------------------------------


@pytest.fixture
def running_worker() -> Iterator[Callable[..., Worker]]:
    """``running_worker(**options)`` runs a ``Worker`` on a thread until the test ends."""
    started: list[tuple[Worker, threading.Thread]] = []

    def start(**options: Any) -> Worker:
        worker = Worker(WorkerOptions(**options))
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        started.append((worker, thread))
        return worker

    yield start
    for worker, thread in started:
        worker.stop()
        thread.join(WAIT)
        assert not thread.is_alive()


@pytest.mark.django_db(transaction=True)
class TestWorker:
    def test_a_running_worker_enqueues_each_due_slot_once_and_runs_it(
        self, running_worker: Callable[..., Worker]
    ) -> None:
        every("* * * * * *", task=tick)
        worker = running_worker(poll_interval=0.1, concurrency=2)
        wait_until(
            lambda: Job.objects.succeeded().count() >= 2, WAIT, "two periodic jobs to succeed"
        )
        worker.stop()
        slots = [slot_of(job) for job in Job.objects.all()]
        assert len(slots) == len(set(slots))
        runs = Counter(Execution.objects.values_list("job_id", flat=True))
        assert set(runs.values()) == {1}

    def test_a_burst_worker_schedules_nothing(self) -> None:
        every("* * * * * *", task=tick)
        worker = Worker(WorkerOptions(burst=True))
        assert worker.scheduler.schedules == []
        worker.run()
        assert not PeriodicSlot.objects.exists()

    def test_a_database_error_while_scheduling_is_logged_and_retried(
        self,
        running_worker: Callable[..., Worker],
        monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        every("* * * * * *", task=tick)
        real = Scheduler.enqueue_due
        failures = iter([OperationalError("server closed the connection unexpectedly")])

        def flaky(self: Scheduler, now: datetime | None = None) -> list[Job]:
            for failure in failures:
                raise failure
            return real(self, now)

        monkeypatch.setattr(Scheduler, "enqueue_due", flaky)
        with caplog.at_level(logging.WARNING, logger="django_dbqueue"):
            running_worker(poll_interval=0.1)
            wait_until(lambda: Job.objects.exists(), WAIT, "a periodic job after the error")
        assert (
            "periodic scheduling failed (connection lost), retrying until it recovers"
            in caplog.text
        )


# --- the admin's health view -----------------------------------------------------------------


class ScheduleTable(HTMLParser):
    """The cells of each ``tr.dbqueue-schedule`` row, by task name."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: dict[str, list[str]] = {}
        self.classes: dict[str, list[str]] = {}
        self._row: list[str] | None = None
        self._row_classes: list[str] = []
        self._in_cell = False
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "tr" and "dbqueue-schedule" in classes:
            self._row, self._row_classes = [], classes
        elif tag == "td" and self._row is not None:
            self._row.append("")
            self._in_cell = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._in_cell = False
        elif tag == "tr" and self._row is not None:
            self.rows[self._row[0]] = self._row
            self.classes[self._row[0]] = self._row_classes
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._in_cell and self._row is not None:
            self._row[-1] += data.strip()


@pytest.mark.django_db
class TestHealthView:
    def test_context_lists_each_schedule_with_its_last_slot_and_next_run(self) -> None:
        recorded = every("*/5 * * * *", task=nightly, timezone="Europe/Paris")
        unseen = every("0 3 * * *", queue="mail")
        record_slot(recorded, NOON)
        rows = dashboard.context(NOON + timedelta(minutes=2))["periodic_schedules"]
        assert [row.schedule for row in rows] == [recorded, unseen]
        first, second = rows
        assert (first.queue, first.last_slot, first.next_run, first.overdue) == (
            "reports",
            NOON,
            NOON + timedelta(minutes=5),
            False,
        )
        assert (second.queue, second.last_slot, second.next_run, second.overdue) == (
            "mail",
            None,
            at(2025, 3, 4, 3),
            True,
        )

    def test_a_slot_due_for_over_a_minute_but_not_recorded_flags_the_schedule(self) -> None:
        schedule = every("*/5 * * * *")
        record_slot(schedule, NOON - timedelta(minutes=5))
        (fresh,) = dashboard.context(NOON + timedelta(seconds=30))["periodic_schedules"]
        (stale,) = dashboard.context(NOON + timedelta(seconds=90))["periodic_schedules"]
        assert (fresh.overdue, stale.overdue) == (False, True)

    def test_no_schedules_cost_no_query(
        self, django_assert_num_queries: DjangoAssertNumQueries
    ) -> None:
        with django_assert_num_queries(0):
            assert dashboard.schedule_rows(NOON) == []

    def test_the_job_list_shows_the_periodic_schedules(
        self, admin_client: Client, settings: Any
    ) -> None:
        settings.TIME_ZONE = "UTC"
        now = timezone.now()
        # Yearly, so no slot passes between computing the expected cells and the request.
        recorded = every("0 0 1 1 *", task=nightly, timezone="Europe/Paris")
        every("0 3 * * *", queue="mail")
        record_slot(recorded, recorded.slot_at(now))
        response = admin_client.get(CHANGELIST)
        assert response.status_code == 200
        table = ScheduleTable(response.content.decode())
        name, cron, zone, queue, last, upcoming = table.rows["tests.jobs.periodic_tasks.nightly"]
        assert (cron, zone, queue) == ("0 0 1 1 *", "Europe/Paris", "reports")
        assert last == f"{recorded.slot_at(now):%Y-%m-%d %H:%M:%S} UTC"
        assert upcoming.startswith(f"{recorded.next_after(now):%Y-%m-%d %H:%M:%S} UTC (in ")
        assert "dbqueue-overdue" not in table.classes[name]
        unseen = table.rows["tests.jobs.periodic_tasks.report"]
        assert unseen[1:4] == ["0 3 * * *", "UTC", "mail"]
        assert "no worker has seen this schedule yet" in unseen[4]
        assert "dbqueue-overdue" in table.classes["tests.jobs.periodic_tasks.report"]
