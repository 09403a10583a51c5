"""``django_dbqueue.contrib.sentry`` in a real ``runworkers`` process: Sentry initialised by
the settings, as a project does, and one event for a job that went dead after its retries."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from django_dbqueue.contrib import sentry
from django_dbqueue.models import Job, JobState
from tests.e2e.conftest import WorkerProcess
from tests.jobs import sentry_tasks, tasks
from tests.sentry_events import EventFile

StartWorker = Callable[..., WorkerProcess]


@pytest.mark.django_db(transaction=True)
def test_the_worker_reports_a_job_once_when_it_goes_dead_after_its_retries(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    failing = sentry_tasks.always_fails.enqueue("down")
    succeeding = tasks.noop.enqueue()
    capturing = sentry_tasks.captures_a_message.enqueue("from the task")
    events = EventFile(tmp_path / "sentry-events.jsonl")
    worker = start_worker(
        # Three attempts of the failing job, one each of the others.
        "--max-jobs", "5", "--concurrency", "1",
        settings={"MIDDLEWARE": ["django_dbqueue.contrib.sentry.SentryMiddleware"]},
        env={"SENTRY_EVENTS_FILE": str(events.path)},
    )  # fmt: skip
    assert worker.wait() == 0, worker.log()

    failed = Job.objects.get(pk=failing.pk)
    assert (failed.state, failed.attempts) == (JobState.DEAD, 3)
    assert Job.objects.get(pk=succeeding.pk).state == JobState.SUCCEEDED
    reports = [event for event in events.read() if event.get("message") != "from the task"]
    assert len(reports) == 1, reports
    (report,) = reports
    assert report["tags"] == {
        sentry.TASK: "tests.jobs.sentry_tasks.always_fails",
        sentry.QUEUE: "default",
        sentry.JOB_ID: str(failed.pk),
        sentry.ATTEMPT: "3",
        sentry.ERROR_CODE: "ValueError",
        sentry.OUTCOME: "dead",
    }
    assert report["exception"]["values"][-1]["value"] == "down"
    job_context = report["contexts"][sentry.CONTEXT]
    assert job_context["admin_url"] == f"/admin/django_dbqueue/job/{failed.pk}/change/"
    assert job_context["worker_id"] == failed.errors[-1]["worker"]

    (captured,) = [event for event in events.read() if event.get("message") == "from the task"]
    assert captured["tags"][sentry.JOB_ID] == str(capturing.pk)
    assert captured["tags"]["set_by_the_task"] == "from the task"
