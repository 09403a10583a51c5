"""The runworkers process under locks, floods, lost notifications, killed connections,
signals and operator mistakes.

Every scenario runs real ``runworkers`` subprocesses against the test database;
the tasks record each attempt as an ``Execution`` row, so assertions rest on
what actually ran, not on what the worker says.
"""

from __future__ import annotations

import logging
import signal
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.models import Max
from pytest_django.fixtures import Settings

from django_dbqueue.errors import SHUTDOWN
from django_dbqueue.models import Job, JobState
from tests.e2e.conftest import WorkerProcess, listening, open_gate
from tests.factories import JobFactory
from tests.jobs.e2e_tasks import gated, recorded
from tests.jobs.faults_tasks import paced, paced_short_lease
from tests.testapp.models import Execution
from tests.waiting import WAIT, wait_until

logger = logging.getLogger(__name__)

StartWorker = Callable[..., WorkerProcess]

e2e_db = pytest.mark.django_db(transaction=True)


def states(jobs: list[Job]) -> Counter[str]:
    return Counter(
        Job.objects.filter(pk__in=[job.pk for job in jobs]).values_list("state", flat=True)
    )


def all_in_state(jobs: list[Job], state: str) -> bool:
    return states(jobs) == Counter({state: len(jobs)})


def assert_untouched(job: Job) -> None:
    """``job`` was never claimed: still ready, no attempt consumed, never executed."""
    job.refresh_from_db()
    assert (job.state, job.attempts, job.lease_token) == (JobState.READY, 0, 0)
    assert not Execution.objects.filter(job_id=job.pk).exists()


def assert_released(job: Job, token_while_running: int) -> None:
    """``job``'s running attempt was interrupted at shutdown: counted, with a ``SHUTDOWN``
    history entry, and ready again at once (it had attempts left)."""
    job.refresh_from_db()
    assert job.state == JobState.READY
    assert job.attempts == 1
    assert job.lease_token == token_while_running
    assert [(entry["attempt"], entry["code"]) for entry in job.errors] == [(1, SHUTDOWN)]
    assert (job.worker_id, job.lease_until) == (None, None)
    assert Job.objects.due().filter(pk=job.pk).exists()


def running_token(job: Job) -> int:
    """Wait until ``job`` has started executing; its lease token at that moment."""
    wait_until(
        lambda: Execution.objects.filter(job_id=job.pk).exists(), 30, what=f"job {job.pk} running"
    )
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    return job.lease_token


def row_locked(job_id: int) -> AbstractContextManager[None]:
    """Hold ``SELECT ... FOR UPDATE`` on one job row, from another connection, until exit."""
    return locked_in_a_transaction(lambda: Job.objects.select_for_update().get(pk=job_id))


def writes_locked_out() -> AbstractContextManager[None]:
    """Hold a lock on the job table that makes every write to it wait, until exit.

    ``SHARE ROW EXCLUSIVE`` lets the worker read (and lock rows ``FOR UPDATE``) but not
    update, whatever rows it writes and however it locks them (``SKIP LOCKED``, ``NOWAIT``).
    """

    def lock() -> None:
        with connection.cursor() as cursor:
            cursor.execute("LOCK TABLE dbqueue_job IN SHARE ROW EXCLUSIVE MODE")

    return locked_in_a_transaction(lock)


@contextmanager
def locked_in_a_transaction(take_lock: Callable[[], object]) -> Iterator[None]:
    """Run ``take_lock`` in a transaction on another connection, and hold it until exit."""
    locked = threading.Event()
    release = threading.Event()
    errors: list[BaseException] = []

    def hold() -> None:
        try:
            with transaction.atomic():
                take_lock()
                locked.set()
                release.wait(WAIT)
        except BaseException as exc:  # noqa: BLE001 - reported to the test below.
            errors.append(exc)
        finally:
            connection.close()
            locked.set()

    thread = threading.Thread(target=hold, name="row-lock-holder")
    thread.start()
    try:
        assert locked.wait(WAIT), "the lock was never taken"
        assert not errors, errors
        yield
    finally:
        release.set()
        thread.join(WAIT)
    assert not errors, errors


