"""Writing jobs: same-transaction enqueue, wake-ups, options, scheduling, dedupe, validation."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

import psycopg
import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import IntegrityError, connection, transaction
from django.db.models.signals import post_init, post_save
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from psycopg import sql as pg_sql

from django_dbqueue import (
    InvalidJob,
    Job,
    JobState,
    leases,
    middleware,
    on_save,
    sql,
    task,
    wakeups,
)
from django_dbqueue import conf as dbqueue_conf
from django_dbqueue.enqueue import STATEMENT_ENQUEUES
from django_dbqueue.jsontext import MAX_DEPTH
from django_dbqueue.signals import jobs_committed
from tests.jobs.enqueue_tasks import echo
from tests.jobs.limit_tasks import per_tenant
from tests.jobs.tasks import noop, send_invoice
from tests.raw_session import raw_session
from tests.testapp.models import Order
from tests.waiting import wait_until

WAIT = 10  # seconds any thread, event or poll may take before the test fails
QUIET = 0.2  # seconds to listen for a notification that must not arrive


class Rollback(Exception):
    """Raised inside ``atomic()`` to roll it back on purpose."""


@contextmanager
def rolled_back() -> Iterator[None]:
    """An ``atomic()`` block that rolls back when its body is done."""
    with suppress(Rollback), transaction.atomic():
        yield
        raise Rollback


def run_in_thread(func: Callable[[], Any]) -> Any:
    """Run ``func`` on another thread (so another database connection); return its result."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = func()
        except BaseException as exc:  # noqa: BLE001  # re-raised on the test's thread below
            outcome["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive(), "the other connection did not finish in time"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def job_ids_in_db() -> list[int]:
    return sorted(Job.objects.values_list("pk", flat=True))


@pytest.fixture
def committed_signals() -> Iterator[list[dict[str, Any]]]:
    """Every ``jobs_committed`` sent during the test, as its keyword arguments."""
    received: list[dict[str, Any]] = []

    def receiver(sender: object, **kwargs: Any) -> None:
        received.append({"sender": sender, "queue": kwargs["queue"], "job_ids": kwargs["job_ids"]})

    jobs_committed.connect(receiver, dispatch_uid="enqueuetests.committed_signals")
    yield received
    assert jobs_committed.disconnect(dispatch_uid="enqueuetests.committed_signals")


@pytest.fixture
def listener(transactional_db: None) -> Iterator[psycopg.Connection[Any]]:
    """A separate autocommit PostgreSQL connection listening on the notify channel."""
    conn = raw_session(autocommit=True)
    channel = dbqueue_conf.get().notify_channel
    conn.execute(pg_sql.SQL("LISTEN {}").format(pg_sql.Identifier(channel)))
    yield conn
    conn.close()


def payloads(conn: psycopg.Connection[Any], timeout: float) -> list[str]:
    """Notifications that arrive on ``conn`` within ``timeout`` seconds."""
    return [notify.payload for notify in conn.notifies(timeout=timeout)]


def assert_one_wake_up_at_commit(listener: psycopg.Connection[Any]) -> None:
    """Two jobs of the ``mail`` queue enqueued in one transaction wake ``listener`` once,
    at commit, with the queue as payload."""
    with transaction.atomic():
        send_invoice.enqueue(1)
        send_invoice.enqueue(2)
        assert payloads(listener, QUIET) == []
    delivered = list(listener.notifies(timeout=WAIT, stop_after=1))
    assert [(n.channel, n.payload) for n in delivered] == [("dbqueue", "mail")]
    assert payloads(listener, QUIET) == []


# --- Guarantee 1: same-transaction enqueue ---------------------------------------------


@pytest.mark.django_db(transaction=True)
class TestSameTransactionEnqueue:
    def test_rollback_leaves_neither_job_nor_business_row(self) -> None:
        with rolled_back():
            order = Order.objects.create(state="paid", total=10)
            send_invoice.enqueue(order.pk)
            assert Job.objects.count() == 1
        assert not Order.objects.exists()
        assert not Job.objects.exists()

    def test_commit_makes_job_and_business_row_visible(self) -> None:
        with transaction.atomic():
            order = Order.objects.create(state="paid", total=10)
            job = send_invoice.enqueue(order.pk)
        assert list(Order.objects.values_list("pk", flat=True)) == [order.pk]
        assert job_ids_in_db() == [job.pk]
        assert run_in_thread(job_ids_in_db) == [job.pk]

    def test_uncommitted_job_is_invisible_to_other_connections(self) -> None:
        with transaction.atomic():
            job = noop.enqueue()
            assert job_ids_in_db() == [job.pk]
            assert run_in_thread(job_ids_in_db) == []
        assert run_in_thread(job_ids_in_db) == [job.pk]

    @pytest.mark.locking
    def test_uncommitted_job_cannot_be_claimed_from_another_connection(self) -> None:
        with transaction.atomic():
            job = noop.enqueue()
            assert run_in_thread(lambda: leases.claim(None, "other", 10)) == []
        claimed = run_in_thread(lambda: leases.claim(None, "other", 10))
        assert [lease.job_id for lease in claimed] == [job.pk]

    def test_committed_job_can_be_claimed_from_another_connection(self) -> None:
        with transaction.atomic():
            job = noop.enqueue()
        claimed = run_in_thread(lambda: leases.claim(None, "other", 10))
        assert [lease.job_id for lease in claimed] == [job.pk]
        assert Job.objects.get(pk=job.pk).state == JobState.RUNNING


# --- Wake-ups only after commit ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
class TestWakeUpsAfterCommit:
    def test_jobs_committed_is_sent_once_after_commit_not_before(
        self, committed_signals: list[dict[str, Any]]
    ) -> None:
        with transaction.atomic():
            job = send_invoice.enqueue(1)
            assert committed_signals == []
        assert committed_signals == [{"sender": Job, "queue": "mail", "job_ids": [job.pk]}]

    def test_jobs_committed_carries_every_job_of_enqueue_many(
        self, committed_signals: list[dict[str, Any]]
    ) -> None:
        with transaction.atomic():
            jobs = send_invoice.enqueue_many([((1,), {}), ((2,), {}), ((3,), {})])
            assert committed_signals == []
        assert committed_signals == [
            {"sender": Job, "queue": "mail", "job_ids": [job.pk for job in jobs]}
        ]

    def test_jobs_committed_is_not_sent_on_rollback(
        self, committed_signals: list[dict[str, Any]]
    ) -> None:
        with rolled_back():
            send_invoice.enqueue(1)
        assert committed_signals == []
        with transaction.atomic():
            pass
        assert committed_signals == []

    def test_jobs_committed_is_sent_at_once_outside_a_transaction(
        self, committed_signals: list[dict[str, Any]]
    ) -> None:
        job = noop.enqueue()
        assert committed_signals == [{"sender": Job, "queue": "default", "job_ids": [job.pk]}]

    @pytest.mark.postgresql
    def test_notify_is_delivered_only_after_commit_with_queue_as_payload(
        self, listener: psycopg.Connection[Any]
    ) -> None:
        assert_one_wake_up_at_commit(listener)

    def test_one_wake_up_per_queue_and_transaction_carries_every_job(
        self, committed_signals: list[dict[str, Any]]
    ) -> None:
        with transaction.atomic():
            first, second = send_invoice.enqueue(1), send_invoice.enqueue(2)
            other = noop.enqueue()
        assert committed_signals == [
            {"sender": Job, "queue": "mail", "job_ids": [first.pk, second.pk]},
            {"sender": Job, "queue": "default", "job_ids": [other.pk]},
        ]

    def test_wake_ups_stay_one_per_queue_among_other_on_commit_callbacks(
        self, committed_signals: list[dict[str, Any]]
    ) -> None:
        ran: list[int] = []
        with transaction.atomic():
            jobs = []
            for n in range(3):
                jobs.append(send_invoice.enqueue(n))
                transaction.on_commit(lambda n=n: ran.append(n))
        assert ran == [0, 1, 2]
        assert committed_signals == [
            {"sender": Job, "queue": "mail", "job_ids": [job.pk for job in jobs]}
        ]

    def test_jobs_of_a_rolled_back_savepoint_are_not_announced(
        self, committed_signals: list[dict[str, Any]]
    ) -> None:
        with transaction.atomic():
            kept = send_invoice.enqueue(1)
            with rolled_back():
                send_invoice.enqueue(2)
            later = send_invoice.enqueue(3)
        assert committed_signals == [
            {"sender": Job, "queue": "mail", "job_ids": [kept.pk, later.pk]}
        ]

    def test_only_the_first_enqueue_on_a_queue_in_a_transaction_sends_the_notify(self) -> None:
        assert wakeups.needs_notify(connection, "mail")  # autocommit: every enqueue commits
        with transaction.atomic():
            assert wakeups.needs_notify(connection, "mail")
            send_invoice.enqueue(1)
            assert not wakeups.needs_notify(connection, "mail")
            assert wakeups.needs_notify(connection, "default")
            with rolled_back():
                # A savepoint notifies on its own: its rollback would discard the NOTIFY.
                assert wakeups.needs_notify(connection, "mail")
                send_invoice.enqueue(2)
                assert not wakeups.needs_notify(connection, "mail")
            assert not wakeups.needs_notify(connection, "mail")
        with rolled_back():
            send_invoice.enqueue(3)
        with transaction.atomic():
            assert wakeups.needs_notify(connection, "mail")  # the rollback took the last one

    @pytest.mark.postgresql
    def test_notify_is_not_delivered_on_rollback(self, listener: psycopg.Connection[Any]) -> None:
        with rolled_back():
            send_invoice.enqueue(1)
        assert payloads(listener, QUIET) == []
        noop.enqueue()
        delivered = list(listener.notifies(timeout=WAIT, stop_after=1))
        assert [n.payload for n in delivered] == ["default"]

    @pytest.mark.postgresql
    def test_notify_uses_the_configured_channel(
        self, settings: Any, listener: psycopg.Connection[Any]
    ) -> None:
        listener.execute("LISTEN other_channel")
        settings.DBQUEUE = {**settings.DBQUEUE, "NOTIFY_CHANNEL": "other_channel"}
        noop.enqueue()
        delivered = list(listener.notifies(timeout=WAIT, stop_after=1))
        assert [(n.channel, n.payload) for n in delivered] == [("other_channel", "default")]


# --- The returned Job --------------------------------------------------------------------


def assert_matches_row(job: Job) -> None:
    """The returned instance holds exactly what the database row holds."""
    row = Job.objects.get(pk=job.pk)
    fields = [
        "queue",
        "task",
        "args",
        "kwargs",
        "state",
        "priority",
        "run_at",
        "attempts",
        "max_attempts",
        "lease_token",
        "lease_seconds",
        "worker_id",
        "lease_until",
        "created_at",
        "dedupe_key",
        "subject_type_id",
        "subject_id",
    ]
    assert {name: getattr(job, name) for name in fields} == {
        name: getattr(row, name) for name in fields
    }


@pytest.mark.django_db
class TestReturnedJob:
    def test_job_takes_queue_priority_attempts_and_lease_from_the_task(self) -> None:
        before = timezone.now()
        job = send_invoice.enqueue(7, copy=True)
        after = timezone.now()
        assert job.pk is not None
        assert job.state == JobState.READY
        assert job.task == "tests.jobs.tasks.send_invoice"
        assert (job.args, job.kwargs) == ([7], {"copy": True})
        assert (job.queue, job.priority, job.max_attempts, job.lease_seconds) == ("mail", 3, 3, 20)
        assert (job.attempts, job.lease_token, job.worker_id, job.lease_until) == (0, 0, None, None)
        assert job.deduplicated is False
        assert before - timedelta(seconds=1) <= job.created_at <= after + timedelta(seconds=1)
        assert before - timedelta(seconds=1) <= job.run_at <= after + timedelta(seconds=1)
        assert_matches_row(job)

    def test_job_takes_queue_attempts_and_lease_from_settings_when_task_leaves_them(
        self, settings: Any
    ) -> None:
        settings.DBQUEUE = {"DEFAULT_QUEUE": "fallback", "MAX_ATTEMPTS": 7, "LEASE_SECONDS": 45}
        job = noop.enqueue()
        assert (job.queue, job.priority, job.max_attempts, job.lease_seconds) == (
            "fallback",
            0,
            7,
            45,
        )
        assert (job.args, job.kwargs) == ([], {})
        assert_matches_row(job)

    def test_using_overrides_queue_and_priority_of_the_task(self) -> None:
        job = send_invoice.using(queue="reports", priority=-5).enqueue(1)
        assert (job.queue, job.priority, job.max_attempts, job.lease_seconds) == (
            "reports",
            -5,
            3,
            20,
        )
        assert_matches_row(job)

    def test_using_priority_zero_overrides_a_nonzero_task_priority(self) -> None:
        job = send_invoice.using(priority=0).enqueue(1)
        assert job.priority == 0
        assert Job.objects.get(pk=job.pk).priority == 0

    def test_extreme_priorities_are_stored(self) -> None:
        high = noop.using(priority=2**31 - 1).enqueue()
        low = noop.using(priority=-(2**31)).enqueue()
        assert Job.objects.get(pk=high.pk).priority == 2**31 - 1
        assert Job.objects.get(pk=low.pk).priority == -(2**31)

    def test_json_arguments_round_trip(self) -> None:
        args = [None, True, 1.5, "ü ☃", [1, {"a": None}], {"nested": [1, 2]}]
        kwargs = {"when": "2024-01-01", "n": 0, "empty": {}}
        job = echo.enqueue(*args, **kwargs)
        assert (job.args, job.kwargs) == (args, kwargs)
        assert_matches_row(job)

    def test_returned_jobs_are_the_instances_a_query_builds(self) -> None:
        jobs = send_invoice.using(subject=Order.objects.create()).enqueue_many([((1,), {})] * 3)
        for job in jobs:
            assert_built_as_by_a_query(job)
            job.priority = 9
            job.save(update_fields=["priority"])  # an ordinary instance: saving updates its row
            assert Job.objects.get(pk=job.pk).priority == 9

    def test_with_init_receivers_connected_each_returned_job_goes_through_them(self) -> None:
        seen: list[Job] = []

        def receiver(sender: type[Job], instance: Job, **_: Any) -> None:
            seen.append(instance)

        post_init.connect(receiver, sender=Job)
        try:
            jobs = noop.enqueue_many([((), {})] * 2)
        finally:
            post_init.disconnect(receiver, sender=Job)
        assert seen == jobs
        for job in jobs:
            assert_built_as_by_a_query(job)


def assert_built_as_by_a_query(job: Job) -> None:
    """``job`` holds what ``Job.objects.get`` builds for its row, attribute for attribute."""
    read = Job.objects.get(pk=job.pk)
    ours, theirs = dict(vars(job)), dict(vars(read))
    state, read_state = ours.pop("_state"), theirs.pop("_state")
    assert ours == theirs
    assert (state.adding, state.db) == (read_state.adding, read_state.db) == (False, "default")


# --- Scheduling ----------------------------------------------------------------------------


@pytest.mark.django_db
class TestScheduling:
    @pytest.mark.parametrize("delay", [30, 30.0, timedelta(seconds=30)], ids=repr)
    def test_delay_sets_run_at_from_now_and_job_is_not_claimable_yet(
        self, delay: float | timedelta
    ) -> None:
        before = timezone.now()
        delayed = noop.using(delay=delay).enqueue()
        after = timezone.now()
        due = noop.enqueue()
        assert before + timedelta(seconds=29) <= delayed.run_at <= after + timedelta(seconds=31)
        assert Job.objects.get(pk=delayed.pk).run_at == delayed.run_at
        assert [lease.job_id for lease in leases.claim(None, "w1", 10)] == [due.pk]
        assert Job.objects.get(pk=delayed.pk).state == JobState.READY

    def test_zero_delay_is_due_now(self) -> None:
        job = noop.using(delay=0).enqueue()
        assert [lease.job_id for lease in leases.claim(None, "w1", 10)] == [job.pk]

    def test_run_at_is_stored_exactly(self) -> None:
        plus_two = dt_timezone(timedelta(hours=2))
        when = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=plus_two)
        job = noop.using(run_at=when).enqueue()
        assert job.run_at == when
        assert Job.objects.get(pk=job.pk).run_at == when
        assert leases.claim(None, "w1", 10) == []

    def test_run_at_in_the_past_is_due_now(self) -> None:
        when = timezone.now() - timedelta(hours=1)
        job = noop.using(run_at=when).enqueue()
        assert Job.objects.get(pk=job.pk).run_at == when
        assert [lease.job_id for lease in leases.claim(None, "w1", 10)] == [job.pk]


