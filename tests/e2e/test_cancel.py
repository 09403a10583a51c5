"""Cooperative cancel of running jobs with a real ``runworkers`` process.

An operator's ``request_cancel`` reaches the task through the worker's heartbeat
(the renew statement reports the mark): a task that honours it ends
``cancelled``; one that ignores it finishes, and the admin shows the mark.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client
from django.urls import reverse

from django_dbqueue import leases
from django_dbqueue.errors import CANCELLED
from django_dbqueue.models import Job, JobState
from tests.e2e.conftest import WorkerProcess, open_gate
from tests.jobs.e2e_tasks import ignores_cancel, stops_when_cancelled
from tests.testapp.models import Execution
from tests.waiting import wait_until

StartWorker = Callable[..., WorkerProcess]

e2e_db = pytest.mark.django_db(transaction=True)


def started(job: Job) -> bool:
    return Execution.objects.filter(job_id=job.pk).exists()


def state_of(job: Job) -> str:
    return str(Job.objects.values_list("state", flat=True).get(pk=job.pk))


@e2e_db
def test_a_task_polling_cancel_requested_ends_cancelled(start_worker: StartWorker) -> None:
    job = stops_when_cancelled.enqueue()
    worker = start_worker("--concurrency", "1")
    wait_until(lambda: started(job), what="the task to start")
    assert state_of(job) == JobState.RUNNING
    assert leases.request_cancel([job.pk], actor="ops") == [job.pk]
    # The lease is 3 s, so the heartbeat renews (and reads the mark) about every second.
    wait_until(lambda: state_of(job) == JobState.CANCELLED, timeout=10, what="cancelled")
    cancelled = Job.objects.get(pk=job.pk)
    assert (cancelled.attempts, cancelled.last_error_code) == (1, CANCELLED)
    assert [entry["code"] for entry in cancelled.errors] == [CANCELLED]
    assert cancelled.finished_at is not None
    assert cancelled.worker_id is None
    worker.wait_for_log(
        f"job id={job.pk} task=tests.jobs.e2e_tasks.stops_when_cancelled attempt=1/"
    )
    line = next(line for line in worker.log().splitlines() if f"job id={job.pk} task=" in line)
    assert "outcome=cancelled code=CANCELLED" in line


@e2e_db
def test_a_task_ignoring_the_request_succeeds_and_the_mark_stays_visible(
    start_worker: StartWorker, admin_client: Client
) -> None:
    job = ignores_cancel.enqueue("ignore-cancel")
    worker = start_worker("--concurrency", "1")
    wait_until(lambda: started(job), what="the task to start")
    assert leases.request_cancel([job.pk], actor="ops") == [job.pk]
    worker.wait_for_log(f"job id={job.pk} cancel requested", timeout=10)
    open_gate("ignore-cancel")
    wait_until(lambda: state_of(job) == JobState.SUCCEEDED, timeout=10, what="succeeded")
    assert Execution.objects.get(job_id=job.pk).label == "cancel_requested=True"
    finished = Job.objects.get(pk=job.pk)
    assert finished.cancel_requested_at is not None
    assert finished.result == "finished anyway"
    page = admin_client.get(reverse("admin:django_dbqueue_job_changelist")).content.decode()
    assert 'class="dbqueue-cancel-requested"' in page