def terminate_other_connections() -> int:
    """``pg_terminate_backend`` every client session of this database but the test's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'"
        )
        (terminated,) = cursor.fetchone()
    return terminated


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# 7. A row lock held on one job does not stop the worker draining the rest.


@e2e_db
def test_row_lock_on_one_job_does_not_stop_the_worker_draining_the_rest(
    start_worker: StartWorker,
) -> None:
    jobs = recorded.enqueue_many([((), {"label": f"lock-{n}"}) for n in range(20)])
    locked_job, others = jobs[0], jobs[1:]

    with row_locked(locked_job.pk):
        first = start_worker("--burst", "--concurrency", "2")
        assert first.wait(30) == 0
        assert "burst drained" in first.log()
        assert all_in_state(others, JobState.SUCCEEDED)
        assert_untouched(locked_job)

    second = start_worker("--burst")
    assert second.wait(30) == 0
    locked_job.refresh_from_db()
    assert (locked_job.state, locked_job.attempts) == (JobState.SUCCEEDED, 1)
    assert Execution.objects.filter(job_id=locked_job.pk).count() == 1
    assert Execution.objects.count() == len(jobs)


# 8. A flood of high-priority jobs and the documented fairness policy.


def flood(bulk: int, quiet: int, milliseconds: int) -> list[Job]:
    """Enqueue ``bulk`` high-priority jobs in queue "bulk", then return ``quiet``
    low-priority ones enqueued in "quiet"."""
    paced.using(queue="bulk", priority=10).enqueue_many(
        [((), {"label": "bulk", "milliseconds": milliseconds})] * bulk
    )
    return paced.using(queue="quiet", priority=0).enqueue_many(
        [((), {"label": "quiet", "milliseconds": milliseconds})] * quiet
    )


def bulk_started_before_quiet_finished() -> int:
    """Bulk attempts that had started when the last quiet job finished (worker clock)."""
    last_quiet = Execution.objects.filter(label="quiet").aggregate(last=Max("finished_at"))["last"]
    return Execution.objects.filter(label="bulk", started_at__lte=last_quiet).count()


@e2e_db
def test_high_priority_flood_does_not_stop_low_priority_jobs_in_their_own_queue(
    start_worker: StartWorker,
) -> None:
    quiet_jobs = flood(bulk=500, quiet=5, milliseconds=20)

    worker = start_worker("--queue", "bulk", "--queue", "quiet", "--concurrency", "2")
    wait_until(lambda: all_in_state(quiet_jobs, JobState.SUCCEEDED), 30, "quiet jobs done")
    # Read after the fact, so it can only undercount what was pending at that moment.
    bulk_pending = Job.objects.filter(queue="bulk").active().count()
    bulk_ahead = bulk_started_before_quiet_finished()
    logger.info(f"bulk jobs started before the last quiet job finished: {bulk_ahead}/500")

    # Strict priority across queues would have run all 500 bulk jobs first.
    assert bulk_ahead <= 50
    assert bulk_pending >= 400
    worker.send(signal.SIGTERM)
    assert worker.wait(30) == 0


@e2e_db
def test_low_priority_queue_served_by_its_own_worker_progresses_during_a_flood(
    start_worker: StartWorker,
) -> None:
    quiet_jobs = flood(bulk=500, quiet=5, milliseconds=20)

    bulk_worker = start_worker("--queue", "bulk", "--worker-id", "bulk-worker")
    wait_until(lambda: Execution.objects.filter(label="bulk").count() >= 3, 30, "bulk flowing")
    quiet_worker = start_worker("--queue", "quiet", "--worker-id", "quiet-worker")
    wait_until(lambda: all_in_state(quiet_jobs, JobState.SUCCEEDED), 30, "quiet jobs done")
    bulk_pending = Job.objects.filter(queue="bulk").active().count()

    assert bulk_pending >= 300
    assert set(Execution.objects.filter(label="quiet").values_list("worker_id", flat=True)) == {
        "quiet-worker"
    }
    assert set(Execution.objects.filter(label="bulk").values_list("worker_id", flat=True)) == {
        "bulk-worker"
    }
    for worker in (bulk_worker, quiet_worker):
        worker.send(signal.SIGTERM)
    assert [bulk_worker.wait(30), quiet_worker.wait(30)] == [0, 0]


# 9. Polling drains without notifications; notifications wake an idle worker fast.


@e2e_db
def test_polling_drains_when_notifications_cannot_arrive(start_worker: StartWorker) -> None:
    worker = start_worker(settings={"NOTIFY_CHANNEL": "nobody_sends_here", "POLL_INTERVAL": 0.5})
    wait_until(lambda: listening("nobody_sends_here"), 30, "the worker listening")

    latencies = []
    for n in range(3):
        job = recorded.enqueue(label=f"polled-{n}")
        wait_until(
            lambda job=job: Execution.objects.filter(job_id=job.pk, finished_at__isnull=False),
            5,
            f"job {job.pk} run by polling",
        )
        job.refresh_from_db()
        execution = Execution.objects.get(job_id=job.pk)
        latencies.append((execution.started_at - job.created_at).total_seconds())
    logger.info(f"pickup latencies by polling every 0.5 s: {[round(s, 3) for s in latencies]}")

    assert max(latencies) < 2.5  # a few poll intervals
    assert worker.process.poll() is None


@e2e_db
def test_idle_worker_picks_up_notified_jobs_quickly(start_worker: StartWorker) -> None:
    # Polls 30 s apart: only a notification explains a pickup within a second.
    start_worker(settings={"POLL_INTERVAL": 30})
    wait_until(lambda: listening("dbqueue"), 30, "the worker listening")
    warm_up = recorded.enqueue(label="warm-up")
    wait_until(lambda: all_in_state([warm_up], JobState.SUCCEEDED), 10, "the warm-up job")

    pickups, claims = [], []
    for n in range(20):
        job = recorded.enqueue(label=f"latency-{n}")
        wait_until(
            lambda job=job: all_in_state([job], JobState.SUCCEEDED), 10, f"job {job.pk} done"
        )
        job.refresh_from_db()
        execution = Execution.objects.get(job_id=job.pk)
        pickups.append((execution.started_at - job.created_at).total_seconds())
        assert job.started_at is not None
        claims.append((job.started_at - job.created_at).total_seconds())

    def ms(values: list[float], fraction: float) -> str:
        return f"{percentile(values, fraction) * 1000:.1f} ms"

    logger.info(
        f"pickup latency (task start - created_at) over {len(pickups)} jobs: "
        f"p50={ms(pickups, 0.5)} p95={ms(pickups, 0.95)} max={ms(pickups, 1.0)}"
        f"\nclaim latency (started_at - created_at, database clock): "
        f"p50={ms(claims, 0.5)} p95={ms(claims, 0.95)} max={ms(claims, 1.0)}"
    )
    assert statistics.median(pickups) < 0.1


# 10. Terminated database connections while 500 jobs flow.


def assert_every_job_ran_and_each_rerun_is_explained(jobs: list[Job]) -> int:
    """At-least-once: the final attempt ran to its end, no attempt ran twice, and every
    earlier attempt left a history entry (a recorded failure or a reaped lease).

    Returns how many jobs ran more than once.
    """
    runs: dict[int, list[tuple[int, bool]]] = {}
    for job_id, attempt, finished_at in Execution.objects.values_list(
        "job_id", "attempt", "finished_at"
    ):
        runs.setdefault(job_id, []).append((attempt, finished_at is not None))
    reruns = 0
    for job in Job.objects.filter(pk__in=[job.pk for job in jobs]):
        attempts = [attempt for attempt, _ in runs.get(job.pk, [])]
        assert len(attempts) == len(set(attempts)), f"job {job.pk} ran an attempt twice: {attempts}"
        assert (job.attempts, True) in runs.get(job.pk, []), f"job {job.pk}'s last attempt"
        explained = {entry["attempt"] for entry in job.errors}
        assert set(range(1, job.attempts)) <= explained, (job.pk, job.attempts, job.errors)
        reruns += len(attempts) > 1
    return reruns


@e2e_db
def test_worker_survives_terminated_connections_while_500_jobs_flow(
    start_worker: StartWorker,
) -> None:
    jobs = paced_short_lease.enqueue_many([((), {"milliseconds": 8})] * 500)
    worker = start_worker("--concurrency", "4", settings={"POLL_INTERVAL": 0.5})

    for progress in (100, 200, 300):
        wait_until(
            lambda progress=progress: Job.objects.succeeded().count() >= progress,
            30,
            f"{progress} jobs done",
        )
        assert Job.objects.active().exists(), "jobs must still be flowing"
        assert terminate_other_connections() >= 1

    wait_until(lambda: all_in_state(jobs, JobState.SUCCEEDED), WAIT, "all 500 jobs succeeded")
    assert worker.process.poll() is None, worker.log()
    log = worker.log()
    # A loop whose connection was terminated says so once (then recovers); a job outcome
    # whose write met it says it is not written yet.
    noticed = ("failed (server unavailable)", "failed (connection lost)", "not written yet")
    assert any(line in log for line in noticed), log
    reruns = assert_every_job_ran_and_each_rerun_is_explained(jobs)
    logger.info(f"jobs run more than once (explained by their history): {reruns}")

    worker.send(signal.SIGTERM)
    assert worker.wait(30) == 0


@contextmanager
def idle_session_timeout(value: str) -> Iterator[None]:
    """``idle_session_timeout`` for new sessions of this test's database only (never the
    server's), reset at exit. The test's own session, already open, keeps none."""
    name = connection.ops.quote_name(connection.settings_dict["NAME"])
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER DATABASE {name} SET idle_session_timeout = %s", [value])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER DATABASE {name} RESET idle_session_timeout")


@e2e_db
def test_connections_the_server_closes_when_idle_are_reconnected_with_one_info_line(
    start_worker: StartWorker,
) -> None:
    with idle_session_timeout("500ms"):
        worker = start_worker("--concurrency", "2", settings={"REAPER_INTERVAL": 0.3})
        worker.wait_for_log("wake-ups arrive")
        jobs = []
        for n in range(6):
            jobs.append(recorded.enqueue(label=f"idle-{n}"))
            wait_until(lambda: all_in_state(jobs, JobState.SUCCEEDED), 10, f"job {n} done")
            # The scenario, not a wait for anything: every worker connection sits idle past
            # the server's timeout (the reaper's pauses are shorter, the claimer's longer).
            time.sleep(1.2)
        assert listening("dbqueue"), "the LISTEN connection is exempt, so still there"
        worker.send(signal.SIGTERM)
        assert worker.wait(30) == 0

    log = worker.log()
    (line,) = [line for line in log.splitlines() if "closed an idle connection" in line]
    assert " INFO " in line, line
    assert line.endswith("reconnecting, quietly from now on"), line
    assert " WARNING " not in log, log
    assert " ERROR " not in log, log
    assert all_in_state(jobs, JobState.SUCCEEDED)


def cancel_statements_waiting_for_a_lock() -> int:
    """``pg_cancel_backend`` each session of this database (not the test's) waiting on a lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND wait_event_type = 'Lock'"
        )
        (cancelled,) = cursor.fetchone()
    return cancelled