# --- enqueue_many ---------------------------------------------------------------------------


#: What a single enqueue through PostgreSQL's ``dbqueue_enqueue_job`` (migration 0025) sends.
CALLS_THE_FUNCTION = "FROM dbqueue_enqueue_job("


def inserts_jobs(sql: str) -> bool:
    """Whether ``sql`` inserts into the job table: itself, or through PostgreSQL's
    ``dbqueue_enqueue_job`` (migration 0025)."""
    return "INSERT INTO dbqueue_job" in sql or CALLS_THE_FUNCTION in sql


def job_inserts(context: CaptureQueriesContext) -> list[str]:
    """Captured statements that insert into the job table."""
    return [
        query["sql"]
        for query in context.captured_queries
        if query["sql"].lstrip().upper().startswith(("INSERT", "WITH", "SELECT"))
        and inserts_jobs(query["sql"])
    ]


@pytest.mark.django_db
class TestEnqueueMany:
    def test_enqueue_many_writes_all_jobs_in_one_statement_in_input_order(self) -> None:
        calls = [((n,), {"copy": n % 2 == 0}) for n in (5, 3, 9, 1, 7)]
        with CaptureQueriesContext(connection) as context:
            jobs = send_invoice.enqueue_many(calls)
        assert len(job_inserts(context)) == 1
        assert [(job.args, job.kwargs) for job in jobs] == [
            ([n], {"copy": n % 2 == 0}) for n in (5, 3, 9, 1, 7)
        ]
        ids = [job.pk for job in jobs]
        assert ids == sorted(ids)
        assert len(set(ids)) == len(ids)
        for job in jobs:
            assert (job.queue, job.priority, job.state) == ("mail", 3, JobState.READY)
            assert_matches_row(job)

    def test_enqueue_many_of_many_jobs_keeps_input_order(self) -> None:
        jobs = echo.enqueue_many([((n,), {}) for n in range(200)])
        assert [job.args for job in jobs] == [[n] for n in range(200)]
        ids = [job.pk for job in jobs]
        assert ids == sorted(ids)
        rows = dict(Job.objects.values_list("pk", "args"))
        assert [rows[pk] for pk in ids] == [[n] for n in range(200)]

    def test_enqueue_many_applies_using_options_to_every_job(self) -> None:
        jobs = send_invoice.using(queue="bulk", priority=8, delay=60).enqueue_many(
            [((1,), {}), ((2,), {})]
        )
        for job in jobs:
            row = Job.objects.get(pk=job.pk)
            assert (row.queue, row.priority) == ("bulk", 8)
            assert row.run_at > timezone.now() + timedelta(seconds=50)
            assert_matches_row(job)

    def test_every_job_of_enqueue_many_holds_its_row_timestamps(self) -> None:
        # The statement returns the shared created_at and run_at once, on the first row.
        jobs = echo.enqueue_many([((n,), {}) for n in range(50)])
        for job in jobs:
            assert_matches_row(job)
        assert len({(job.created_at, job.run_at) for job in jobs}) == 1

    def test_enqueue_many_bounds_each_call_not_their_sum_by_max_args_bytes(
        self, settings: Any
    ) -> None:
        settings.DBQUEUE = {"MAX_ARGS_BYTES": 100}
        jobs = echo.enqueue_many([(("x" * 60,), {}) for _ in range(5)])
        assert [job.args for job in jobs] == [["x" * 60]] * 5
        with pytest.raises(InvalidJob, match=r"call 2\): the arguments take 1\d\d bytes"):
            echo.enqueue_many([(("x" * 60,), {}), (("y",), {}), (("x" * 80,), {})])
        assert Job.objects.count() == 5

    def test_enqueue_many_of_nothing_returns_empty_and_writes_nothing(self) -> None:
        with CaptureQueriesContext(connection) as context:
            assert send_invoice.enqueue_many([]) == []
        assert context.captured_queries == []
        assert not Job.objects.exists()

    def test_enqueue_many_refuses_a_dedupe_key(self) -> None:
        with pytest.raises(InvalidJob, match="dedupe_key"):
            send_invoice.using(dedupe_key="k").enqueue_many([((1,), {})])
        assert not Job.objects.exists()

    def test_enqueue_many_with_one_bad_call_writes_nothing_and_names_the_call(self) -> None:
        with pytest.raises(InvalidJob, match=r"call 1.*argument 0"):
            echo.enqueue_many([((1,), {}), ((object(),), {}), ((3,), {})])
        assert not Job.objects.exists()


