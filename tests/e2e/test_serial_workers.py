"""Per-key serial execution across real ``runworkers`` processes.

Jobs sharing a serial key must start in enqueue order and never overlap,
whichever worker process runs each of them. The three workers are all claiming
before the first job commits, so no one of them can drain the queue alone
while the others are still starting.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from itertools import pairwise

import pytest
from django.db import transaction

from django_dbqueue import Job
from tests.e2e.conftest import WorkerProcess
from tests.jobs.serial_e2e_tasks import serial_step
from tests.testapp.models import Execution
from tests.waiting import wait_until

logger = logging.getLogger(__name__)

StartWorker = Callable[..., WorkerProcess]

KEYS = [f"order:{n}" for n in range(10)]
JOBS_PER_KEY = 30
#: How long each job holds its key: long enough for an overlap to show in the timestamps.
PAUSE = 0.005

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.locking]


def test_three_workers_run_each_keys_jobs_in_enqueue_order_without_overlap(
    start_worker: StartWorker,
) -> None:
    workers = [start_worker("--concurrency", "4") for _ in range(3)]
    for worker in workers:
        worker.wait_for_log("worker started")
    started = time.monotonic()
    with transaction.atomic():
        for _ in range(JOBS_PER_KEY):
            for key in KEYS:
                serial_step.using(serial_key=key).enqueue(key, PAUSE)
    wait_until(
        lambda: Job.objects.succeeded().count() == len(KEYS) * JOBS_PER_KEY,
        what="every serial job to succeed",
    )
    elapsed = time.monotonic() - started
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0, worker.log()

    executions = list(Execution.objects.order_by("started_at", "job_id"))
    assert len(executions) == len(KEYS) * JOBS_PER_KEY
    handoffs = 0
    for key in KEYS:
        of_key = [execution for execution in executions if execution.label == key]
        job_ids = [execution.job_id for execution in of_key]
        assert job_ids == sorted(job_ids), f"{key} started out of enqueue order"
        for earlier, later in pairwise(of_key):
            assert earlier.finished_at is not None
            assert later.started_at >= earlier.finished_at, f"{key}: {later} overlapped {earlier}"
            handoffs += earlier.worker_id != later.worker_id
    assert handoffs > 0, "no key ever moved between workers: nothing was tested across processes"
    # How much the keys moved between processes (logged at INFO: --log-cli-level=INFO shows it).
    logger.info(
        f"{len(executions)} jobs in {elapsed:.1f}s; {handoffs} times a key moved to "
        f"another worker; workers: {sorted({e.worker_id for e in executions})}"
    )
