"""Per-key serial execution in the claim, and ``async def`` tasks.

Jobs sharing a ``serial_key`` are claimed one at a time in enqueue (id)
order: a job waits while an earlier job with its key is ``ready`` or
``running``. Async tasks declared with our ``@task`` run to completion on the
job's thread, so two of them in two slots run at once.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import timedelta
from itertools import pairwise
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_dbqueue import InvalidJob, leases, sql
from django_dbqueue.leases import Lease, cancel, claim, complete, fail, release, requeue
from django_dbqueue.models import Job, JobState
from django_dbqueue.worker.execute import execute
from django_dbqueue.worker.outcome import Outcome
from django_dbqueue.worker.worker import Worker, WorkerOptions
from tests import plans
from tests.integration.test_claim_plan import generic_plan
from tests.jobs import serial_tasks, tasks
from tests.testapp.models import Gate

logger = logging.getLogger(__name__)

WAIT = 30.0  # seconds any thread may take before the test fails
LATER = timedelta(minutes=5)


def enqueue(key: str | None, **options: Any) -> Job:
    return tasks.noop.using(serial_key=key, **options).enqueue()


def claimed_ids(limit: int = 100, queues: list[str] | None = None) -> list[int]:
    """Claim as many jobs as allowed (up to ``limit``) and complete none of them."""
    return sorted(lease.job_id for lease in claim(queues, "w1", limit))


def claim_only(job: Job) -> Lease:
    """Claim with a large limit; exactly ``job`` must come back."""
    leases = claim(None, "w1", 100)
    assert [lease.job_id for lease in leases] == [job.pk]
    return leases[0]


def state_of(job: Job) -> str:
    state: str = Job.objects.values_list("state", flat=True).get(pk=job.pk)
    return state


@pytest.mark.django_db
class TestSerialClaim:
    def test_jobs_of_one_key_are_claimed_one_at_a_time_in_enqueue_order(self) -> None:
        jobs = [enqueue("order:42") for _ in range(4)]
        for job in jobs:
            lease = claim_only(job)
            assert complete(lease, None)
        assert claimed_ids() == []

    def test_the_serial_key_is_stored_on_the_job(self) -> None:
        job = enqueue("order:42")
        assert job.serial_key == "order:42"
        assert Job.objects.get(pk=job.pk).serial_key == "order:42"

    def test_a_running_job_holds_back_later_jobs_of_its_key(self) -> None:
        first, second = enqueue("order:42"), enqueue("order:42")
        claim_only(first)
        assert claimed_ids() == []
        assert state_of(second) == JobState.READY

    def test_other_keys_and_keyless_jobs_are_claimed_alongside(self) -> None:
        a1, a2 = enqueue("a"), enqueue("a")
        b1, b2 = enqueue("b"), enqueue("b")
        n1, n2 = enqueue(None), enqueue(None)
        assert claimed_ids() == sorted([a1.pk, b1.pk, n1.pk, n2.pk])
        assert {state_of(a2), state_of(b2)} == {JobState.READY}

    def test_enqueue_many_with_a_key_runs_its_jobs_in_input_order(self) -> None:
        jobs = tasks.send_invoice.using(serial_key="batch").enqueue_many(
            [((n,), {}) for n in range(3)]
        )
        for job in jobs:
            leases = claim(["mail"], "w1", 10)
            assert [(lease.job_id, lease.args) for lease in leases] == [(job.pk, job.args)]
            assert complete(leases[0], None)

    def test_a_higher_priority_job_still_waits_for_an_earlier_job_of_its_key(self) -> None:
        low = enqueue("a", priority=0)
        enqueue("a", priority=10)
        claim_only(low)

    def test_a_key_orders_jobs_across_queues(self) -> None:
        enqueue("a", queue="first")
        enqueue("a", queue="second")
        assert claimed_ids(queues=["second"]) == []

    def test_an_earlier_job_scheduled_later_holds_back_due_jobs_of_its_key(self) -> None:
        scheduled = enqueue("a", delay=LATER)
        enqueue("a")
        keyless = enqueue(None)
        assert claimed_ids() == [keyless.pk]
        Job.objects.filter(pk=scheduled.pk).update(run_at=timezone.now())
        claim_only(scheduled)

    def test_a_retrying_job_keeps_later_jobs_of_its_key_waiting_and_runs_first(self) -> None:
        first, second = enqueue("a"), enqueue("a")
        assert fail(claim_only(first), ValueError("flaky"), timezone.now() + LATER)
        assert state_of(first) == JobState.READY
        assert claimed_ids() == []
        Job.objects.filter(pk=first.pk).update(run_at=timezone.now())
        assert complete(claim_only(first), None)
        claim_only(second)

    def test_a_released_job_is_claimed_again_before_later_jobs_of_its_key(self) -> None:
        first, _ = enqueue("a"), enqueue("a")
        assert release(claim_only(first), started=False)
        claim_only(first)

    def test_a_dead_earlier_job_no_longer_holds_back_its_key(self) -> None:
        first, second = enqueue("a"), enqueue("a")
        assert fail(claim_only(first), ValueError("broken"), None)
        assert state_of(first) == JobState.DEAD
        claim_only(second)

    def test_a_cancelled_earlier_job_no_longer_holds_back_its_key(self) -> None:
        first, second = enqueue("a"), enqueue("a")
        assert cancel([first.pk]) == [first.pk]
        claim_only(second)

    def test_a_requeued_dead_job_waits_while_a_later_job_of_its_key_runs(self) -> None:
        first, second = enqueue("a"), enqueue("a")
        assert fail(claim_only(first), ValueError("broken"), None)
        claim_only(second)
        assert requeue([first.pk], 1, "test") == [first.pk]
        assert claimed_ids() == []


@pytest.mark.django_db
class TestSerialKeyValidation:
    @pytest.mark.parametrize("key", ["", "k" * 256, 42, b"order:42"])
    def test_a_key_that_is_not_a_string_of_1_to_255_characters_is_refused(
        self, key: object
    ) -> None:
        with pytest.raises(InvalidJob, match="serial_key must be a string of 1-255 characters"):
            tasks.noop.using(serial_key=key).enqueue()  # type: ignore[arg-type]  # the bad type is the point.
        assert not Job.objects.exists()

    def test_enqueue_many_refuses_a_bad_key_and_writes_nothing(self) -> None:
        with pytest.raises(InvalidJob, match="serial_key"):
            tasks.noop.using(serial_key="").enqueue_many([((), {}), ((), {})])
        assert not Job.objects.exists()

    def test_a_key_of_255_characters_is_accepted(self) -> None:
        job = enqueue("k" * 255)
        assert Job.objects.get(pk=job.pk).serial_key == "k" * 255


def claim_and_check(worker_id: str, key_of: dict[int, str], violations: list[str]) -> None:
    """Claim up to 3 jobs; while holding each, check its key's invariants; complete them.

    The invariants: no other job of the key runs, and every earlier one has
    succeeded. Each violation is described in ``violations``.
    """
    for lease in claim(None, worker_id, 3):
        key = key_of[lease.job_id]
        running = list(Job.objects.running().filter(serial_key=key).values_list("pk", flat=True))
        if running != [lease.job_id]:
            violations.append(f"{worker_id} holds {lease.job_id}; running of {key}: {running}")
        unfinished_earlier = list(
            Job.objects.filter(serial_key=key, pk__lt=lease.job_id)
            .exclude(state=JobState.SUCCEEDED)
            .values_list("pk", flat=True)
        )
        if unfinished_earlier:
            violations.append(f"{lease.job_id} claimed before {unfinished_earlier}")
        assert complete(lease, None)


@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_never_run_two_jobs_of_one_key_and_keep_its_order() -> None:
    keys = [f"order:{n}" for n in range(10)]
    key_of = {enqueue(key).pk: key for _ in range(20) for key in keys}
    violations: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def claimer(worker_id: str) -> None:
        try:
            start.wait(WAIT)
            deadline = time.monotonic() + WAIT
            while Job.objects.active().exists():
                assert time.monotonic() < deadline, "jobs still active after the wait"
                claim_and_check(worker_id, key_of, violations)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread below.
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=claimer, args=(f"w{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT + 5)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert violations == []
    jobs = list(Job.objects.order_by("pk"))
    assert {(job.state, job.attempts) for job in jobs} == {(JobState.SUCCEEDED, 1)}
    assert len({job.last_worker_id for job in jobs}) > 1
    for key in keys:
        of_key = [job for job in jobs if job.serial_key == key]
        for earlier, later in pairwise(of_key):
            assert earlier.finished_at is not None
            assert later.started_at is not None
            assert later.started_at >= earlier.finished_at, (key, earlier.pk, later.pk)


BACKLOG = 100_000


@pytest.fixture
def serial_backlog() -> None:
    """100k ready jobs (half keyed over 1000 keys, half keyless) and 100k finished ones.

    Priority rises with the id, so the claim meets later keyed jobs first: each
    is held back by an earlier job of its key, and the probe has to find it.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at,
                attempts, max_attempts, lease_token, lease_seconds, created_at, finished_at,
                serial_key, last_error_code, last_error, errors)
            SELECT (ARRAY['default', 'mail', 'reports'])[1 + n %% 3], 'tests.jobs.tasks.noop',
                '[]', '{}', CASE WHEN n %% 2 = 0 THEN 'ready' ELSE 'succeeded' END,
                n * 5 / (%s + 1), now() - interval '1 minute',
                CASE WHEN n %% 2 = 0 THEN 0 ELSE 1 END, 5,
                CASE WHEN n %% 2 = 0 THEN 0 ELSE 1 END, 60, now(),
                CASE WHEN n %% 2 = 0 THEN NULL ELSE now() END,
                CASE WHEN n %% 4 = 0 THEN 'key:' || (n / 4) %% 1000 END, '', '', '[]'
            FROM generate_series(1, %s) AS n
            """,
            [2 * BACKLOG, 2 * BACKLOG],
        )
        cursor.execute("ANALYZE dbqueue_job")


def explain_claim(queues: list[str] | None, options: str) -> dict[str, Any]:
    """The JSON plan of the named claim statement, limit 10."""
    statement = sql.statements("postgresql")["claim"]
    params = leases.claim_params(queues, "w1", 10)
    adapted = {key: sql.adapt(connection, value) for key, value in params.items()}
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN ({options}, FORMAT JSON) " + statement, adapted)
        (plan,) = cursor.fetchone()
    found: dict[str, Any] = (json.loads(plan) if isinstance(plan, str) else plan)[0]
    return found


def probes(plan: dict[str, Any]) -> tuple[int, int]:
    """``(probes run, earlier jobs found)`` by the serial-key index in an analyzed plan."""
    found = [
        (node["Actual Loops"], node["Actual Loops"] * node["Actual Rows"])
        for node in plans.nodes(plan)
        if node.get("Index Name") == "dbqueue_job_serial_active"
    ]
    return sum(loops for loops, _ in found), sum(rows for _, rows in found)


@pytest.mark.postgresql
@pytest.mark.django_db
@pytest.mark.parametrize("queues", [["default"], None])
def test_serial_claim_reads_the_ready_index_and_probes_keys_through_the_serial_index(
    serial_backlog: None, queues: list[str] | None
) -> None:
    scans = plans.scans(explain_claim(queues, "COSTS"))
    assert scans & {"Index Scan:dbqueue_job_ready", "Index Only Scan:dbqueue_job_ready"}
    assert scans & {
        "Index Scan:dbqueue_job_serial_active",
        "Index Only Scan:dbqueue_job_serial_active",
    }
    assert not any(scan.startswith(("Seq Scan", "Bitmap Heap Scan")) for scan in scans), scans
    with transaction.atomic():
        analyzed = explain_claim(queues, "ANALYZE")
        transaction.set_rollback(True)
    claimed = analyzed["Plan"]["Actual Rows"]
    probed, held_back = probes(analyzed)
    # The claim's cost in figures (logged at INFO: --log-cli-level=INFO shows them).
    logger.info(
        f"serial claim queues={queues}: {analyzed['Execution Time']:.2f} ms, {claimed} jobs "
        f"claimed, {probed} key probes found {held_back} held back; {2 * BACKLOG} rows"
    )
    assert claimed == 10
    assert held_back > 0


DEEP_KEY = 100_000
#: Rows of the job table a claim of 10 may read with ``DEEP_KEY`` jobs waiting on one key;
#: a claim that checked every keyed job against the earlier ones read 100,031.
DEEP_KEY_ROWS_READ = 1_000
#: A bound for a claim that walks the key, not a speed target: 1-2 ms measured; a claim that
#: checked every keyed job took 135 ms for one queue and over 120 s for several.
DEEP_KEY_CLAIM_MS = 100


#: How the ``DEEP_KEY`` keyed jobs share their keys: all on one, or each on its own.
KEYS_OF_DEEP_BACKLOG = {"one key": "'deep'", "a key each": "'key:' || n"}


@pytest.fixture(params=list(KEYS_OF_DEEP_BACKLOG))
def deep_serial_key(request: pytest.FixtureRequest) -> None:
    """``DEEP_KEY`` due keyed jobs, ahead of 20 keyless jobs in two queues.

    The keyed jobs (all on key ``deep``, or each on a key of its own) have the
    higher priority, so in ready order the claim meets them all before any
    keyless job. Committed (the tests are transactional, so
    the table is emptied afterwards, not left bloated) and vacuumed: the claim
    is timed on the rows alone, not on dead rows the tests before left.
    """
    key = KEYS_OF_DEEP_BACKLOG[request.param]
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at,
                attempts, max_attempts, lease_token, lease_seconds, created_at, serial_key,
                last_error_code, last_error, errors)
            SELECT CASE WHEN n <= %s THEN 'default' ELSE (ARRAY['default', 'mail'])[1 + n %% 2]
                   END,
                'tests.jobs.tasks.noop', '[]', '{{}}', 'ready',
                CASE WHEN n <= %s THEN 5 ELSE 0 END, now() - interval '1 minute', 0, 5, 0, 60,
                now(), CASE WHEN n <= %s THEN {key} END, '', '', '[]'
            FROM generate_series(1, %s) AS n
            """,
            [DEEP_KEY, DEEP_KEY, DEEP_KEY, DEEP_KEY + 20],
        )
        cursor.execute("VACUUM ANALYZE dbqueue_job")


