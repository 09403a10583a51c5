"""Running jobs in the test's own process: ``run_jobs`` and eager mode (``DBQUEUE["EAGER"]``).

Both go through the lease protocol exactly as a worker does: claim, run,
then complete or fail, with retries scheduled by the task's backoff and dead
jobs kept with their error history. They use the calling thread's connection
to the queue's database, so inside a test transaction (Django's ``TestCase``,
pytest-django's ``db``) they see the jobs the test enqueued without any
commit, and whatever the jobs write is rolled back with the test. Nothing
here starts a thread or a process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from django_dbqueue import conf, leases, middleware
from django_dbqueue.worker.execute import execute

#: The worker id the jobs run here are leased to, as the admin and logs show it.
WORKER_ID = f"testing:{os.getpid()}"


@dataclass(frozen=True)
class JobRun:
    """One attempt run in this process: the job, the attempt (1-based) and how it ended.

    ``outcome`` is ``"succeeded"``, ``"retried"``, ``"dead"`` or ``"cancelled"``
    (the words of ``signals.job_finished``; ``cancelled`` when the task stopped
    on a cancel request), or ``"lease_lost"`` when the attempt outlived its
    lease and its outcome was refused.
    """

    job_id: int
    task: str
    attempt: int
    outcome: str


def run_jobs(queue: str | None = None, *, max_jobs: int | None = None) -> list[JobRun]:
    """Run every due job of ``queue`` (``None``: every queue) here and now; the attempts in order.

    Jobs are claimed one at a time in the order a worker would claim them
    (priority, then ``run_at``) until none is due, so jobs that the jobs
    enqueue run too, and so does a retry that is due at once
    (``Retry(delay=0)``). A retry with a backoff is scheduled in the future,
    as in production, and stays ``ready``: call again once it is due (or make
    it due with ``leases.run_now``). ``max_jobs`` stops after that many
    attempts, for tasks that keep enqueueing more work.
    """
    if max_jobs is not None and (isinstance(max_jobs, bool) or max_jobs < 1):
        raise ValueError(f"max_jobs must be 1 or more (or None for no limit), not {max_jobs!r}.")
    queues = [queue] if queue is not None else None
    runs: list[JobRun] = []
    while max_jobs is None or len(runs) < max_jobs:
        claimed = leases.claim(queues, WORKER_ID, 1)
        if not claimed:
            break
        runs.append(run_leased(claimed[0]))
    return runs


def run_committed_jobs(job_ids: list[int], **_: Any) -> None:
    """Eager mode's ``jobs_committed`` receiver: run each committed job until it is settled.

    Does nothing unless ``DBQUEUE["EAGER"]`` is on. Each job runs at once,
    ``delay``/``run_at`` notwithstanding; a retry runs again at once instead
    of after its backoff, until the job succeeds or its ``max_attempts`` are
    spent and it is ``dead``. The outcome is stored on the job as a worker
    would store it; a failing task raises nothing into the enqueueing code.
    """
    if not conf.get().eager:
        return
    for job_id in job_ids:
        while claimed := leases.claim_jobs([job_id], WORKER_ID):
            run_leased(claimed[0])


def run_leased(lease: leases.Lease) -> JobRun:
    """Run one claimed job as a worker's pool thread would, and record its outcome.

    The middleware is built first, as a worker builds it at start, so one that
    listens for outcomes (``contrib.sentry``) hears of a job that ends before
    any middleware runs (``TASK_NOT_FOUND``).
    """
    middleware.stack()
    outcome = execute(lease)
    return JobRun(lease.job_id, lease.task, lease.attempt, outcome.value)