# --- Shapes: what a task and its options fix, validated once --------------------------------


@pytest.mark.django_db
class TestShapes:
    def test_two_tasks_never_share_a_shape(self) -> None:
        assert (noop.enqueue().queue, noop.enqueue().priority) == ("default", 0)
        assert (send_invoice.enqueue(1).queue, send_invoice.enqueue(1).priority) == ("mail", 3)
        assert (noop.enqueue().task, send_invoice.enqueue(2).task) == (noop.name, send_invoice.name)

    def test_each_queue_and_priority_option_has_its_own_shape(self) -> None:
        jobs = [
            send_invoice.enqueue(1),
            send_invoice.using(queue="bulk").enqueue(1),
            send_invoice.using(priority=-4).enqueue(1),
            send_invoice.using(queue="bulk", priority=-4).enqueue(1),
            send_invoice.enqueue(1),
        ]
        assert [(job.queue, job.priority) for job in jobs] == [
            ("mail", 3),
            ("bulk", 3),
            ("mail", -4),
            ("bulk", -4),
            ("mail", 3),
        ]
        for job in jobs:
            assert_matches_row(job)

    def test_per_call_options_apply_to_their_call_only(self) -> None:
        later = send_invoice.using(delay=60, dedupe_key="k", serial_key="s").enqueue(1)
        plain = send_invoice.enqueue(2)
        assert (later.dedupe_key, later.serial_key) == ("k", "s")
        assert later.run_at > timezone.now() + timedelta(seconds=50)
        assert (plain.dedupe_key, plain.serial_key) == (None, None)
        assert plain.run_at < timezone.now() + timedelta(seconds=5)
        assert_matches_row(later)
        assert_matches_row(plain)

    def test_changed_settings_apply_to_the_next_enqueue(self, settings: Any) -> None:
        assert (noop.enqueue().queue, noop.enqueue().max_attempts) == ("default", 5)
        settings.DBQUEUE = {"DEFAULT_QUEUE": "other", "MAX_ATTEMPTS": 2, "LEASE_SECONDS": 9}
        job = noop.enqueue()
        assert (job.queue, job.max_attempts, job.lease_seconds) == ("other", 2, 9)
        with override_settings(DBQUEUE={"QUEUES": ["default"]}):
            assert noop.enqueue().queue == "default"
            with pytest.raises(InvalidJob, match="not in DBQUEUE"):
                send_invoice.enqueue(1)
        assert send_invoice.enqueue(1).queue == "mail"

    def test_a_refused_shape_is_refused_again_and_writes_nothing(self, settings: Any) -> None:
        settings.DBQUEUE = {"QUEUES": ["default"]}
        for _ in range(2):
            with pytest.raises(InvalidJob, match="not in DBQUEUE"):
                send_invoice.enqueue(1)
        assert not Job.objects.exists()
        settings.DBQUEUE = {"QUEUES": ["default", "mail"]}
        assert send_invoice.enqueue(1).queue == "mail"

    def test_a_call_shape_that_did_not_bind_is_refused_with_its_problems_every_time(
        self,
    ) -> None:
        assert send_invoice.enqueue(1, copy=True).args == [1]
        for _ in range(2):
            with pytest.raises(InvalidJob, match="missing argument 'order_id'"):
                send_invoice.enqueue(copy=True)  # type: ignore[call-arg]  # the call under test is wrong
            with pytest.raises(InvalidJob, match="unexpected keyword argument 'kopy'"):
                send_invoice.enqueue(1, kopy=True)  # type: ignore[call-arg]  # the call under test is wrong
        assert (1, "copy") in send_invoice.callee.binding_shapes
        assert (0, "copy") not in send_invoice.callee.binding_shapes
        assert Job.objects.count() == 1

    def test_arguments_are_checked_on_every_call_of_a_known_shape(self) -> None:
        assert send_invoice.enqueue(1).args == [1]
        with pytest.raises(InvalidJob, match="missing argument 'order_id'"):
            send_invoice.enqueue()  # type: ignore[call-arg]  # the call under test is wrong
        with pytest.raises(InvalidJob, match="not JSON-serializable"):
            send_invoice.enqueue(object())  # type: ignore[arg-type]  # the call under test is wrong
        assert Job.objects.count() == 1