def rows_read(plan: dict[str, Any]) -> int:
    """Rows every read of the job table returned or filtered out, over all its loops."""
    return sum(
        node["Actual Loops"] * (node["Actual Rows"] + node.get("Rows Removed by Filter", 0))
        for node in plans.reads(plan)
    )


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("prepared", [False, True])
@pytest.mark.parametrize("queues", [["default"], ["default", "mail"], None])
def test_a_claim_reads_a_bounded_number_of_rows_however_many_keyed_jobs_wait(
    deep_serial_key: None, queues: list[str] | None, prepared: bool
) -> None:
    params = leases.claim_params(queues, "w1", 10)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL jit = off")  # as on the worker's connections
        if prepared:
            plan = json.loads(generic_plan("claim", params, analyze=True))[0]
        else:
            plan = explain_claim(queues, "ANALYZE")
        transaction.set_rollback(True)
    read = rows_read(plan)
    logger.info(
        f"claim with {DEEP_KEY} keyed jobs, queues={queues} prepared={prepared}: "
        f"{plan['Execution Time']:.2f} ms, {read} rows read"
    )
    assert plan["Plan"]["Actual Rows"] == 10
    assert read < DEEP_KEY_ROWS_READ
    assert plan["Execution Time"] < DEEP_KEY_CLAIM_MS


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("deep_serial_key", ["one key"], indirect=True)
def test_a_deep_serial_key_gives_its_first_job_and_keyless_jobs_the_rest(
    deep_serial_key: None,
) -> None:
    first = Job.objects.filter(serial_key="deep").order_by("id").first()
    assert first is not None

    claimed = claim(None, "w1", 10)

    claimed_ids = [lease.job_id for lease in claimed]
    keyed = Job.objects.filter(pk__in=claimed_ids, serial_key="deep")
    assert list(keyed.values_list("pk", flat=True)) == [first.pk]
    assert len(claimed) == 10
    assert len(claim(None, "w2", 30)) == 11  # the keyless jobs left: the key waits
    running = Job.objects.filter(serial_key="deep", state=JobState.RUNNING)
    assert list(running.values_list("pk", flat=True)) == [first.pk]


