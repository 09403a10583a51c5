"""``queue_stats`` and ``manage.py dbqueue_stats``: table, ``--json`` and ``--watch``."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from io import StringIO
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries
from pytest_django.fixtures import Settings

from django_dbqueue import stats as stats_module
from django_dbqueue.management.commands import dbqueue_stats
from django_dbqueue.management.commands.dbqueue_stats import humanise
from django_dbqueue.models import Dependency, EdgeState, Job, JobState
from django_dbqueue.stats import as_json, queue_stats
from django_dbqueue.table_health import table_health
from tests.factories import JobFactory
from tests.stats_sections import without_table, without_table_section

pytestmark = pytest.mark.django_db

EXPECTED = {
    "queues": {
        "default": {
            "waiting": 2,
            "ready": 2,
            "scheduled": 1,
            "running": 2,
            "expiring": 1,
            "dead": 1,
            "blocked": 1,
            "succeeded_last_hour": 1,
            "oldest_ready_age_seconds": 600.0,
            "paused": False,
            "paused_until": None,
        },
        "mail": {
            "waiting": 0,
            "ready": 1,
            "scheduled": 0,
            "running": 0,
            "expiring": 0,
            "dead": 2,
            "blocked": 0,
            "succeeded_last_hour": 1,
            "oldest_ready_age_seconds": 30.0,
            "paused": False,
            "paused_until": None,
        },
    },
    "limits": [],
}


@pytest.fixture
def frozen_now(monkeypatch: pytest.MonkeyPatch) -> datetime:
    """``queue_stats()`` sees this instant, so ages compare exactly between calls."""
    now = timezone.now()
    monkeypatch.setattr(stats_module, "timezone", SimpleNamespace(now=lambda: now))
    return now


@pytest.fixture
def mixed_queues(frozen_now: datetime) -> datetime:
    """Jobs of every kind in two queues; the numbers are ``EXPECTED``."""
    now = frozen_now
    JobFactory(run_at=now - timedelta(minutes=10))  # ready, the oldest due
    JobFactory(run_at=now - timedelta(minutes=1))  # ready
    JobFactory(run_at=now + timedelta(hours=1))  # scheduled
    JobFactory(running=True, lease_until=now + timedelta(seconds=10))  # expiring
    JobFactory(running=True, lease_until=now + timedelta(minutes=5))  # running, not expiring
    dead = JobFactory(dead=True)
    JobFactory(succeeded=True, finished_at=now - timedelta(minutes=5))
    JobFactory(succeeded=True, finished_at=now - timedelta(hours=2))  # outside the hour
    JobFactory(cancelled=True)  # counted nowhere
    JobFactory.create_batch(2, state=JobState.WAITING, pending_dependencies=1)  # waiting
    held_by(JobFactory(cancelled=True), dead, dead)  # blocked, once for its two failed edges
    held_by(JobFactory(queue="mail", cancelled=True), dead, state=EdgeState.PENDING)  # not blocked
    JobFactory(queue="mail", run_at=now - timedelta(seconds=30))
    JobFactory.create_batch(2, queue="mail", dead=True)
    JobFactory(queue="mail", succeeded=True, finished_at=now - timedelta(minutes=30))
    JobFactory(queue="old", succeeded=True, finished_at=now - timedelta(days=1))  # not listed
    return now


def held_by(job: Job, *dependencies: Job, state: str = EdgeState.FAILED) -> Job:
    """``job`` with one edge in ``state`` to each of ``dependencies`` (as ``after=`` writes)."""
    Dependency.objects.bulk_create(
        Dependency(job=job, depends_on=each, position=n, on_failure="cancel", state=state)
        for n, each in enumerate(dependencies)
    )
    return job


def run(*args: str) -> str:
    out = StringIO()
    call_command("dbqueue_stats", *args, stdout=out)
    return out.getvalue()


#: The numeric columns of the table, in order (then the oldest ready job's age).
NUMBERS = (
    "waiting",
    "ready",
    "scheduled",
    "running",
    "expiring",
    "dead",
    "blocked",
    "succeeded_last_hour",
)


def table_rows(output: str) -> dict[str, list[str]]:
    """The first table's rows by queue name, as cells (the ``!`` marker is its own cell)."""
    header, *lines = output.strip().splitlines()
    assert header.split()[:3] == ["queue", "waiting", "ready"]
    rows: dict[str, list[str]] = {}
    for line in lines:
        if not line.strip() or line.startswith(f"{dbqueue_stats.STALE} "):
            break  # the footnote, or the end of this frame
        name, *cells = line.split()
        rows[name] = cells
    return rows


def test_json_is_as_json_of_queue_stats(mixed_queues: datetime) -> None:
    assert (
        without_table(json.loads(run("--json")))
        == without_table(as_json(queue_stats(), table=table_health()))
        == EXPECTED
    )


def test_table_rows_show_the_same_numbers_as_json(mixed_queues: datetime) -> None:
    rows = table_rows(run())
    queues = json.loads(run("--json"))["queues"]
    assert set(rows) == set(queues) == {"default", "mail"}
    for name, values in queues.items():
        numbers = [values[key] for key in NUMBERS]
        assert rows[name][:8] == [str(number) for number in numbers]
        assert rows[name][8] == humanise(values["oldest_ready_age_seconds"])
    assert rows["default"][8] == "10m00s"
    assert rows["mail"][8] == "30s"