# --- Dedupe ---------------------------------------------------------------------------------


def hand_out_next(job_id: int) -> None:
    """Set the job table's id sequence so that its next id is ``job_id``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('dbqueue_job', 'id'), %s, false)", [job_id]
        )


@pytest.fixture
def next_id_taken() -> Job:
    """An active job whose id the table's sequence hands out next, as after a restore of the
    table's rows (ids included) that did not reset its sequence."""
    job = noop.enqueue()
    hand_out_next(job.pk)
    return job


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
class TestTakenId:
    """An id already in the table is an error, never a skipped row or another job returned."""

    def test_enqueue_raises_and_returns_no_other_job_as_its_own(self, next_id_taken: Job) -> None:
        with pytest.raises(IntegrityError, match="dbqueue_job_pkey"):
            noop.enqueue()
        assert job_ids_in_db() == [next_id_taken.pk]

    def test_enqueue_with_a_dedupe_key_raises(self, next_id_taken: Job) -> None:
        with pytest.raises(IntegrityError, match="dbqueue_job_pkey"):
            noop.using(dedupe_key="k").enqueue()
        assert job_ids_in_db() == [next_id_taken.pk]

    def test_enqueue_many_raises_and_writes_none_of_its_jobs(self, next_id_taken: Job) -> None:
        hand_out_next(next_id_taken.pk - 1)  # the taken id comes second in the batch
        with pytest.raises(IntegrityError, match="dbqueue_job_pkey"):
            noop.enqueue_many([((), {})] * 3)
        assert job_ids_in_db() == [next_id_taken.pk]


def commit_a_twin_after_the_insert(
    execute: Callable[..., Any], sql_text: str, params: Any, many: bool, context: dict[str, Any]
) -> Any:
    """Execute wrapper: right after the job insert, another connection commits a job of the
    same task stamped with the same creation time (a job enqueued elsewhere in the same
    microsecond)."""
    result = execute(sql_text, params, many, context)
    if sql_text.lstrip().startswith("INSERT INTO dbqueue_job"):
        raw = context["connection"].connection
        with raw.cursor() as cursor:
            cursor.execute("SELECT @dbqueue_inserted_at")
            (stamped,) = cursor.fetchone()
        run_in_thread(lambda: insert_twin(stamped))
    return result


def insert_twin(created_at: str) -> None:
    """A ready ``echo`` job created at ``created_at``, committed on this thread's connection."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at,"
            " attempts, max_attempts, lease_token, lease_seconds, created_at,"
            " last_worker_id, last_error_code, last_error, errors)"
            " VALUES ('default', %s, '[]', '{}', 'ready', 0, %s, 0, 5, 0, 60, %s,"
            " '', '', '', '[]')",
            [echo.name, created_at, created_at],
        )


@pytest.mark.mysql
@pytest.mark.django_db(transaction=True)
class TestJobsOfOtherConnections:
    """Another connection's job stamped in the same microsecond is never read back as ours."""

    def test_enqueue_returns_its_own_job(self) -> None:
        with connection.execute_wrapper(commit_a_twin_after_the_insert):
            job = echo.enqueue("ours")
        assert len(job_ids_in_db()) == 2
        assert job.args == ["ours"]
        assert_matches_row(job)

    def test_enqueue_many_returns_its_own_jobs(self) -> None:
        with connection.execute_wrapper(commit_a_twin_after_the_insert):
            jobs = echo.enqueue_many([(("first",), {}), (("second",), {})])
        assert len(job_ids_in_db()) == 3
        assert [job.args for job in jobs] == [["first"], ["second"]]
        for job in jobs:
            assert_matches_row(job)