@pytest.mark.django_db
class TestAsyncTasksExecuted:
    def test_an_async_task_runs_and_its_result_is_stored(self) -> None:
        job = serial_tasks.add.enqueue(2, 3)
        assert execute(claim_only(job)) == Outcome.SUCCEEDED
        assert Job.objects.get(pk=job.pk).result == 5

    def test_an_async_task_can_await_asyncio_sleep(self) -> None:
        job = serial_tasks.naps.enqueue(0.05)
        assert execute(claim_only(job)) == Outcome.SUCCEEDED
        assert Job.objects.get(pk=job.pk).result >= 0.05

    def test_an_async_task_takes_the_job_context(self) -> None:
        job = serial_tasks.reports_context.enqueue("ctx")
        assert execute(claim_only(job)) == Outcome.SUCCEEDED
        assert Job.objects.get(pk=job.pk).result == {"label": "ctx", "job_id": job.pk, "attempt": 1}

    def test_an_async_task_reads_the_database_through_the_async_orm(self) -> None:
        job = serial_tasks.counts_jobs_of_queue.using(queue="async").enqueue("async")
        tasks.noop.using(queue="async", delay=LATER).enqueue()
        assert execute(claim_only(job)) == Outcome.SUCCEEDED
        assert Job.objects.get(pk=job.pk).result == 2

    def test_an_async_task_that_raises_is_retried_with_its_error(self) -> None:
        job = serial_tasks.fails.enqueue("boom")
        assert execute(claim_only(job)) == Outcome.RETRIED
        failed = Job.objects.get(pk=job.pk)
        assert (failed.state, failed.last_error_code) == (JobState.READY, "ValueError")
        assert failed.errors[-1]["message"] == "ValueError: boom"

    def test_an_async_task_calling_the_sync_orm_fails_with_django_s_error(self) -> None:
        job = serial_tasks.uses_the_sync_orm.enqueue()
        assert execute(claim_only(job)) == Outcome.RETRIED
        assert Job.objects.get(pk=job.pk).last_error_code == "SynchronousOnlyOperation"


