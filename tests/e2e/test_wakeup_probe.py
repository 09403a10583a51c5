"""The wake-up probe: a listening worker finds out whether its notifications arrive.

With ``POOLER`` unset, a worker whose ``DATABASE`` is in fact PgBouncer in
transaction mode listens through the pool and hears nothing: its probe says
so once, and polling still drains. Directly, the probe is heard, nothing is
said at WARNING, and notifications wake the idle worker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from django_dbqueue.models import Job, JobState
from django_dbqueue.worker.probe import PROBE_WINDOW
from tests.e2e.conftest import WorkerProcess, listening, pooled_url
from tests.e2e.servers import PgBouncer
from tests.jobs.e2e_tasks import recorded
from tests.testapp.models import Execution
from tests.waiting import WAIT, wait_until

StartWorker = Callable[..., WorkerProcess]
e2e_db = pytest.mark.django_db(transaction=True)

NOT_HEARD = "wake-ups do not arrive: this worker's probe on channel"
HEARD = "wake-ups arrive: this worker's probe on channel"


def succeeded(job: Job, timeout: float) -> None:
    wait_until(
        lambda: Job.objects.filter(pk=job.pk, state=JobState.SUCCEEDED).exists(),
        timeout,
        f"job {job.pk} to succeed",
    )
    assert Execution.objects.filter(job_id=job.pk).count() == 1


@e2e_db
def test_a_worker_listening_through_a_transaction_pool_says_once_it_polls_and_still_drains(
    pgbouncer: PgBouncer, start_worker: StartWorker
) -> None:
    worker = start_worker(
        settings={"NOTIFY_CHANNEL": "probed_through_pool", "POLL_INTERVAL": 0.5},
        env={"DATABASE_URL": pooled_url(pgbouncer)},
    )
    worker.wait_for_log(NOT_HEARD, timeout=PROBE_WINDOW + 30)

    jobs = [recorded.enqueue(label=f"polled-{n}") for n in range(3)]
    for job in jobs:
        # Drained by 0.5 s polls alone (nothing is heard): what counts is that they run, so the
        # wait is the suite's usual bound, not a speed target a loaded CI machine may miss.
        succeeded(job, timeout=WAIT)

    log = worker.log()
    assert log.count(NOT_HEARD) == 1, log
    assert "set POOLER = 'transaction' and LISTEN_DATABASE" in log
    assert HEARD not in log
    assert worker.process.poll() is None


@e2e_db
def test_a_worker_listening_directly_hears_its_probe_and_is_woken_by_notifications(
    start_worker: StartWorker, settings: Any
) -> None:
    channel = "probed_directly"
    settings.DBQUEUE = {**settings.DBQUEUE, "NOTIFY_CHANNEL": channel}  # where enqueue notifies
    # Polls 30 s apart: only a notification explains a pickup within 10 s.
    worker = start_worker(settings={"NOTIFY_CHANNEL": channel, "POLL_INTERVAL": 30})
    worker.wait_for_log(HEARD)
    assert listening(channel)

    succeeded(recorded.enqueue(label="woken"), timeout=10)

    log = worker.log()
    assert NOT_HEARD not in log  # the probe was heard: its window is closed
    assert log.count(HEARD) == 1
