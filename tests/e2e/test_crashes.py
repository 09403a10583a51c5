"""Crashes at every boundary, with real ``runworkers`` processes.

Workers are killed (SIGKILL), frozen (SIGSTOP) and left to lose their leases;
each test then checks the guarantee that must survive: every job runs, a stale
worker overwrites nothing, the idempotency key is stable, retries are bounded.
"""

from __future__ import annotations

import logging
import re
import signal
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.models import Count

from django_dbqueue import Job, JobState
from django_dbqueue.clock import database_now
from tests.e2e.conftest import WorkerProcess, open_gate
from tests.jobs.crash_tasks import (
    QUICK_RETRY,
    always_fails,
    applies_effect_once,
    each_attempt_gated,
    gated_reporting_worker,
    stuck_past_timeout,
)
from tests.jobs.e2e_tasks import gated, recorded
from tests.testapp.models import Effect, Execution
from tests.waiting import wait_until

logger = logging.getLogger(__name__)

StartWorker = Callable[..., WorkerProcess]

#: Shared e2e tasks use the settings' backoff: make a reaped job due again at once.
QUICK_RETRY_SETTINGS = {"RETRY_BASE": 0.1, "RETRY_FACTOR": 1, "RETRY_CAP": 0.1}
#: Claim again soon after the reaper makes a job ready (the reaper does not notify).
FAST_POLL = ("--poll-interval", "0.2")
#: The e2e settings' REAPER_INTERVAL.
REAPER_INTERVAL = 0.5

pytestmark = pytest.mark.django_db(transaction=True)


