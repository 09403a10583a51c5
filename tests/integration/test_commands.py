"""The operator commands: ``dbqueue_requeue`` and ``dbqueue_cancel`` (selectors, --dry-run,
counts, mistakes) and ``dbqueue_purge``."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_dbqueue.models import Job, JobState
from tests.factories import JobFactory

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
        assert run("dbqueue_requeue", "--queue=mail", "--dry-run") == "would requeue 3 dead job(s)"
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
            (("--queue=mail", "--extra-attempts=0"), "--extra-attempts must be 1 or more"),
        ],
    )
    def test_mistakes_are_command_errors_that_change_nothing(
        self, args: tuple[str, ...], message: str
    ) -> None:
        job = dead(queue="mail")
        with pytest.raises(CommandError, match=message):
            run("dbqueue_requeue", *args)
        assert states() == {job.pk: JobState.DEAD}


class TestCancelCommand:
    def test_cancels_ready_jobs_and_asks_running_ones_to_stop(self) -> None:
        ready = JobFactory(queue="mail")
        running = JobFactory(queue="mail", running=True)
        finished = JobFactory(queue="mail", succeeded=True)
        elsewhere = JobFactory(queue="default")
        output = run("dbqueue_cancel", "--queue=mail")
        assert output == "cancelled 1 ready job(s); asked 1 running job(s) to stop"
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
            "cancelled 1 ready job(s); asked 0 running job(s) to stop"
        )
        assert states() == {old.pk: JobState.READY, new.pk: JobState.CANCELLED}

    def test_dry_run_counts_and_changes_nothing(self) -> None:
        JobFactory(task="tests.jobs.tasks.flaky")
        JobFactory(task="tests.jobs.tasks.flaky", running=True)
        assert run("dbqueue_cancel", "--task=tests.jobs.tasks.flaky", "--dry-run") == (
            "would cancel 1 ready job(s) and ask 1 running job(s) to stop"
        )
        assert set(states().values()) == {JobState.READY, JobState.RUNNING}
        assert not Job.objects.filter(cancel_requested_at__isnull=False).exists()

    def test_no_selector_is_a_command_error(self) -> None:
        JobFactory()
        with pytest.raises(CommandError, match="Name the jobs"):
            run("dbqueue_cancel")
        assert set(states().values()) == {JobState.READY}


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