@pytest.mark.django_db(transaction=True)
class TestDedupe:
    def test_same_key_returns_existing_job_and_ignores_later_options(self) -> None:
        first = send_invoice.using(dedupe_key="invoice:1").enqueue(1)
        second = send_invoice.using(
            dedupe_key="invoice:1", priority=9, queue="other", delay=600
        ).enqueue(2, copy=True)
        assert first.deduplicated is False
        assert second.deduplicated is True
        assert second.pk == first.pk
        assert job_ids_in_db() == [first.pk]
        row = Job.objects.get(pk=first.pk)
        assert (row.args, row.kwargs, row.priority, row.queue) == ([1], {}, 3, "mail")
        assert row.run_at == first.run_at
        assert (second.args, second.priority, second.queue) == ([1], 3, "mail")

    def test_dedupe_hit_inside_atomic_keeps_callers_transaction_usable(self) -> None:
        first = noop.using(dedupe_key="k").enqueue()
        with transaction.atomic():
            order = Order.objects.create(state="new")
            again = noop.using(dedupe_key="k").enqueue()
            assert (again.pk, again.deduplicated) == (first.pk, True)
            other = noop.enqueue()
            order.state = "paid"
            order.save()
        assert job_ids_in_db() == sorted([first.pk, other.pk])
        assert Order.objects.get().state == "paid"

    def test_dedupe_of_a_job_enqueued_in_the_same_transaction(self) -> None:
        with transaction.atomic():
            first = noop.using(dedupe_key="k").enqueue()
            again = noop.using(dedupe_key="k").enqueue()
            Order.objects.create()
        assert (again.pk, again.deduplicated) == (first.pk, True)
        assert job_ids_in_db() == [first.pk]
        assert Order.objects.count() == 1

    def test_running_job_still_dedupes(self) -> None:
        first = noop.using(dedupe_key="k").enqueue()
        (lease,) = leases.claim(None, "w1", 1)
        assert lease.job_id == first.pk
        again = noop.using(dedupe_key="k").enqueue()
        assert (again.pk, again.deduplicated, again.state) == (first.pk, True, JobState.RUNNING)
        assert job_ids_in_db() == [first.pk]

    def test_same_key_enqueues_a_new_job_after_the_first_finished(self) -> None:
        first = noop.using(dedupe_key="k").enqueue()
        (lease,) = leases.claim(None, "w1", 1)
        assert leases.complete(lease, None)
        assert Job.objects.get(pk=first.pk).state == JobState.SUCCEEDED
        second = noop.using(dedupe_key="k").enqueue()
        assert second.deduplicated is False
        assert second.pk != first.pk
        assert job_ids_in_db() == sorted([first.pk, second.pk])
        assert Job.objects.get(pk=second.pk).state == JobState.READY

    def test_same_key_on_different_tasks_does_not_collide(self) -> None:
        a = noop.using(dedupe_key="shared").enqueue()
        b = echo.using(dedupe_key="shared").enqueue()
        assert (a.deduplicated, b.deduplicated) == (False, False)
        assert a.pk != b.pk
        assert job_ids_in_db() == sorted([a.pk, b.pk])

    def test_jobs_without_dedupe_key_never_dedupe(self) -> None:
        a = noop.enqueue()
        b = noop.enqueue()
        assert a.pk != b.pk
        assert (a.dedupe_key, b.dedupe_key) == (None, None)

    @pytest.mark.postgresql
    def test_concurrent_enqueues_with_same_key_create_exactly_one_job(self) -> None:
        barrier = threading.Barrier(2, timeout=WAIT)
        first_inserted = threading.Event()
        first_may_commit = threading.Event()
        second_pid: list[int] = []
        second_pid_known = threading.Event()
        results: dict[str, Job] = {}
        errors: list[BaseException] = []

        def first() -> None:
            try:
                with transaction.atomic():
                    barrier.wait()
                    results["first"] = noop.using(dedupe_key="race").enqueue()
                    first_inserted.set()
                    assert first_may_commit.wait(WAIT)
            except BaseException as exc:  # noqa: BLE001  # reported on the test's thread
                errors.append(exc)
            finally:
                connection.close()

        def second() -> None:
            try:
                with transaction.atomic():
                    barrier.wait()
                    assert first_inserted.wait(WAIT)
                    with connection.cursor() as cursor:
                        cursor.execute("SELECT pg_backend_pid()")
                        second_pid.append(cursor.fetchone()[0])
                    second_pid_known.set()
                    results["second"] = noop.using(dedupe_key="race").enqueue()
            except BaseException as exc:  # noqa: BLE001  # reported on the test's thread
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=f, daemon=True) for f in (first, second)]
        for thread in threads:
            thread.start()
        try:
            assert second_pid_known.wait(WAIT)
            wait_until_blocked_on_a_lock(second_pid[0])
        finally:
            first_may_commit.set()
            for thread in threads:
                thread.join(WAIT)
        assert not any(thread.is_alive() for thread in threads)
        assert errors == []
        assert job_ids_in_db() == [results["first"].pk]
        assert results["second"].pk == results["first"].pk
        assert (results["first"].deduplicated, results["second"].deduplicated) == (False, True)


def wait_until_blocked_on_a_lock(pid: int) -> None:
    """Poll until PostgreSQL backend ``pid`` waits for a lock (its INSERT met the other's row)."""

    def waits_for_a_lock() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
            row = cursor.fetchone()
        return row is not None and row[0] == "Lock"

    wait_until(
        waits_for_a_lock, WAIT, f"backend {pid} to block on the first transaction's row", 0.01
    )


# --- subject= -------------------------------------------------------------------------------


@pytest.mark.django_db
class TestSubject:
    def test_subject_sets_generic_relation_to_the_saved_object(self) -> None:
        order = Order.objects.create(state="paid")
        job = send_invoice.using(subject=order).enqueue(order.pk)
        assert job.subject_type_id == ContentType.objects.get_for_model(Order).pk
        assert job.subject_id == str(order.pk)
        row = Job.objects.get(pk=job.pk)
        assert row.subject_type == ContentType.objects.get_for_model(Order)
        assert row.subject == order

    def test_unsaved_subject_is_refused(self) -> None:
        with pytest.raises(InvalidJob, match="subject must be a saved model instance"):
            send_invoice.using(subject=Order(state="paid")).enqueue(1)
        assert not Job.objects.exists()

    def test_non_model_subject_is_refused(self) -> None:
        with pytest.raises(InvalidJob, match="subject"):
            send_invoice.using(subject="order 1").enqueue(1)  # type: ignore[arg-type]  # the bad value under test
        assert not Job.objects.exists()


# --- on_save --------------------------------------------------------------------------------


@pytest.fixture
def connect_on_save() -> Iterator[Callable[..., None]]:
    """``on_save`` for the test; every receiver it connects is disconnected afterwards."""
    connected: list[tuple[Any, str]] = []

    def connect(task_: Any, **options: Any) -> None:
        receiver = on_save(Order, task_, **options)
        connected.append((receiver, f"django_dbqueue.on_save:{Order._meta.label}:{task_.name}"))

    yield connect
    for receiver, uid in connected:
        assert post_save.disconnect(receiver, sender=Order, dispatch_uid=uid)


@pytest.fixture
def invoice_when_paid(connect_on_save: Callable[..., None]) -> None:
    connect_on_save(
        send_invoice,
        when=lambda order, created: order.state == "paid",
        args=lambda order: [order.pk],
        dedupe_key=lambda order: f"invoice:{order.pk}",
    )


@pytest.mark.django_db(transaction=True)
class TestOnSave:
    @pytest.mark.usefixtures("invoice_when_paid")
    def test_saving_an_unpaid_order_enqueues_nothing(self) -> None:
        order = Order.objects.create(state="new")
        order.total = 5
        order.save()
        assert not Job.objects.exists()

    @pytest.mark.usefixtures("invoice_when_paid")
    def test_saving_a_paid_order_enqueues_one_job_about_it(self) -> None:
        order = Order.objects.create(state="new")
        order.state = "paid"
        order.save()
        job = Job.objects.get()
        assert (job.task, job.args, job.kwargs) == ("tests.jobs.tasks.send_invoice", [order.pk], {})
        assert (job.queue, job.state, job.dedupe_key) == (
            "mail",
            JobState.READY,
            f"invoice:{order.pk}",
        )
        assert job.subject == order

    @pytest.mark.usefixtures("invoice_when_paid")
    def test_saving_again_while_the_job_is_ready_dedupes(self) -> None:
        order = Order.objects.create(state="paid")
        order.total = 99
        order.save()
        with transaction.atomic():
            order.save()
        assert Job.objects.count() == 1
        assert Job.objects.get().args == [order.pk]

    @pytest.mark.usefixtures("invoice_when_paid")
    def test_rolled_back_save_leaves_neither_change_nor_job(self) -> None:
        order = Order.objects.create(state="new")
        with rolled_back():
            order.state = "paid"
            order.save()
            assert Job.objects.count() == 1
        assert Order.objects.get(pk=order.pk).state == "new"
        assert not Job.objects.exists()

    @pytest.mark.usefixtures("invoice_when_paid")
    def test_committed_save_commits_the_job_with_it(self) -> None:
        with transaction.atomic():
            order = Order.objects.create(state="paid")
        assert run_in_thread(lambda: list(Job.objects.values_list("subject_id", flat=True))) == [
            str(order.pk)
        ]

    def test_on_save_passes_the_primary_key_by_default(
        self, connect_on_save: Callable[..., None]
    ) -> None:
        connect_on_save(echo)
        order = Order.objects.create()
        job = Job.objects.get()
        assert (job.task, job.args, job.kwargs) == ("tests.jobs.enqueue_tasks.echo", [order.pk], {})
        assert job.subject == order

    def test_on_save_kwargs_and_created_flag(self, connect_on_save: Callable[..., None]) -> None:
        connect_on_save(
            echo,
            when=lambda order, created: created,
            args=lambda order: [],
            kwargs=lambda order: {"total": order.total},
        )
        order = Order.objects.create(total=12)
        order.save()
        job = Job.objects.get()
        assert (job.args, job.kwargs) == ([], {"total": 12})
        assert job.subject == order

    def test_raw_saves_enqueue_nothing(self, connect_on_save: Callable[..., None]) -> None:
        connect_on_save(echo)
        order = Order(state="paid")
        order.save_base(raw=True)
        assert Order.objects.count() == 1
        assert not Job.objects.exists()