def fetch(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def executions(job: Job) -> list[Execution]:
    return list(Execution.objects.filter(job_id=job.pk).order_by("attempt"))


def execution_of(job: Job, attempt: int) -> Execution | None:
    return Execution.objects.filter(job_id=job.pk, attempt=attempt).first()


def in_state(job: Job, state: str) -> Job | None:
    current = fetch(job)
    return current if current.state == state else None


def log_line(worker: WorkerProcess, pattern: str) -> str | None:
    """The first line of the worker's log matching the regular expression ``pattern``."""
    match = re.search(f"^.*{pattern}.*$", worker.log(), re.MULTILINE)
    return match.group(0) if match else None


def outcome_line(worker: WorkerProcess, job: Job, attempt: int, outcome: str) -> str | None:
    return log_line(worker, rf"job id={job.pk} .* attempt={attempt}/\d+ .* outcome={outcome}\b")


def is_frozen(worker: WorkerProcess) -> bool:
    """Whether the process is stopped (state ``T`` in ``/proc``)."""
    stat = Path(f"/proc/{worker.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def job_row_is_unlocked(job: Job) -> bool:
    try:
        with transaction.atomic():
            list(Job.objects.select_for_update(nowait=True).filter(pk=job.pk))
    except DatabaseError:
        return False
    return True


def freeze_outside_transactions(worker: WorkerProcess, job: Job) -> None:
    """SIGSTOP ``worker`` at a moment it holds no lock on ``job``'s row.

    A worker frozen inside its heartbeat's renew transaction would keep the row
    locked, and every reaper skips locked rows: that would test nothing.
    """
    for _ in range(20):
        worker.send(signal.SIGSTOP)
        wait_until(lambda: is_frozen(worker), 5, what=f"worker {worker.pid} to stop")
        if job_row_is_unlocked(job):
            return
        worker.send(signal.SIGCONT)
    pytest.fail(f"worker {worker.pid} kept job {job.pk} locked at every SIGSTOP")


def kill(worker: WorkerProcess) -> None:
    worker.send(signal.SIGKILL)
    assert worker.wait() == -signal.SIGKILL


def stop(*workers: WorkerProcess) -> None:
    """SIGTERM each worker; each must drain and exit 0."""
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0, worker.log()


def history_codes(job: Job) -> list[tuple[Any, ...]]:
    return [(entry["attempt"], entry["worker"], entry["code"]) for entry in job.errors]


@pytest.mark.locking
def test_three_workers_drain_2000_jobs_each_exactly_once(start_worker: StartWorker) -> None:
    jobs = recorded.enqueue_many([((), {"label": "drain"}) for _ in range(2000)])
    started = time.monotonic()

    workers = [
        start_worker("--concurrency", "4", "--burst", "--worker-id", f"drain-{n}") for n in range(3)
    ]

    for worker in workers:
        assert worker.wait(90) == 0, worker.log()
    elapsed = time.monotonic() - started
    ran = Execution.objects.filter(label="drain")
    assert ran.count() == 2000
    assert set(ran.values_list("job_id", flat=True)) == {job.pk for job in jobs}
    assert set(ran.values_list("attempt", flat=True)) == {1}
    assert not ran.filter(finished_at__isnull=True).exists()
    assert Job.objects.filter(state=JobState.SUCCEEDED, attempts=1).count() == 2000
    assert Job.objects.count() == 2000
    per_worker = dict(ran.values_list("worker_id").annotate(n=Count("id")).order_by("worker_id"))
    logger.info(f"2000 jobs drained in {elapsed:.1f}s by {per_worker}")


def test_sigkill_after_claim_recovers_job_on_another_worker_with_same_idempotency_key(
    start_worker: StartWorker,
) -> None:
    job = gated.enqueue("after-claim")
    a = start_worker("--worker-id", "A")
    wait_until(lambda: execution_of(job, 1), what="attempt 1 to start on A")

    kill(a)
    open_gate("after-claim")  # Only B can pass it: A is dead.
    b = start_worker("--worker-id", "B", *FAST_POLL, settings=QUICK_RETRY_SETTINGS)

    done = wait_until(lambda: in_state(job, JobState.SUCCEEDED), 20, "B to finish the job")
    assert done.attempts == 2
    assert done.lease_token == 2
    assert history_codes(done) == [(1, "A", "LEASE_EXPIRED")]
    assert done.last_error_code == "LEASE_EXPIRED"
    first, second = executions(job)
    assert (first.attempt, first.worker_id, first.finished_at) == (1, "A", None)
    assert (second.attempt, second.worker_id) == (2, "B")
    assert second.finished_at is not None
    assert first.idempotency_key == second.idempotency_key == done.idempotency_key
    stop(b)


def test_sigstopped_worker_cannot_overwrite_after_reclaim(start_worker: StartWorker) -> None:
    job = gated_reporting_worker.enqueue("frozen")
    a = start_worker("--worker-id", "A")
    wait_until(lambda: execution_of(job, 1), what="attempt 1 to start on A")

    freeze_outside_transactions(a, job)
    open_gate("frozen")  # B passes it now; A only once it is thawed.
    b = start_worker("--worker-id", "B", *FAST_POLL)
    done = wait_until(lambda: in_state(job, JobState.SUCCEEDED), 20, "B to finish the job")
    settled = Job.objects.filter(pk=job.pk).values().get()
    a.send(signal.SIGCONT)
    wait_until(lambda: outcome_line(a, job, 1, "lease_lost"), what="A's lost-lease outcome")

    assert done.result == {"worker_id": "B", "attempt": 2}
    assert done.lease_token == 2
    assert history_codes(done) == [(1, "A", "LEASE_EXPIRED")]
    assert Job.objects.filter(pk=job.pk).values().get() == settled
    assert f"lease lost action=complete job={job.pk} worker=A lease_token=1" in a.log()
    first, second = executions(job)
    assert first.worker_id == "A"
    assert first.finished_at is not None  # A's attempt really ran to its end.
    assert second.worker_id == "B"
    stop(a, b)


def test_sigkill_after_side_effect_keeps_one_effect_row(start_worker: StartWorker) -> None:
    job = applies_effect_once.enqueue("after-effect")
    a = start_worker("--worker-id", "A")
    wait_until(lambda: execution_of(job, 1), what="attempt 1 to apply its effect on A")
    assert Effect.objects.filter(key=job.idempotency_key).exists()

    kill(a)
    b = start_worker("--worker-id", "B", *FAST_POLL)

    done = wait_until(lambda: in_state(job, JobState.SUCCEEDED), 20, "B to finish the job")
    assert done.attempts == 2
    assert done.result == {"created": False}
    assert history_codes(done) == [(1, "A", "LEASE_EXPIRED")]
    first, second = executions(job)
    assert (first.worker_id, first.label, first.finished_at) == ("A", "created", None)
    assert (second.worker_id, second.label) == ("B", "existing")
    assert first.idempotency_key == second.idempotency_key == done.idempotency_key
    assert list(Effect.objects.values_list("key", "applied")) == [(done.idempotency_key, 1)]
    stop(b)


def test_heartbeat_keeps_a_job_alive_past_three_leases(start_worker: StartWorker) -> None:
    job = gated.enqueue("long")
    lease = fetch(job).lease_seconds
    worker = start_worker("--worker-id", "beating")
    wait_until(lambda: execution_of(job, 1), what="attempt 1 to start")
    started = time.monotonic()
    lease_deadlines: set[datetime] = set()

    def still_first_attempt_after_three_leases() -> bool:
        current = fetch(job)
        if current.attempts != 1 or current.errors or current.state != JobState.RUNNING:
            pytest.fail(
                f"job lost its lease after {time.monotonic() - started:.1f}s: "
                f"state={current.state} attempts={current.attempts} errors={current.errors}\n"
                f"{worker.log()}"
            )
        assert current.lease_until is not None
        lease_deadlines.add(current.lease_until)
        return time.monotonic() - started > 3 * lease + 0.5

    wait_until(still_first_attempt_after_three_leases, 20, "three leases to pass")
    open_gate("long")

    done = wait_until(lambda: in_state(job, JobState.SUCCEEDED), what="the job to finish")
    assert len(lease_deadlines) > 3, "the heartbeat renewed the lease"
    assert done.attempts == 1
    assert done.errors == []
    assert done.last_error_code == ""
    (only,) = executions(job)
    assert only.finished_at is not None
    assert (only.finished_at - only.started_at).total_seconds() > 3 * lease
    stop(worker)


def test_job_past_timeout_loses_its_lease_and_is_recovered_within_lease_plus_reaper_interval(
    start_worker: StartWorker,
) -> None:
    job = stuck_past_timeout.enqueue("stuck")
    options = stuck_past_timeout.options
    assert options.timeout is not None
    assert options.lease is not None
    # Room for the stuck attempt and its recovery on one worker.
    worker = start_worker("--concurrency", "2", "--worker-id", "W", *FAST_POLL)

    wait_until(lambda: execution_of(job, 2), 20, "attempt 2 to start while attempt 1 hangs")
    first, second = executions(job)
    window = (second.started_at - first.started_at).total_seconds()
    reaped = fetch(job).errors[0]
    reaped_after = (datetime.fromisoformat(reaped["at"]) - first.started_at).total_seconds()
    # Retry delay, poll interval and claim latency: well under a second together.
    slack = QUICK_RETRY.cap + 0.2 + 0.7
    bound = options.timeout + options.lease + REAPER_INTERVAL + slack
    logger.info(
        f"duplicate-execution window: {window:.2f}s from attempt 1's start to attempt 2's "
        f"(reaped after {reaped_after:.2f}s; bound {bound:.1f}s = timeout {options.timeout} "
        f"+ lease {options.lease} + reaper {REAPER_INTERVAL} + slack {slack:.1f})"
    )
    assert options.lease <= window <= bound
    assert reaped["code"] == "LEASE_EXPIRED"
    assert log_line(worker, f"job id={job.pk} passed its timeout; no longer renewing its lease")

    open_gate("stuck")
    wait_until(lambda: outcome_line(worker, job, 1, "lease_lost"), what="attempt 1 to give up")
    # Attempt 2's success may still be on its way (a renewal held its row: written 0.2 s later).
    done = wait_until(lambda: in_state(job, JobState.SUCCEEDED), what="attempt 2's success")
    wait_until(lambda: outcome_line(worker, job, 2, "succeeded"), what="attempt 2's outcome line")
    assert not outcome_line(worker, job, 1, "succeeded")
    assert done.result == {"attempt": 2}
    assert done.attempts == 2
    stop(worker)


def test_a_stale_attempts_end_leaves_the_attempt_that_replaced_it_on_the_same_worker_renewed(
    start_worker: StartWorker,
) -> None:
    job = each_attempt_gated.enqueue("twice")
    lease = fetch(job).lease_seconds
    # Room for the stale attempt and the one that replaces it on one worker.
    worker = start_worker("--concurrency", "2", "--worker-id", "W", *FAST_POLL)
    wait_until(lambda: execution_of(job, 1), what="attempt 1 to start")
    # Attempt 1's lease lapses under it (as while the database was out of reach): the
    # worker's reaper returns the job and the same worker claims it again.
    lapsed = database_now(connection) - timedelta(seconds=1)
    Job.objects.filter(pk=job.pk).update(lease_until=lapsed)
    wait_until(lambda: execution_of(job, 2), 20, "attempt 2 to start while attempt 1 hangs")

    open_gate("twice-1")
    wait_until(lambda: outcome_line(worker, job, 1, "lease_lost"), what="attempt 1 to give up")
    ended = time.monotonic()

    def attempt_2_running_after_three_leases() -> bool:
        current = fetch(job)
        if (current.state, current.attempts, current.lease_token) != (JobState.RUNNING, 2, 2):
            pytest.fail(
                f"attempt 2 lost its lease after attempt 1 ended: state={current.state} "
                f"attempts={current.attempts} errors={current.errors}\n{worker.log()}"
            )
        return time.monotonic() - ended > 3 * lease

    wait_until(attempt_2_running_after_three_leases, 20, "three leases to pass")
    open_gate("twice-2")
    done = wait_until(lambda: in_state(job, JobState.SUCCEEDED), what="attempt 2's success")
    assert (done.attempts, done.result) == (2, {"attempt": 2})
    assert history_codes(done) == [(1, "W", "LEASE_EXPIRED")]
    assert log_line(worker, f"job id={job.pk} claimed again while its attempt with lease token 1")
    stop(worker)


def test_exhausted_retries_make_the_job_dead_and_the_worker_keeps_running(
    start_worker: StartWorker,
) -> None:
    worker = start_worker("--worker-id", "W", *FAST_POLL)
    job = always_fails.enqueue("boom")

    dead = wait_until(lambda: in_state(job, JobState.DEAD), 20, "the job to die")
    assert dead.attempts == dead.max_attempts == 2
    assert history_codes(dead) == [(1, "W", "AlwaysFails"), (2, "W", "AlwaysFails")]
    assert [entry["message"] for entry in dead.errors] == ["AlwaysFails: boom"] * 2
    assert dead.last_error_code == "AlwaysFails"
    assert dead.last_error.startswith("Traceback (most recent call last):")
    assert dead.last_error.rstrip().endswith("AlwaysFails: boom")
    assert dead.finished_at is not None
    assert outcome_line(worker, job, 1, "retried code=AlwaysFails")
    # The reporter logs an outcome once it is written: the row can be dead a moment before
    # its line is in the log.
    wait_until(
        lambda: outcome_line(worker, job, 2, "dead code=AlwaysFails"),
        10,
        "the dead outcome's log line",
    )

    assert worker.process.poll() is None
    after = recorded.enqueue("after-dead")
    wait_until(lambda: in_state(after, JobState.SUCCEEDED), what="the next job to succeed")
    stop(worker)
    assert "succeeded=1 retried=1 dead=1" in worker.log()
