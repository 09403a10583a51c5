"""The operator commands: ``dbqueue_requeue`` and ``dbqueue_cancel`` (selectors, --dry-run,
counts, mistakes) and ``dbqueue_purge``."""

from __future__ import annotations

from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from pytest_django import Settings

from django_dbqueue.models import Job, JobState
from django_dbqueue.testing import run_jobs
from tests.factories import JobFactory
from tests.jobs import tasks

pytestmark = pytest.mark.django_db


def run(command: str, *args: str) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue().strip()


def states() -> dict[int, str]:
    return dict(Job.objects.values_list("pk", "state"))


def dead(**fields: object) -> Job:
    return JobFactory(dead=True, **fields)  # type: ignore[no-any-return]


class TestRequeueCommand:
    def test_each_selector_narrows_the_dead_jobs_requeued(self) -> None:
        hit = dead(queue="mail", task="tests.jobs.tasks.flaky", last_error_code="Timeout")
        misses = [
            dead(queue="default", task="tests.jobs.tasks.flaky", last_error_code="Timeout"),
            dead(queue="mail", task="tests.jobs.tasks.noop", last_error_code="Timeout"),
            dead(queue="mail", task="tests.jobs.tasks.flaky", last_error_code="ValueError"),
            dead(
                queue="mail",
                task="tests.jobs.tasks.flaky",
                last_error_code="Timeout",
                finished_at=timezone.now() - timedelta(days=2),
            ),
        ]
        output = run(
            "dbqueue_requeue",
            "--queue=mail",
            "--task=tests.jobs.tasks.flaky",
            "--error-code=Timeout",
            "--since=1d",
            "--extra-attempts=3",
        )
        assert output == "requeued 1 dead job(s) with 3 more attempt(s)"
        assert states()[hit.pk] == JobState.READY
        assert Job.objects.get(pk=hit.pk).max_attempts == 8
        assert {states()[job.pk] for job in misses} == {JobState.DEAD}

    def test_ids_select_only_dead_jobs(self) -> None:
        first, second, ready = dead(), dead(), JobFactory()
        output = run("dbqueue_requeue", f"--ids={first.pk},{ready.pk}", f"--ids={second.pk}")
        assert output == "requeued 2 dead job(s) with 1 more attempt(s)"
        assert states() == {first.pk: "ready", second.pk: "ready", ready.pk: "ready"}

    def test_dry_run_counts_and_changes_nothing(self) -> None:
        jobs = [dead(queue="mail") for _ in range(3)]
        assert run("dbqueue_requeue", "--queue=mail", "--dry-run") == (
            "would requeue 3 dead job(s) with 1 more attempt(s)"
        )
        assert {states()[job.pk] for job in jobs} == {JobState.DEAD}

    def test_jobs_sharing_a_dedupe_key_requeue_one_and_name_the_others(self) -> None:
        first, second, third = (dead(dedupe_key="invoice:9") for _ in range(3))
        output = run("dbqueue_requeue", "--task=tests.jobs.tasks.noop").splitlines()
        assert output == [
            "requeued 1 dead job(s) with 1 more attempt(s)",
            "skipped 2 whose task and dedupe key another job holds (active, or requeued first): "
            f"{second.pk}, {third.pk}",
        ]
        assert states()[first.pk] == JobState.READY

    def test_dry_run_reports_what_the_real_run_does_skips_included(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr("django_dbqueue.triage.BATCH", 4)  # keys shared across batches too
        JobFactory(queue="other", dedupe_key="held")  # an active job holds this key
        for key in ["a", None, "a", "b", None, "a", "held", "b", None]:
            dead(queue="mail", dedupe_key=key)
        before = states()

        dry_run = run("dbqueue_requeue", "--queue=mail", "--dry-run")
        assert states() == before
        real_run = run("dbqueue_requeue", "--queue=mail")

        assert real_run.splitlines()[0] == "requeued 5 dead job(s) with 1 more attempt(s)"
        assert dry_run == real_run.replace("requeued", "would requeue", 1).replace(
            "skipped", "would skip", 1
        )
        assert "would skip 4 whose task and dedupe key" in dry_run

    def test_a_budget_at_the_column_limit_stays_there(self) -> None:
        limit = 2**31 - 1
        job = dead(attempts=limit, max_attempts=limit)
        assert run("dbqueue_requeue", f"--ids={job.pk}", "--extra-attempts=1000") == (
            "requeued 1 dead job(s) with 1000 more attempt(s)"
        )
        job.refresh_from_db()
        assert (job.state, job.max_attempts) == (JobState.READY, limit)

    def test_works_in_batches_past_the_batch_size(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr("django_dbqueue.triage.BATCH", 4)
        jobs = JobFactory.create_batch(11, dead=True, queue="bulk")
        assert run("dbqueue_requeue", "--queue=bulk") == (
            "requeued 11 dead job(s) with 1 more attempt(s)"
        )
        assert {states()[job.pk] for job in jobs} == {JobState.READY}

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            ((), "Name the jobs: pass at least one of --ids"),
            (("--ids=1;2",), "is not a list of job ids"),
            (("--since=yesterday",), "is neither an age nor a date"),
            (
                ("--queue=mail", "--extra-attempts=0"),
                "argument --extra-attempts: must be a whole number from 1 to 1000, not 0",
            ),
        ],
    )
    def test_mistakes_are_command_errors_that_change_nothing(
        self, args: tuple[str, ...], message: str
    ) -> None:
        job = dead(queue="mail")
        with pytest.raises(CommandError, match=message):
            run("dbqueue_requeue", *args)
        assert states() == {job.pk: JobState.DEAD}

    def test_since_without_use_tz_is_read_in_the_current_time_zone(
        self, settings: Settings
    ) -> None:
        settings.USE_TZ = False
        settings.TIME_ZONE = "Europe/Paris"
        recent = dead(finished_at=datetime(2025, 6, 1, 10, 0))
        early = dead(finished_at=datetime(2025, 6, 1, 8, 0))  # 06:00 UTC
        assert run("dbqueue_requeue", "--since=2025-06-01T09:00") == (
            "requeued 1 dead job(s) with 1 more attempt(s)"
        )
        assert states() == {recent.pk: JobState.READY, early.pk: JobState.DEAD}
        with pytest.raises(CommandError, match="No dead job matches"):
            run("dbqueue_requeue", "--since=2025-06-01T06:30:00+00:00")  # 08:30 in Paris
        assert run("dbqueue_requeue", "--since=2025-06-01T05:30:00+00:00") == (
            "requeued 1 dead job(s) with 1 more attempt(s)"
        )