# --- InvalidJob: validation before any write --------------------------------------------


def local_task_call() -> None:
    @task
    def inner() -> None:
        """Defined in a function: its qualname has <locals>, so no worker could import it."""

    inner.enqueue()


INVALID_CALLS: list[Any] = [
    pytest.param(lambda: echo.enqueue(1, timezone.now()), r"argument 1\b", id="datetime-arg"),
    pytest.param(lambda: echo.enqueue(object()), r"argument 0\b", id="object-arg"),
    pytest.param(lambda: echo.enqueue({1, 2}), r"argument 0\b", id="set-arg"),
    pytest.param(lambda: echo.enqueue(1, float("nan")), r"argument 1\b", id="nan-arg"),
    pytest.param(lambda: echo.enqueue(float("inf")), r"argument 0\b", id="inf-arg"),
    pytest.param(lambda: echo.enqueue("a\x00b"), r"argument 0\b.*NUL", id="nul-arg"),
    pytest.param(lambda: echo.enqueue(1, key="a\x00b"), r"argument 'key'.*NUL", id="nul-kwarg"),
    pytest.param(lambda: echo.enqueue([1, {"a": object()}]), r"argument 0\b", id="nested-arg"),
    pytest.param(lambda: echo.enqueue(1, when=object()), r"argument 'when'", id="object-kwarg"),
    pytest.param(lambda: send_invoice.enqueue(1, copy={1}), r"argument 'copy'", id="set-kwarg"),
    pytest.param(lambda: echo.enqueue(x=b"bytes"), r"argument 'x'", id="bytes-kwarg"),
    pytest.param(lambda: send_invoice.enqueue(1, 2), "do not fit", id="too-many-args"),
    pytest.param(lambda: send_invoice.enqueue(), "do not fit", id="missing-arg"),
    pytest.param(lambda: send_invoice.enqueue(1, colour="red"), "do not fit", id="unknown-keyword"),
    pytest.param(lambda: noop.enqueue(1), "do not fit", id="arg-to-no-arg-task"),
    pytest.param(
        lambda: noop.using(run_at=datetime(2030, 1, 1, 12, 0)).enqueue(), "naive", id="naive-run_at"
    ),
    pytest.param(
        lambda: noop.using(run_at="2030-01-01T00:00:00Z").enqueue(),
        "run_at must be a datetime",
        id="string-run_at",
    ),
    pytest.param(
        lambda: noop.using(run_at=timezone.now(), delay=5).enqueue(),
        "either run_at or delay",
        id="run_at-and-delay",
    ),
    pytest.param(lambda: noop.using(delay=-1).enqueue(), "delay", id="negative-delay"),
    pytest.param(
        lambda: noop.using(delay=timedelta(seconds=-1)).enqueue(),
        "delay",
        id="negative-timedelta",
    ),
    pytest.param(lambda: noop.using(delay="30").enqueue(), "delay", id="string-delay"),
    pytest.param(lambda: noop.using(delay=float("nan")).enqueue(), "delay", id="nan-delay"),
    pytest.param(lambda: noop.using(delay=True).enqueue(), "delay", id="bool-delay"),
    pytest.param(lambda: noop.using(delay=float("inf")).enqueue(), "delay", id="inf-delay"),
    pytest.param(
        lambda: noop.using(delay=timedelta(days=3_000_000)).enqueue(),
        "delay",
        id="delay-past-year-9999",
    ),
    pytest.param(lambda: noop.using(queue="has space").enqueue(), "Queue name", id="queue-space"),
    pytest.param(lambda: noop.using(queue="x" * 101).enqueue(), "Queue name", id="queue-too-long"),
    pytest.param(lambda: noop.using(queue="").enqueue(), "Queue name", id="queue-empty"),
    pytest.param(lambda: noop.using(queue="é").enqueue(), "Queue name", id="queue-non-ascii"),
    pytest.param(
        lambda: noop.using(dedupe_key="k" * 256).enqueue(), "dedupe_key", id="dedupe-key-256"
    ),
    pytest.param(lambda: noop.using(dedupe_key=123).enqueue(), "dedupe_key", id="dedupe-key-int"),
    pytest.param(lambda: noop.using(dedupe_key="").enqueue(), "dedupe_key", id="dedupe-key-empty"),
    pytest.param(lambda: noop.using(priority=2**31).enqueue(), "priority", id="priority-too-high"),
    pytest.param(
        lambda: noop.using(priority=-(2**31) - 1).enqueue(), "priority", id="priority-too-low"
    ),
    pytest.param(lambda: noop.using(priority=1.5).enqueue(), "priority", id="priority-float"),
    pytest.param(local_task_call, "cannot be imported", id="task-not-importable"),
    pytest.param(
        lambda: echo.enqueue(nested(MAX_DEPTH + 1)),
        r"argument 0 nests .* 20 levels",
        id="deep-past-the-limit",
    ),
    pytest.param(
        lambda: echo.enqueue(x=nested(5000)), r"argument 'x' nests .* 20 levels", id="deep-5000"
    ),
    pytest.param(lambda: echo.enqueue(circular()), "nests", id="circular-list"),
    pytest.param(lambda: echo.enqueue({1: "a"}), r"argument 0 has the dict key 1", id="int-key"),
    pytest.param(
        lambda: echo.enqueue(x=[{"ok": {(1, 2): 3}}]),
        r"argument 'x' has the dict key",
        id="tuple-key",
    ),
    pytest.param(
        lambda: noop.using(dedupe_key="a\x00b").enqueue(), r"dedupe_key .*NUL", id="nul-dedupe-key"
    ),
    pytest.param(
        lambda: noop.using(serial_key="a\x00b").enqueue(), r"serial_key .*NUL", id="nul-serial-key"
    ),
    pytest.param(lambda: echo.enqueue("k\ud800"), r"argument 0\b.*surrogate", id="surrogate-arg"),
    pytest.param(
        lambda: echo.enqueue(1, key=["ok", "\udc00"]),
        r"argument 'key'.*surrogate",
        id="surrogate-kwarg",
    ),
    pytest.param(
        lambda: echo.enqueue({"k\ud800": 1}), r"argument 0\b.*surrogate", id="surrogate-dict-key"
    ),
    pytest.param(
        lambda: echo.enqueue_many([(("ok",), {}), (("k\ud800",), {})]),
        r"\(call 1\): argument 0\b.*surrogate",
        id="surrogate-in-enqueue-many",
    ),
    pytest.param(
        lambda: noop.using(dedupe_key="k\ud800").enqueue(),
        r"dedupe_key .*surrogate",
        id="surrogate-dedupe-key",
    ),
    pytest.param(
        lambda: noop.using(serial_key="k\udfff").enqueue(),
        r"serial_key .*surrogate",
        id="surrogate-serial-key",
    ),
    pytest.param(
        lambda: noop.using(subject=Order(pk="k\ud800")).enqueue(),
        r"subject's primary key .*surrogate",
        id="surrogate-subject-id",
    ),
    pytest.param(
        lambda: echo.enqueue("x" * 1024 * 1024), r"MAX_ARGS_BYTES.*\(1048576\)", id="args-1mib"
    ),
    pytest.param(
        lambda: send_invoice.enqueue(order=1),
        r"missing argument 'order_id'; unexpected keyword argument 'order'",
        id="missing-and-unexpected",
    ),
]