@e2e_db
def test_a_statement_cancelled_by_pg_cancel_backend_is_logged_as_cancelled(
    start_worker: StartWorker,
) -> None:
    job = gated.enqueue("finish-under-a-lock")
    worker = start_worker()
    running_token(job)

    # A row lock alone would not do: the success write skips a row locked elsewhere.
    with writes_locked_out():
        open_gate("finish-under-a-lock")  # its success write now waits for the table lock
        wait_until(lambda: cancel_statements_waiting_for_a_lock() >= 1, what="a write to cancel")
        worker.wait_for_log("(statement cancelled)")

    wait_until(lambda: all_in_state([job], JobState.SUCCEEDED), what="the job written after all")
    worker.send(signal.SIGTERM)
    assert worker.wait(30) == 0
    log = worker.log()
    assert "statement timeout" not in log, log


# 11. Graceful shutdown on SIGTERM and SIGINT.


@e2e_db
def test_sigterm_lets_a_short_job_finish_and_exits_0(start_worker: StartWorker) -> None:
    job = gated.enqueue("short-job")
    worker = start_worker("--shutdown-timeout", "30")
    running_token(job)

    worker.send(signal.SIGTERM)
    worker.wait_for_log("got SIGTERM: draining")
    later = recorded.enqueue(label="after-sigterm")
    assert worker.process.poll() is None  # still waiting for its job
    open_gate("short-job")

    assert worker.wait(30) == 0
    job.refresh_from_db()
    assert (job.state, job.attempts) == (JobState.SUCCEEDED, 1)
    assert "released at shutdown" not in worker.log()
    assert_untouched(later)  # draining claims nothing new