def closed_gates(*names: str) -> None:
    Gate.objects.bulk_create([Gate(name=name) for name in names])


@pytest.mark.django_db(transaction=True)
class TestAsyncTasksInTheWorker:
    def test_a_burst_worker_runs_async_jobs_and_stores_their_results(self) -> None:
        jobs = serial_tasks.add.enqueue_many([((n, n), {}) for n in range(6)])
        Worker(WorkerOptions(burst=True, concurrency=2)).run()
        stored = dict(Job.objects.values_list("pk", "result"))
        assert [stored[job.pk] for job in jobs] == [2 * n for n in range(6)]
        assert set(Job.objects.values_list("state", flat=True)) == {JobState.SUCCEEDED}

    def test_two_async_jobs_in_two_slots_run_at_once(self) -> None:
        closed_gates("a", "b")
        a = serial_tasks.rendezvous.enqueue("a", "b", WAIT)
        b = serial_tasks.rendezvous.enqueue("b", "a", WAIT)
        Worker(WorkerOptions(burst=True, concurrency=2)).run()
        outcomes = {job.pk: (job.result, job.last_error) for job in Job.objects.all()}
        assert outcomes == {a.pk: ("a", ""), b.pk: ("b", "")}

    def test_with_one_slot_the_rendezvous_cannot_happen(self) -> None:
        """The control for the test above: the first job times out waiting for the second."""
        closed_gates("a", "b")
        a = serial_tasks.rendezvous.enqueue("a", "b", 0.3)
        b = serial_tasks.rendezvous.enqueue("b", "a", 0.3)
        Worker(WorkerOptions(burst=True, concurrency=1)).run()
        assert (state_of(a), Job.objects.get(pk=a.pk).last_error_code) == (
            JobState.DEAD,
            "TimeoutError",
        )
        assert state_of(b) == JobState.SUCCEEDED