def nested(depth: int) -> list[Any]:
    """A list ``depth`` lists deep: ``[[...[1]...]]``."""
    value: list[Any] = [1]
    for _ in range(depth - 1):
        value = [value]
    return value


def circular() -> list[Any]:
    value: list[Any] = [1]
    value.append(value)
    return value


def assert_refused_and_transaction_usable(bad_call: Callable[[], object], message: str) -> None:
    """The bad call raises InvalidJob and writes nothing; the same transaction then commits."""
    with transaction.atomic():
        with pytest.raises(InvalidJob, match=message):
            bad_call()
        assert not Job.objects.exists()
        order = Order.objects.create(state="paid")
        good = send_invoice.enqueue(order.pk)
    assert job_ids_in_db() == [good.pk]
    assert list(Order.objects.values_list("pk", flat=True)) == [order.pk]


def test_invalid_job_is_a_value_error() -> None:
    assert issubclass(InvalidJob, ValueError)


@pytest.mark.django_db
def test_an_argument_of_a_type_json_cannot_hold_is_invalid_job_and_type_error() -> None:
    """``TypeError`` too, as ``json`` and ``django.tasks`` raise; a bad value stays a ValueError."""
    with pytest.raises(InvalidJob, match="argument 0") as info:
        echo.enqueue(timezone.now())
    assert isinstance(info.value, TypeError)
    with pytest.raises(InvalidJob, match="argument 0") as info:
        echo.enqueue(float("nan"))
    assert not isinstance(info.value, TypeError)
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
class TestInvalidJob:
    @pytest.mark.parametrize(("bad_call", "message"), INVALID_CALLS)
    def test_bad_call_writes_nothing_and_leaves_transaction_usable(
        self, bad_call: Callable[[], object], message: str
    ) -> None:
        assert_refused_and_transaction_usable(bad_call, message)

    def test_queue_outside_configured_queues_is_refused(self, settings: Any) -> None:
        settings.DBQUEUE = {"QUEUES": ["default", "mail"]}
        assert_refused_and_transaction_usable(
            lambda: noop.using(queue="reports").enqueue(), "not in DBQUEUE"
        )

    def test_configured_queues_apply_to_default_and_task_queues(self, settings: Any) -> None:
        settings.DBQUEUE = {"QUEUES": ["mail"], "DEFAULT_QUEUE": "mail"}
        job = noop.enqueue()
        assert job.queue == "mail"
        settings.DBQUEUE = {"QUEUES": ["default"]}
        with pytest.raises(InvalidJob, match="not in DBQUEUE"):
            send_invoice.enqueue(1)
        assert job_ids_in_db() == [job.pk]

    def test_aware_run_at_is_refused_without_use_tz(self, settings: Any) -> None:
        settings.USE_TZ = False
        with pytest.raises(InvalidJob, match="aware"):
            noop.using(run_at=datetime(2030, 1, 1, tzinfo=dt_timezone.utc)).enqueue()
        assert not Job.objects.exists()

    def test_message_says_what_to_do(self) -> None:
        with pytest.raises(InvalidJob) as info:
            echo.enqueue(Order())
        message = str(info.value)
        assert "tests.jobs.enqueue_tasks.echo" in message
        assert "argument 0" in message
        assert "such as an id instead of an object" in message


# --- Prepared statements where the project allows them ------------------------------------


@contextmanager
def preparation_allowed() -> Iterator[None]:
    """This connection with ``OPTIONS["prepare_threshold"]`` as a project would set it."""
    connection.ensure_connection()
    raw = connection.connection
    raw.prepare_threshold = 5
    try:
        yield
    finally:
        raw.prepare_threshold = None


@contextmanager
def own_cursor_class(cursor_class: type[psycopg.Cursor[Any]]) -> Iterator[None]:
    """This connection's cursors of ``cursor_class``, as ``OPTIONS["server_side_binding"]``
    makes them ``ServerBindingCursor``."""
    raw = connection.connection
    before = raw.cursor_factory
    raw.cursor_factory = cursor_class
    try:
        yield
    finally:
        raw.cursor_factory = before


@contextmanager
def insert_cursors() -> Iterator[list[object]]:
    """The psycopg cursor of each job insert on ``connection``, as an execute wrapper sees it."""
    seen: list[object] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        if inserts_jobs(sql):
            seen.append(context["cursor"].cursor)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield seen


def prepared_inserts() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall() if inserts_jobs(row[0])]


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
class TestPreparedEnqueue:
    def test_django_default_connection_prepares_nothing(self) -> None:
        noop.enqueue()
        noop.enqueue_many([((), {})] * 2)
        assert prepared_inserts() == []

    def test_a_connection_that_allows_preparation_prepares_the_inserts(self) -> None:
        with preparation_allowed():
            first = noop.enqueue()
            second = noop.enqueue()
            jobs = noop.enqueue_many([((), {})] * 2)
            assert len(prepared_inserts()) == 2  # the single-job and the many-job insert
        assert job_ids_in_db() == sorted([first.pk, second.pk, *(job.pk for job in jobs)])
        assert_matches_row(second)

    def test_on_djangos_default_connection_the_insert_binds_as_its_own_cursors_do(self) -> None:
        """Unprepared, the insert runs on a cursor of the connection's own class, and
        through Django's cursor wrapper: execute wrappers see it."""
        from django.db.backends.postgresql.base import ServerBindingCursor

        connection.ensure_connection()
        for cursor_class in (connection.connection.cursor_factory, ServerBindingCursor):
            with own_cursor_class(cursor_class), insert_cursors() as seen:
                single = noop.enqueue()
                many = noop.enqueue_many([((), {})] * 2)
            assert [type(cursor) for cursor in seen] == [cursor_class, cursor_class]
            for job in (single, *many):
                assert_matches_row(job)
        assert prepared_inserts() == []

    def test_a_connection_keeps_one_cursor_for_its_statements_until_it_reconnects(self) -> None:
        """A new psycopg cursor looks up its dumpers and loaders again: the queue keeps one
        per connection, and makes another for a new session or another cursor class."""
        from django.db.backends.postgresql.base import ServerBindingCursor

        with insert_cursors() as seen:
            noop.enqueue()
            noop.enqueue_many([((), {})] * 2)
            connection.close()
            noop.enqueue()
            with own_cursor_class(ServerBindingCursor):
                noop.enqueue()
        first, again, reconnected, server_binding = seen
        assert first is again
        assert reconnected is not first
        assert type(server_binding) is ServerBindingCursor

    def test_a_statement_run_inside_another_never_reads_the_others_rows(self) -> None:
        """An execute wrapper that runs a queue statement on the same connection while
        the insert is under way gets a cursor of its own: the insert's rows stay its own."""
        clocks: list[list[sql.Row]] = []

        def read_the_clock_too(execute: Any, sql_text: str, *args: Any) -> Any:
            result = execute(sql_text, *args)
            if inserts_jobs(sql_text):
                clocks.append(sql.run(connection, "database_now", {}))
            return result

        with connection.execute_wrapper(read_the_clock_too):
            job = noop.enqueue()
            jobs = noop.enqueue_many([((), {})] * 2)
        made = [job, *jobs]
        assert [m.deduplicated for m in made] == [False, False, False]
        assert sorted(m.pk for m in made) == job_ids_in_db()
        for each in made:
            assert_matches_row(each)
        assert [list(rows[0]) for rows in clocks] == [["now"], ["now"]]

    @pytest.mark.parametrize("use_tz", [True, False])
    def test_an_unprepared_insert_returns_its_timestamps_exactly_as_the_orm_reads_them(
        self, use_tz: bool
    ) -> None:
        with override_settings(USE_TZ=use_tz):
            job = noop.enqueue()
            stored = Job.objects.get(pk=job.pk)
        assert (job.created_at, job.run_at) == (stored.created_at, stored.run_at)
        assert job.created_at.tzinfo == stored.created_at.tzinfo
        assert job.run_at.tzinfo == stored.run_at.tzinfo

    def test_logged_queries_run_through_djangos_cursor_with_their_sql(self) -> None:
        with preparation_allowed(), CaptureQueriesContext(connection) as context:
            noop.enqueue()
            assert prepared_inserts() == []
        (insert,) = job_inserts(context)
        assert "'tests.jobs.tasks.noop'" in insert