def test_requeue_says_how_many_workflow_jobs_wait_again() -> None:
    failed = tasks.permanent.enqueue()
    then = tasks.noop.using(after=[failed]).enqueue()
    run_jobs()

    assert run("dbqueue_requeue", f"--ids={failed.pk}") == (
        "requeued 1 dead job(s) with 1 more attempt(s)\n"
        "1 job(s) their failure had cancelled wait for them again"
    )
    assert states()[then.pk] == JobState.WAITING


class TestCancelCommand:
    def test_cancels_ready_jobs_and_asks_running_ones_to_stop(self) -> None:
        ready = JobFactory(queue="mail")
        running = JobFactory(queue="mail", running=True)
        finished = JobFactory(queue="mail", succeeded=True)
        elsewhere = JobFactory(queue="default")
        output = run("dbqueue_cancel", "--queue=mail")
        assert output == "cancelled 1 ready or waiting job(s); asked 1 running job(s) to stop"
        assert states() == {
            ready.pk: JobState.CANCELLED,
            running.pk: JobState.RUNNING,
            finished.pk: JobState.SUCCEEDED,
            elsewhere.pk: JobState.READY,
        }
        marked = Job.objects.filter(cancel_requested_at__isnull=False)
        assert list(marked.values_list("pk", flat=True)) == [running.pk]

    def test_since_selects_jobs_enqueued_since(self) -> None:
        old = JobFactory(created_at=timezone.now() - timedelta(hours=3))
        new = JobFactory()
        assert run("dbqueue_cancel", "--since=1h") == (
            "cancelled 1 ready or waiting job(s); asked 0 running job(s) to stop"
        )
        assert states() == {old.pk: JobState.READY, new.pk: JobState.CANCELLED}

    def test_dry_run_counts_and_changes_nothing(self) -> None:
        JobFactory(task="tests.jobs.tasks.flaky")
        JobFactory(task="tests.jobs.tasks.flaky", running=True)
        assert run("dbqueue_cancel", "--task=tests.jobs.tasks.flaky", "--dry-run") == (
            "would cancel 1 ready or waiting job(s) and ask 1 running job(s) to stop"
        )
        assert set(states().values()) == {JobState.READY, JobState.RUNNING}
        assert not Job.objects.filter(cancel_requested_at__isnull=False).exists()

    def test_no_selector_is_a_command_error(self) -> None:
        JobFactory()
        with pytest.raises(CommandError, match="Name the jobs"):
            run("dbqueue_cancel")
        assert set(states().values()) == {JobState.READY}

    def test_cancels_a_waiting_job_and_what_waits_for_it(self) -> None:
        first = tasks.noop.using(queue="default").enqueue()
        waiting = tasks.noop.using(queue="mail", after=[first]).enqueue()
        then = tasks.noop.using(queue="default", after=[waiting]).enqueue()

        assert run("dbqueue_cancel", "--queue=mail") == (
            "cancelled 1 ready or waiting job(s); asked 0 running job(s) to stop"
        )
        assert states() == {
            first.pk: JobState.READY,
            waiting.pk: JobState.CANCELLED,
            then.pk: JobState.CANCELLED,
        }

    def test_since_a_date_without_use_tz(self, settings: Settings) -> None:
        settings.USE_TZ = False
        JobFactory(created_at=datetime(2025, 1, 1))
        new = JobFactory(created_at=datetime(2025, 6, 2))
        assert run("dbqueue_cancel", "--since=2025-06-01") == (
            "cancelled 1 ready or waiting job(s); asked 0 running job(s) to stop"
        )
        assert states()[new.pk] == JobState.CANCELLED