@e2e_db
def test_sigterm_releases_a_long_job_with_its_attempt_counted_and_exits_0(
    start_worker: StartWorker,
) -> None:
    job = gated.enqueue("long-job")
    worker = start_worker("--shutdown-timeout", "0.5")
    token = running_token(job)

    worker.send(signal.SIGTERM)

    assert worker.wait(30) == 0
    assert_released(job, token)
    assert f"job id={job.pk} released at shutdown (attempt counted, code=SHUTDOWN)" in worker.log()


@e2e_db
def test_sigterms_over_a_long_job_spend_its_attempts_until_it_is_dead(
    start_worker: StartWorker,
) -> None:
    """Guarantee 4 under rolling deploys: each interrupted attempt counts, the last ends dead."""
    job = gated.enqueue("never-finishes")
    Job.objects.filter(pk=job.pk).update(max_attempts=3)
    for attempt in range(1, 4):
        worker = start_worker("--shutdown-timeout", "0.2")
        wait_until(
            lambda n=attempt: Execution.objects.filter(job_id=job.pk).count() == n,
            30,
            what=f"attempt {attempt} running",
        )
        worker.send(signal.SIGTERM)
        assert worker.wait(30) == 0

    job.refresh_from_db()
    assert (job.state, job.attempts, job.last_error_code) == (JobState.DEAD, 3, SHUTDOWN)
    assert [entry["code"] for entry in job.errors] == [SHUTDOWN] * 3
    assert Execution.objects.filter(job_id=job.pk).count() == 3


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT], ids=["SIGHUP", "SIGQUIT"])
@e2e_db
def test_sighup_and_sigquit_drain_like_sigterm(
    start_worker: StartWorker, sig: signal.Signals
) -> None:
    job = gated.enqueue("drained")
    worker = start_worker("--shutdown-timeout", "30")
    running_token(job)

    worker.send(sig)
    worker.wait_for_log(f"got {sig.name}: draining")
    assert worker.process.poll() is None  # waiting for its job, not killed
    open_gate("drained")

    assert worker.wait(30) == 0
    job.refresh_from_db()
    assert (job.state, job.attempts, job.errors) == (JobState.SUCCEEDED, 1, [])