def test_stale_marker_flags_only_queues_whose_oldest_ready_job_passed_the_warning(
    mixed_queues: datetime, settings: Settings
) -> None:
    settings.DBQUEUE = {"OLDEST_READY_WARNING": 300}
    output = run()
    rows = table_rows(output)
    assert rows["default"][9:] == ["!"]  # 10 minutes > 5 minutes
    assert rows["mail"][9:] == []  # 30 seconds
    assert "! the oldest ready job has waited longer than OLDEST_READY_WARNING (5m00s)" in output


def test_no_stale_marker_or_footnote_below_the_warning(
    mixed_queues: datetime, settings: Settings
) -> None:
    settings.DBQUEUE = {"OLDEST_READY_WARNING": 3600}
    output = run()
    assert "!" not in output
    assert all(len(cells) == 9 for cells in table_rows(output).values())


def test_queue_without_due_jobs_shows_a_dash_for_oldest_age(frozen_now: datetime) -> None:
    JobFactory(queue="later", run_at=frozen_now + timedelta(minutes=5))
    assert table_rows(run())["later"] == ["0", "0", "1", "0", "0", "0", "0", "0", "-"]
    assert json.loads(run("--json"))["queues"]["later"]["oldest_ready_age_seconds"] is None


def test_empty_database_prints_a_friendly_line_and_empty_json() -> None:
    assert without_table_section(run()).strip() == (
        "No queue has waiting, ready, running, dead, blocked or recently succeeded jobs."
    )
    assert without_table(json.loads(run("--json"))) == {"queues": {}, "limits": []}


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0.4, "0s"),
        (59.9, "59s"),
        (252, "4m12s"),
        (3600, "1h00m"),
        (2 * 3600 + 5 * 60 + 7, "2h05m"),
        (3 * 86400 + 4 * 3600, "3d04h"),
    ],
)
def test_humanise_ages(seconds: float | None, text: str) -> None:
    assert humanise(seconds) == text


@pytest.mark.parametrize("every", ["0", "-1"])
def test_watch_needs_a_positive_interval(every: str) -> None:
    with pytest.raises(CommandError, match="--watch: must be a number of seconds from above 0"):
        run("--watch", every)


def fake_sleep(
    monkeypatch: pytest.MonkeyPatch, between: Callable[[], Any], naps: list[float]
) -> None:
    """The command's sleep runs ``between`` once, then acts as Ctrl-C on the next call."""

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) > 1:
            raise KeyboardInterrupt
        between()

    monkeypatch.setattr(dbqueue_stats.time, "sleep", sleep)


def test_watch_redraws_with_fresh_numbers_until_ctrl_c(
    mixed_queues: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    naps: list[float] = []
    fake_sleep(monkeypatch, lambda: JobFactory(queue="late", dead=True), naps)
    output = run("--watch", "2.5")  # returns normally on Ctrl-C: exit status 0
    frames = output.split("every 2.5s, Ctrl-C to stop\n")[1:]
    assert naps == [2.5, 2.5]
    assert len(frames) == 2
    assert set(table_rows(frames[0])) == {"default", "mail"}
    assert table_rows(frames[1])["late"][:6] == ["0", "0", "0", "0", "0", "1"]
    assert "\x1b[2J" not in output  # not a terminal: no screen clearing


def test_watch_json_prints_one_document_per_line(
    mixed_queues: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_sleep(monkeypatch, lambda: None, [])
    lines = run("--json", "--watch", "1").splitlines()
    assert [without_table(json.loads(line)) for line in lines] == [EXPECTED, EXPECTED]


@pytest.mark.django_db(transaction=True)  # the error closes the connection
def test_watch_survives_a_database_error_and_shows_it(
    mixed_queues: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures = iter([OperationalError("server closed the connection unexpectedly")])

    def flaky_stats() -> dict[str, stats_module.QueueStats]:
        for exc in failures:
            raise exc
        return queue_stats()

    monkeypatch.setattr(dbqueue_stats, "queue_stats", flaky_stats)
    fake_sleep(monkeypatch, lambda: None, [])
    out, err = StringIO(), StringIO()
    call_command("dbqueue_stats", "--watch", "1", stdout=out, stderr=err)
    assert "database error, retrying in 1s: server closed the connection" in err.getvalue()
    assert set(table_rows(out.getvalue().split("Ctrl-C to stop\n")[1])) == {"default", "mail"}


@pytest.mark.parametrize("queues", [1, 6])
def test_queue_stats_is_three_queries_whatever_the_number_of_queues(
    queues: int, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    now = timezone.now()
    for index in range(queues):
        JobFactory(queue=f"q{index}")
        JobFactory(queue=f"q{index}", running=True)
        dead = JobFactory(queue=f"q{index}", dead=True)
        JobFactory(queue=f"q{index}", succeeded=True, finished_at=now)
        JobFactory(queue=f"q{index}", state=JobState.WAITING, pending_dependencies=1)
        held_by(JobFactory(queue=f"q{index}", cancelled=True), dead)
    with django_assert_num_queries(3):  # the jobs grouped, the dead jobs, the pauses
        stats = queue_stats()
    assert len(stats) == queues
    assert {(queue.waiting, queue.blocked) for queue in stats.values()} == {(1, 1)}