class TestNothingMatched:
    """A selection that matches no job the command acts on says so, and exits 1."""

    @pytest.mark.parametrize(
        ("command", "kind"),
        [("dbqueue_requeue", "dead"), ("dbqueue_cancel", "ready, waiting or running")],
    )
    def test_a_task_that_matches_nothing_is_named_and_exits_1(
        self, command: str, kind: str
    ) -> None:
        JobFactory(succeeded=True, queue="mail")
        with pytest.raises(CommandError) as error:
            run(command, "--task=shop.tasks.typo", "--queue=mail")
        assert str(error.value) == (
            f"No {kind} job matches --task shop.tasks.typo, --queue mail "
            "(0 job(s) in any state); nothing was changed."
        )
        assert error.value.returncode == 1

    def test_jobs_in_other_states_are_counted(self) -> None:
        done = JobFactory(succeeded=True)
        with pytest.raises(CommandError, match=r"No dead job matches --ids \d+ \(1 job\(s\)"):
            run("dbqueue_requeue", f"--ids={done.pk}", "--dry-run")
        assert states() == {done.pk: JobState.SUCCEEDED}


#: Every numeric option of every command, out of range (or not a number), with the range
#: its error must name.
OUT_OF_RANGE = [
    ("runworkers", "--concurrency", "0", "from 1 to 1024"),
    ("runworkers", "--concurrency", "100000", "from 1 to 1024"),
    ("runworkers", "--processes", "-2", "from 1 to 1024"),
    ("runworkers", "--max-jobs", str(2**63), f"from 1 to {2**63 - 1}"),
    ("runworkers", "--poll-interval", "inf", "seconds from above 0 to 3153600000"),
    ("runworkers", "--poll-interval", "nan", "seconds from above 0"),
    ("runworkers", "--shutdown-timeout", "-1", "seconds from 0 to 3153600000"),
    ("runworkers", "--metrics-port", "65536", "from 1 to 65535"),
    ("dbqueue_stats", "--watch", "inf", "seconds from above 0"),
    ("dbqueue_stats", "--watch", "0", "seconds from above 0"),
    ("dbqueue_purge", "--batch-size", "100000000000000000000", "from 1 to 10000"),
    ("dbqueue_purge", "--batch-size", "1e20", "from 1 to 10000"),
    ("dbqueue_requeue", "--extra-attempts", "2147483647", "from 1 to 1000"),
    ("dbqueue_requeue", "--ids", str(2**63), f"from 1 to {2**63 - 1}"),
    ("dbqueue_requeue", "--since", "999999999d", "within 36500 days"),
    ("dbqueue_cancel", "--ids", f"5,{2**64}", f"from 1 to {2**63 - 1}"),
    ("dbqueue_cancel", "--since", "0001-01-01", "within 36500 days"),
]


@pytest.mark.parametrize(
    ("command", "option", "value", "bounds"),
    OUT_OF_RANGE,
    ids=[f"{command}{option}={value}"[:60] for command, option, value, _ in OUT_OF_RANGE],
)
def test_out_of_range_numbers_are_command_errors_naming_option_and_range(
    command: str, option: str, value: str, bounds: str
) -> None:
    ready, old_dead = JobFactory(queue="mail"), dead(queue="mail")
    old_dead.finished_at = timezone.now() - timedelta(days=30)
    old_dead.save()
    selector = ["--queue=mail"] if command in ("dbqueue_requeue", "dbqueue_cancel") else []
    with pytest.raises(CommandError) as error:
        # runworkers --burst: were the option accepted, it would run and end, not raise.
        run(command, *(["--burst"] if command == "runworkers" else []), *selector, option, value)
    message = str(error.value)
    assert message.startswith(f"Error: argument {option}:"), message
    assert value in message, message
    assert bounds in message, message
    assert states() == {ready.pk: JobState.READY, old_dead.pk: JobState.DEAD}


class TestPurge:
    def test_dry_run_counts_and_deletes_nothing(self) -> None:
        JobFactory(succeeded=True, finished_at=timezone.now() - timedelta(days=3))
        assert "would delete 1 finished job(s)" in run("dbqueue_purge", "--dry-run")
        assert Job.objects.count() == 1

    def test_purge_deletes_old_finished_jobs(self) -> None:
        JobFactory(succeeded=True, finished_at=timezone.now() - timedelta(days=3))
        JobFactory(state=JobState.READY)
        assert "deleted 1 finished job(s)" in run("dbqueue_purge", "--batch-size", "10")
        assert Job.objects.count() == 1

    def test_a_batch_size_below_one_is_a_command_error(self) -> None:
        with pytest.raises(CommandError, match="--batch-size"):
            run("dbqueue_purge", "--batch-size", "0")