@e2e_db
def test_sigusr1_logs_a_status_line_and_the_worker_goes_on(start_worker: StartWorker) -> None:
    job = gated.enqueue("status")
    worker = start_worker("--worker-id", "status-worker", "--concurrency", "2")
    running_token(job)

    worker.send(signal.SIGUSR1)
    worker.wait_for_log(
        "worker status id=status-worker state=claiming live_jobs=1 busy_slots=1 free_slots=1"
    )
    later = recorded.enqueue(label="after-sigusr1")
    wait_until(lambda: all_in_state([later], JobState.SUCCEEDED), what="a job run after SIGUSR1")
    open_gate("status")
    worker.send(signal.SIGTERM)
    assert worker.wait(30) == 0


@e2e_db
def test_second_sigint_releases_at_once(start_worker: StartWorker) -> None:
    job = gated.enqueue("interrupted-job")
    worker = start_worker("--shutdown-timeout", "60")
    token = running_token(job)

    worker.send(signal.SIGINT)
    worker.wait_for_log("got SIGINT: draining")
    assert worker.process.poll() is None  # draining, up to 60 s
    second_sigint = time.monotonic()
    worker.send(signal.SIGINT)

    assert worker.wait(15) == 0
    logger.info(f"exit {time.monotonic() - second_sigint:.2f}s after the second SIGINT")
    assert_released(job, token)
    assert "second SIGINT: releasing running jobs now" in worker.log()
    assert f"job id={job.pk} released at shutdown (attempt counted, code=SHUTDOWN)" in worker.log()


# 12. Operator mistakes: bad options, a task module deleted under queued jobs. (Numbers out
# of range: tests/integration/test_commands.py, for every command.)


