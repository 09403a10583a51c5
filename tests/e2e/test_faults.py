"""Production faults with real ``runworkers`` processes: the worker stays whole or exits loudly.

A read-only window (a failover), prepared statements that vanish, task code
that calls ``sys.exit()``, hung slots and a thread killed by an injected
fault; server restarts and lost replies live in ``test_server_faults.py``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from django_dbqueue import Job, JobState
from django_dbqueue.durations import MAX_DELAY
from django_dbqueue.errors import LEASE_EXPIRED, RETRY, TASK_ABORTED
from tests.e2e.conftest import WorkerProcess
from tests.factories import JobFactory
from tests.jobs.e2e_tasks import recorded
from tests.jobs.faults_tasks import (
    asks_retry,
    cancelled,
    cancelled_async,
    exits,
    hangs,
    outlasts_its_lease,
)
from tests.testapp.models import Execution
from tests.waiting import wait_until

StartWorker = Callable[..., WorkerProcess]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgresql]

#: How long the database refuses writes in the failover test.
READ_ONLY_WINDOW = 4.0
#: The job outlasting its 10 s lease by more than half: only renewals keep it.
JOB_SECONDS = 16.0
#: The worker loops whose fault must be named once each.
LOOPS = ("claim", "lease renewal", "reap")


def fetch(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def in_state(job: Job, *states: str) -> Job | None:
    current = fetch(job)
    return current if current.state in states else None


def lines(worker: WorkerProcess, pattern: str) -> list[str]:
    return re.findall(f"^.*{pattern}.*$", worker.log(), re.MULTILINE)


def expired_lease_job() -> Job:
    """A job whose worker vanished: running, its lease over (the reaper's to recover)."""
    return JobFactory(
        task="tests.jobs.e2e_tasks.recorded",
        running=True,
        worker_id="vanished-worker",
        lease_until=timezone.now() - timedelta(seconds=5),
    )


def assert_still_claiming_and_reaping(worker: WorkerProcess) -> None:
    """After the fault: a new job runs, and an expired lease is reaped, then run."""
    fresh = recorded.enqueue("after the fault")
    abandoned = expired_lease_job()
    wait_until(lambda: in_state(fresh, JobState.SUCCEEDED), what="a job enqueued after the fault")
    reaped = wait_until(
        lambda: in_state(abandoned, JobState.SUCCEEDED), what="the abandoned job, reaped and run"
    )
    assert [entry["code"] for entry in reaped.errors] == [LEASE_EXPIRED]
    assert worker.process.poll() is None


@pytest.fixture
def read_only_database() -> Iterator[Callable[[], None]]:
    """``make_read_only()`` turns the test database read-only as a demoted primary is.

    New sessions default to read-only transactions and every session but the
    test's is terminated, so the workers reconnect into read-only ones. The
    setting is always undone at teardown.
    """
    name = connection.settings_dict["NAME"]

    def set_read_only(on: bool) -> None:
        with connection.cursor() as cursor:
            if on:
                cursor.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            else:
                cursor.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')

    yield lambda: set_read_only(True)
    set_read_only(False)


def test_a_read_only_window_is_waited_out_and_the_job_keeps_its_lease(
    start_worker: StartWorker, read_only_database: Callable[[], None]
) -> None:
    worker = start_worker("--concurrency", "2")
    job = outlasts_its_lease.enqueue(JOB_SECONDS)
    wait_until(lambda: Execution.objects.filter(job_id=job.pk).exists(), what="the job to start")
    read_only_database()
    time.sleep(READ_ONLY_WINDOW)  # the failover window itself, not a wait for an event
    with connection.cursor() as cursor:
        name = connection.settings_dict["NAME"]
        cursor.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')

    done = wait_until(lambda: in_state(job, JobState.SUCCEEDED, JobState.DEAD), what="the job")
    assert (done.state, done.attempts, done.errors) == (JobState.SUCCEEDED, 1, [])
    assert Execution.objects.filter(job_id=job.pk).count() == 1
    assert_still_claiming_and_reaping(worker)
    for loop in LOOPS:
        assert len(lines(worker, rf"{loop} failed \(database read-only\)")) == 1, worker.log()
        assert lines(worker, rf"{loop} recovered after"), worker.log()
    assert "Exception in thread" not in worker.log()  # what a thread dying of it prints
    assert "lease lost" not in worker.log()


#: Once armed (its sequence exists), the first claim, renewal, completion and reap of a job
#: each drop every prepared statement of the connection running it, as a pooler handing
#: the worker another server connection would: the next prepared statement that connection
#: runs fails with SQLSTATE 26000.
#: IFs in sequence, since SQL does not promise the order in which OR evaluates nextval().
DEALLOCATING_TRIGGER = """
CREATE FUNCTION dbqueue_test_deallocate() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE kind text;
BEGIN
    IF OLD.state = 'ready' AND NEW.state = 'running' THEN kind := 'claim';
    ELSIF OLD.state = 'running' AND NEW.state = 'running' THEN kind := 'renew';
    ELSIF NEW.state = 'succeeded' THEN kind := 'complete';
    ELSIF NEW.last_error_code = 'LEASE_EXPIRED' THEN kind := 'reap';
    ELSE RETURN NEW;
    END IF;
    IF to_regclass('dbqueue_fault_' || kind) IS NULL THEN RETURN NEW; END IF;
    IF nextval('dbqueue_fault_' || kind) = 1 THEN EXECUTE 'DEALLOCATE ALL'; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER dbqueue_test_deallocate AFTER UPDATE ON dbqueue_job
    FOR EACH ROW EXECUTE FUNCTION dbqueue_test_deallocate();
"""
FAULT_KINDS = ("claim", "renew", "complete", "reap")


@pytest.fixture
def vanishing_prepared_statements() -> Iterator[None]:
    """Arm ``DEALLOCATING_TRIGGER`` for one fault of each kind; removed at teardown."""
    with connection.cursor() as cursor:
        cursor.execute(DEALLOCATING_TRIGGER)
        for kind in FAULT_KINDS:
            cursor.execute(f"CREATE SEQUENCE dbqueue_fault_{kind}")
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER dbqueue_test_deallocate ON dbqueue_job")
        cursor.execute("DROP FUNCTION dbqueue_test_deallocate()")
        for kind in FAULT_KINDS:
            cursor.execute(f"DROP SEQUENCE dbqueue_fault_{kind}")


def faults_fired() -> dict[str, int]:
    with connection.cursor() as cursor:
        fired = {}
        for kind in FAULT_KINDS:
            cursor.execute(f"SELECT last_value, is_called FROM dbqueue_fault_{kind}")
            last_value, is_called = cursor.fetchone()
            fired[kind] = last_value if is_called else 0
        return fired


def test_vanished_prepared_statements_are_survived_by_every_loop(
    start_worker: StartWorker, vanishing_prepared_statements: None
) -> None:
    worker = start_worker("--concurrency", "2")
    job = outlasts_its_lease.enqueue(8)  # its 10 s lease is renewed twice: 3.3 s and 6.7 s in
    wait_until(lambda: Execution.objects.filter(job_id=job.pk).exists(), what="the job to start")

    done = wait_until(lambda: in_state(job, JobState.SUCCEEDED, JobState.DEAD), what="the job")
    assert (done.state, done.attempts, done.errors) == (JobState.SUCCEEDED, 1, [])
    assert_still_claiming_and_reaping(worker)
    assert all(fired >= 1 for fired in faults_fired().values()), faults_fired()
    for loop in ("claim", "lease renewal", "job success writing", "reap"):
        assert len(lines(worker, rf"{loop} failed \(prepared statement gone\)")) == 1, worker.log()
    assert "it runs plain statements from now on" in worker.log()
    assert "Exception in thread" not in worker.log()
    assert "lease lost" not in worker.log()


def test_task_code_that_exits_or_is_cancelled_fails_its_attempt_and_the_slot_goes_on(
    start_worker: StartWorker,
) -> None:
    worker = start_worker("--concurrency", "1", "--poll-interval", "0.2")
    aborted = [exits.enqueue(3), cancelled.enqueue(), cancelled_async.enqueue()]
    last = recorded.enqueue("after them")
    wait_until(lambda: in_state(last, JobState.SUCCEEDED), what="the job after the aborted ones")
    for job in aborted:
        dead = wait_until(lambda job=job: in_state(job, JobState.DEAD), what=f"job {job.pk} dead")
        assert dead.attempts == 2
        assert [entry["code"] for entry in dead.errors] == [TASK_ABORTED, TASK_ABORTED]
    assert {entry["exception"] for job in aborted for entry in fetch(job).errors} == {
        "builtins.SystemExit",
        "asyncio.exceptions.CancelledError",
    }
    assert worker.process.poll() is None
    assert "job slot" not in worker.log()  # no slot had to survive an escaped error


def test_retry_delays_past_the_cap_or_not_numbers_never_leave_the_job_running(
    start_worker: StartWorker,
) -> None:
    start_worker("--poll-interval", "0.2")
    huge, nan = asks_retry.enqueue("1e12"), asks_retry.enqueue("nan")
    waiting = wait_until(lambda: fetch(huge) if fetch(huge).errors else None, what="1e12 tried")
    assert (waiting.state, waiting.attempts) == (JobState.READY, 1)
    assert waiting.run_at > timezone.now() + MAX_DELAY - timedelta(days=1)
    assert waiting.errors[-1]["code"] == RETRY
    assert "capped at" in waiting.errors[-1]["message"]
    dead = wait_until(lambda: in_state(nan, JobState.DEAD), what="the NaN retry to die")
    assert [entry["code"] for entry in dead.errors] == ["ValueError", "ValueError"]
    assert "the delay must be a finite number of seconds" in dead.errors[-1]["message"]


def test_a_worker_whose_every_slot_hangs_past_its_timeout_exits_non_zero(
    start_worker: StartWorker,
) -> None:
    worker = start_worker("--concurrency", "2")
    stuck = [hangs.enqueue(), hangs.enqueue()]
    wait_until(lambda: Execution.objects.count() == 2, what="both slots to run a hanging job")
    started = time.monotonic()
    # Timeout 1 s, lease 3 s: hung for good 4 s in, judged within a watchdog tick after.
    assert worker.wait(timeout=15) != 0
    assert time.monotonic() - started < 15
    assert "every job slot (2) is stuck in a job past its timeout" in worker.log()
    assert "cannot go on, exiting" in worker.log()
    for job in stuck:
        assert fetch(job).state in (JobState.RUNNING, JobState.READY)  # the reaper's to recover


def test_a_worker_thread_killed_by_a_fault_makes_the_worker_exit_non_zero(
    start_worker: StartWorker,
) -> None:
    worker = start_worker(settings={"LEASE_SECONDS": 3}, env={"DBQUEUE_INJECT_FAULT": "heartbeat"})
    assert worker.wait(timeout=15) != 0
    assert "thread dbqueue-heartbeat is gone" in worker.log()
    assert "InjectedFault" in worker.log()