@pytest.mark.django_db
def test_arguments_nested_to_the_documented_depth_are_stored_as_given() -> None:
    deepest = nested(MAX_DEPTH)

    job = echo.enqueue(deepest, {"k": nested(MAX_DEPTH - 1)})

    assert Job.objects.get(pk=job.pk).args == [deepest, {"k": nested(MAX_DEPTH - 1)}]


@pytest.mark.django_db
def test_max_args_bytes_bounds_the_encoded_arguments_and_zero_disables_it(settings: Any) -> None:
    settings.DBQUEUE = {"MAX_ARGS_BYTES": 100}
    with pytest.raises(InvalidJob, match=r"take 1\d\d bytes as JSON, more than .*\(100\)"):
        echo.enqueue("x" * 80)
    assert echo.enqueue("x" * 60).args == ["x" * 60]

    settings.DBQUEUE = {"MAX_ARGS_BYTES": 0}
    big = "x" * (2 * 1024 * 1024)
    assert Job.objects.get(pk=echo.enqueue(big).pk).args == [big]


def enqueue_until_the_function_is_called() -> None:
    """Enqueue on a new session of ``connection`` until its next single enqueue calls
    ``dbqueue_enqueue_job`` (``enqueue.single_insert``), and empty the table again."""
    connection.close()
    for _ in range(STATEMENT_ENQUEUES):
        noop.enqueue()
    Job.objects.all().delete()


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
class TestInsertFunction:
    """A connection that has enqueued a few jobs calls ``dbqueue_enqueue_job`` (migration
    0025): the same rows, duplicates and wake-ups as the ``insert_job`` statement."""

    def test_a_session_sends_the_statement_first_then_calls_the_function(self) -> None:
        connection.close()
        with CaptureQueriesContext(connection) as context:
            jobs = [noop.enqueue() for _ in range(STATEMENT_ENQUEUES + 2)]
            connection.close()  # a new session starts over with the statement
            again = noop.enqueue()
        called = [CALLS_THE_FUNCTION in sql for sql in job_inserts(context)]
        assert called == [False] * STATEMENT_ENQUEUES + [True, True, False]
        for job in (*jobs, again):
            assert_matches_row(job)

    def test_the_function_stores_the_extreme_priorities(self) -> None:
        enqueue_until_the_function_is_called()
        high = noop.using(priority=2**31 - 1).enqueue()
        low = noop.using(priority=-(2**31)).enqueue()
        assert Job.objects.get(pk=high.pk).priority == 2**31 - 1
        assert Job.objects.get(pk=low.pk).priority == -(2**31)
        assert_matches_row(low)

    def test_a_connection_that_prepares_calls_the_function_with_typed_parameters(self) -> None:
        """Prepared, parameters are bound by the server with their own types (a worker's
        connection, or OPTIONS["prepare_threshold"]): the call's casts take every one."""
        enqueue_until_the_function_is_called()
        with preparation_allowed():
            low = noop.using(priority=-(2**31)).enqueue()
            later = noop.using(delay=timedelta(hours=1)).enqueue()
            at = echo.using(run_at=timezone.now() + timedelta(days=1)).enqueue({"k": [1]})
            assert [s for s in prepared_inserts() if CALLS_THE_FUNCTION in s]
        for job in (low, later, at):
            assert_matches_row(job)
        assert Job.objects.get(pk=low.pk).priority == -(2**31)

    def test_the_function_returns_the_active_job_for_its_dedupe_key(self) -> None:
        enqueue_until_the_function_is_called()
        first = echo.using(dedupe_key="report").enqueue("a")
        second = echo.using(dedupe_key="report").enqueue("b")
        assert (second.pk, second.deduplicated, second.args) == (first.pk, True, ["a"])
        assert job_ids_in_db() == [first.pk]

    def test_the_function_notifies_once_per_queue_and_transaction_at_commit(
        self, listener: psycopg.Connection[Any]
    ) -> None:
        enqueue_until_the_function_is_called()
        payloads(listener, QUIET)  # the statement's wake-ups, delivered already
        assert_one_wake_up_at_commit(listener)

    def test_a_waiting_job_is_written_waiting_by_the_function(self) -> None:
        enqueue_until_the_function_is_called()
        dependency = noop.enqueue()
        waiting = noop.using(after=[dependency]).enqueue()
        stored = Job.objects.get(pk=waiting.pk)
        assert (stored.state, stored.pending_dependencies) == (JobState.WAITING, 1)
        assert_matches_row(waiting)

    def test_the_function_writes_every_column_the_statement_writes(self, settings: Any) -> None:
        """The function reads each of the shape's values from one JSON object: a job with
        every option set (subject, limit, a dedupe key with quotes, a backslash and a
        letter beyond ASCII, the lowest priority, a due time with microseconds, the enqueue
        hooks' meta) and one with a serial key and a delay are written by it as the
        ``insert_job`` statement writes them."""
        settings.DBQUEUE = {
            **getattr(settings, "DBQUEUE", {}),
            "MIDDLEWARE": ["tests.jobs.middleware.stamps_request"],
        }
        order = Order.objects.create()
        run_at = timezone.now().replace(microsecond=123457) + timedelta(days=1)

        def enqueue_both(path: str) -> list[Job]:
            return [
                per_tenant.using(
                    concurrency_key="tenant-a",
                    subject=order,
                    dedupe_key=f"report \"'\\ é {path}",
                    priority=-(2**31),
                    run_at=run_at,
                ).enqueue("a", milliseconds=5),
                echo.using(serial_key="account-1", delay=timedelta(seconds=90)).enqueue(
                    {"k": [1.5, None]}, flag=True
                ),
            ]

        try:
            with CaptureQueriesContext(connection) as context:
                enqueue_until_the_function_is_called()
                by_function = enqueue_both("function")
                connection.close()  # a new session's first enqueues send the statement
                by_statement = enqueue_both("statement")
        finally:
            middleware.stack.cache_clear()
        paths = [CALLS_THE_FUNCTION in sql for sql in job_inserts(context)]
        assert paths[-4:] == [True, True, False, False]
        delayed = (False, True)
        for function_job, statement_job, by_delay in zip(
            by_function, by_statement, delayed, strict=True
        ):
            assert_matches_row(function_job)
            assert stored_columns(function_job, by_delay) == stored_columns(statement_job, by_delay)
        assert Job.objects.get(pk=by_function[0].pk).meta == {
            "request_id": "req-1",
            "hooked": ["tests.jobs.limit_tasks.per_tenant", 1],
        }


def stored_columns(job: Job, delayed: bool) -> dict[str, Any]:
    """Job ``job``'s row, but for what differs between two enqueues of the same call: its
    id, dedupe key and creation time; the due time of a ``delayed`` job as its distance
    from its creation."""
    row = Job.objects.filter(pk=job.pk).values().get()
    created_at = row.pop("created_at")
    if delayed:
        row["run_at"] -= created_at
    del row["id"], row["dedupe_key"]
    return row