@pytest.mark.parametrize(
    ("option", "value", "queues"),
    [("--queue", "no spaces!", None), ("--queue", "elsewhere", ["default", "mail"])],
    ids=["bad-name", "unknown"],
)
def test_bad_options_raise_command_error(
    settings: Settings, option: str, value: str, queues: list[str] | None
) -> None:
    settings.DBQUEUE = {**settings.DBQUEUE, "QUEUES": queues}
    # --burst: were the option wrongly accepted, the command would end instead of serving.
    with pytest.raises(CommandError) as error:
        call_command("runworkers", "--burst", option, value)

    message = str(error.value)
    assert message.startswith(option), message
    assert value in message, message
    if queues is not None:
        assert "DBQUEUE['QUEUES']" in message


@e2e_db
def test_a_worker_id_the_database_cannot_encode_is_refused_before_any_claim(
    start_worker: StartWorker,
) -> None:
    """``--worker-id $'w\\xff'``: the byte reaches Python as a lone surrogate no database stores."""
    job = recorded.enqueue(label="not-for-this-worker")
    worker = start_worker("--burst", "--worker-id", "w\udcff")

    assert worker.wait(30) == 1
    assert "CommandError: --worker-id 'w\\udcff' holds the surrogate code point" in worker.log()
    assert_untouched(job)


def test_a_worker_with_eager_mode_on_is_a_command_error(settings: Settings) -> None:
    settings.DBQUEUE = {**settings.DBQUEUE, "EAGER": True}

    with pytest.raises(CommandError, match=r"DBQUEUE\['EAGER'\] is on.*for tests"):
        call_command("runworkers", "--burst")


@pytest.mark.parametrize("worker_id", ["w" * 256, ""], ids=["256-characters", "empty"])
def test_a_worker_id_the_column_cannot_hold_is_a_command_error(worker_id: str) -> None:
    # --burst: were the option wrongly accepted, the command would run and fail at its claim.
    with pytest.raises(CommandError, match=r"--worker-id must be 1-255 characters") as error:
        call_command("runworkers", "--burst", "--worker-id", worker_id)

    assert f"not {len(worker_id)}" in str(error.value)


@e2e_db
def test_job_whose_task_module_was_deleted_is_dead_task_not_found_and_the_worker_continues(
    start_worker: StartWorker,
) -> None:
    orphan = JobFactory(task="tests.e2e.deleted_module.gone", max_attempts=3)
    normal = recorded.enqueue(label="after-the-orphan")

    worker = start_worker("--burst")
    assert worker.wait(30) == 0

    orphan.refresh_from_db()
    assert (orphan.state, orphan.attempts, orphan.last_error_code) == (
        JobState.DEAD,
        1,
        "TASK_NOT_FOUND",
    )
    normal.refresh_from_db()
    assert normal.state == JobState.SUCCEEDED
    log = worker.log()
    dead_line = log.index(f"job id={orphan.pk} task=tests.e2e.deleted_module.gone")
    assert "outcome=dead code=TASK_NOT_FOUND" in log[dead_line:].splitlines()[0]
    assert log.index(f"job id={normal.pk} ") > dead_line  # it carried on after the dead job


@e2e_db
def test_max_jobs_exits_after_n_jobs(start_worker: StartWorker) -> None:
    jobs = recorded.enqueue_many([((), {"label": f"max-{n}"}) for n in range(10)])

    worker = start_worker("--max-jobs", "3", "--concurrency", "2")

    assert worker.wait(30) == 0
    assert states(jobs) == Counter({JobState.SUCCEEDED: 3, JobState.READY: 7})
    assert Execution.objects.count() == 3
    assert "claimed=3 succeeded=3" in worker.log()
    for job in Job.objects.ready():
        assert_untouched(job)


@e2e_db
def test_burst_exits_when_nothing_is_due(start_worker: StartWorker) -> None:
    later = recorded.using(delay=timedelta(hours=1)).enqueue(label="later")
    due = recorded.enqueue(label="due")

    # Polls 30 s apart: a burst worker that waited for anything would not exit in time.
    worker = start_worker("--burst", settings={"POLL_INTERVAL": 30})

    assert worker.wait(15) == 0
    assert "burst drained" in worker.log()
    due.refresh_from_db()
    assert due.state == JobState.SUCCEEDED
    assert_untouched(later)
