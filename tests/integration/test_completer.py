"""Batched completions: one statement for many jobs, each row fenced on its own."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import DataError, InternalError, OperationalError
from django.utils import timezone
from psycopg import errors as pg_errors
from pytest_django import DjangoAssertNumQueries

from django_dbqueue import leases
from django_dbqueue.context import JobContext
from django_dbqueue.errors import RESULT_NOT_SERIALIZABLE, ErrorInfo
from django_dbqueue.exceptions import ResultNotSerializable
from django_dbqueue.models import Job, JobState
from django_dbqueue.worker import completer as completer_module
from django_dbqueue.worker.completer import Completer, WriteNotTaken
from django_dbqueue.worker.execute import execute
from django_dbqueue.worker.outcome import Ended, Outcome
from tests.integration.test_leases import row_locked_elsewhere, run_in_thread
from tests.integration.test_progress import reclaimed_by_another_worker
from tests.jobs import tasks
from tests.waiting import wait_until

WAIT = 30


@pytest.mark.django_db
def test_complete_many_applies_each_row_only_while_its_own_lease_holds() -> None:
    tasks.noop.enqueue_many([((), {})] * 3)
    kept, lost, stolen = leases.claim(None, "w1", 3)
    Job.objects.filter(pk=lost.job_id).update(lease_until=timezone.now() - timedelta(seconds=1))
    impostor = leases.Lease(**{**stolen.__dict__, "worker_id": "w2"})
    done = [(kept, '{"n": 1}'), (lost, None), (impostor, None)]
    assert leases.complete_many(done) == leases.Completion(completed={kept.job_id})
    states = dict(Job.objects.values_list("pk", "state"))
    assert states == {
        kept.job_id: JobState.SUCCEEDED,
        lost.job_id: JobState.RUNNING,
        stolen.job_id: JobState.RUNNING,
    }
    assert Job.objects.get(pk=kept.job_id).result == {"n": 1}


@pytest.mark.django_db
def test_complete_many_of_nothing_writes_nothing(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    with django_assert_num_queries(0):
        assert leases.complete_many([]) == leases.Completion(completed=set())


class Reports:
    """What the completer reported, and a way to wait for it."""

    def __init__(self) -> None:
        self.outcomes: dict[int, Outcome] = {}
        #: The error code each job's outcome was reported with.
        self.codes: dict[int, str] = {}
        self.arrived = threading.Condition()

    def __call__(self, written: list[Ended]) -> None:
        with self.arrived:
            for attempt in written:
                self.outcomes[attempt.context.job_id] = attempt.outcome
                self.codes[attempt.context.job_id] = attempt.code
            self.arrived.notify_all()

    def wait_for(self, count: int) -> dict[int, Outcome]:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.outcomes) >= count, WAIT), "timed out"
        return self.outcomes


@contextmanager
def running(completer: Completer) -> Iterator[Completer]:
    completer.start()
    try:
        yield completer
    finally:
        completer.stop.set()
        completer.join(WAIT)


@pytest.mark.django_db(transaction=True)
def test_results_that_queue_up_during_a_write_share_the_next_statement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks.noop.enqueue_many([((), {})] * 8)
    first, *rest = leases.claim(None, "w1", 8)
    reports = Reports()
    completer = Completer(threading.Event(), reports)
    batches: list[int] = []
    writing = threading.Event()
    write = leases.complete_many

    def hold_first_write_until_the_rest_queue(
        done: list[tuple[leases.Lease, str]],
    ) -> leases.Completion:
        if not batches:
            writing.set()
            wait_until(
                lambda: completer._inbox.qsize() == 7, WAIT, "seven queued successes", every=0.005
            )
        batches.append(len(done))
        return write(done)

    monkeypatch.setattr(leases, "complete_many", hold_first_write_until_the_rest_queue)
    with running(completer):
        completer.succeeded(JobContext(first), {"id": first.job_id}, time.monotonic())
        assert writing.wait(WAIT)  # the first result is being written alone
        for lease in rest:
            completer.succeeded(JobContext(lease), {"id": lease.job_id}, time.monotonic())
        assert completer.backlog == 8
        outcomes = reports.wait_for(8)
    assert batches == [1, 7]
    assert outcomes == {lease.job_id: Outcome.SUCCEEDED for lease in (first, *rest)}
    assert completer.backlog == 0
    assert Job.objects.succeeded().count() == 8
    assert Job.objects.get(pk=first.job_id).result == {"id": first.job_id}


@pytest.mark.django_db(transaction=True)
def test_a_row_whose_lease_was_lost_is_reported_lost_and_left_alone() -> None:
    tasks.noop.enqueue_many([((), {})] * 2)
    kept, lost = leases.claim(None, "w1", 2)
    Job.objects.filter(pk=lost.job_id).update(lease_until=timezone.now() - timedelta(seconds=1))
    reports = Reports()
    with running(Completer(threading.Event(), reports)) as completer:
        for lease in (kept, lost):
            completer.succeeded(JobContext(lease), None, time.monotonic())
        outcomes = reports.wait_for(2)
    assert outcomes == {kept.job_id: Outcome.SUCCEEDED, lost.job_id: Outcome.LEASE_LOST}
    assert Job.objects.get(pk=lost.job_id).state == JobState.RUNNING


@pytest.mark.locking
@pytest.mark.django_db(transaction=True)
def test_a_locked_row_holds_back_neither_its_batch_nor_later_ones_and_is_written_after() -> None:
    tasks.noop.enqueue_many([((), {})] * 4)
    locked, *others, later = leases.claim(None, "w1", 4)
    reports = Reports()
    with running(Completer(threading.Event(), reports)) as completer:
        with row_locked_elsewhere(locked.job_id):
            for lease in (locked, *others):
                completer.succeeded(JobContext(lease), None, time.monotonic())
            assert reports.wait_for(2) == {lease.job_id: Outcome.SUCCEEDED for lease in others}
            completer.succeeded(JobContext(later), None, time.monotonic())
            reports.wait_for(3)
            assert locked.job_id not in reports.outcomes
            assert completer.backlog == 1
        assert reports.wait_for(4)[locked.job_id] is Outcome.SUCCEEDED
    assert Job.objects.succeeded().count() == 4


@pytest.mark.locking
@pytest.mark.django_db(transaction=True)
def test_a_row_locked_for_the_lease_length_is_left_unrecorded() -> None:
    tasks.noop.enqueue()
    (lease,) = leases.claim(None, "w1", 1)
    short = dataclasses.replace(lease, lease_seconds=1)
    reports = Reports()
    with (
        running(Completer(threading.Event(), reports)) as completer,
        row_locked_elsewhere(lease.job_id),
    ):
        completer.succeeded(JobContext(short), None, time.monotonic())
        assert reports.wait_for(1) == {lease.job_id: Outcome.UNRECORDED}
    assert Job.objects.get(pk=lease.job_id).state == JobState.RUNNING


@pytest.mark.locking
@pytest.mark.django_db(transaction=True)
def test_a_failure_on_a_locked_row_waits_in_its_job_thread_not_in_the_completer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failing, succeeding = tasks.permanent.enqueue(), tasks.noop.enqueue()
    (failed,) = leases.claim_jobs([failing.pk], "w1")
    (succeeded,) = leases.claim_jobs([succeeding.pk], "w1")
    reports = Reports()
    outcomes: list[Outcome] = []
    with running(Completer(threading.Event(), reports)) as completer:
        with row_locked_elsewhere(failed.job_id):
            job_thread = run_in_thread(lambda: outcomes.append(execute(failed, writer=completer)))
            wait_until(lambda: "not written yet (transaction conflict)" in caplog.text, WAIT)
            completer.succeeded(JobContext(succeeded), None, time.monotonic())
            assert reports.wait_for(1) == {succeeded.job_id: Outcome.SUCCEEDED}
            assert Job.objects.get(pk=failed.job_id).state == JobState.RUNNING
        job_thread.join(WAIT)
    assert outcomes == [Outcome.DEAD]
    assert Job.objects.get(pk=failed.job_id).state == JobState.DEAD


def test_a_result_that_is_not_json_is_refused_before_anything_is_queued() -> None:
    completer = Completer(threading.Event(), Reports())
    lease = leases.Lease(1, 1, "w1", "t", [], {}, 1, 1, timezone.now(), 30, "default")
    with pytest.raises(ResultNotSerializable):
        completer.succeeded(JobContext(lease), {1, 2}, time.monotonic())
    assert completer._inbox.empty()
    assert completer.backlog == 0


@pytest.mark.django_db(transaction=True)
def test_a_failed_batch_write_is_tried_again_while_the_lease_may_live(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks.noop.enqueue()
    (lease,) = leases.claim(None, "w1", 1)
    write = leases.complete_many
    tries: list[int] = []

    def fail_once(done: list[tuple[leases.Lease, str]]) -> leases.Completion:
        tries.append(len(done))
        if len(tries) == 1:
            raise OperationalError("server closed the connection")
        return write(done)

    monkeypatch.setattr(leases, "complete_many", fail_once)
    reports = Reports()
    with running(Completer(threading.Event(), reports)) as completer:
        completer.succeeded(JobContext(lease), None, time.monotonic())
        assert reports.wait_for(1) == {lease.job_id: Outcome.SUCCEEDED}
    assert tries == [1, 1]
    assert Job.objects.get(pk=lease.job_id).state == JobState.SUCCEEDED


@pytest.mark.parametrize("why", ["lease over", "lease lost"])
@pytest.mark.django_db(transaction=True)
def test_a_write_that_cannot_be_made_in_time_is_left_unrecorded(
    monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    def refuse(done: object) -> leases.Completion:
        raise OperationalError("server closed the connection")

    monkeypatch.setattr(leases, "complete_many", refuse)
    # A lease of 0 s leaves no time for a retry; a lost lease is not worth one.
    lease = leases.Lease(
        1, 1, "w1", "t", [], {}, 1, 1, timezone.now(), 0 if why == "lease over" else 30, "default"
    )
    context = JobContext(lease)
    if why == "lease lost":
        context.lease_lost.set()
    reports = Reports()
    with running(Completer(threading.Event(), reports)) as completer:
        completer.succeeded(context, None, time.monotonic())
        assert reports.wait_for(1) == {1: Outcome.UNRECORDED}
    assert completer.backlog == 0


@pytest.mark.django_db(transaction=True)
def test_a_row_the_database_refuses_fails_alone_dead_and_the_completer_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks.noop.enqueue_many([((), {})] * 3)
    good, bad, other = leases.claim(None, "w1", 3)
    write = leases.complete_many

    def refuse_the_bad_row(done: list[tuple[leases.Lease, str]]) -> leases.Completion:
        if any(lease.job_id == bad.job_id for lease, _ in done):
            raise DataError("unsupported Unicode escape sequence")
        return write(done)

    monkeypatch.setattr(leases, "complete_many", refuse_the_bad_row)
    reports = Reports()
    with running(Completer(threading.Event(), reports)) as completer:
        for lease in (good, bad, other):
            completer.succeeded(JobContext(lease), None, time.monotonic())
        outcomes = reports.wait_for(3)
        assert completer.is_alive()
    assert outcomes == {
        good.job_id: Outcome.SUCCEEDED,
        bad.job_id: Outcome.DEAD,
        other.job_id: Outcome.SUCCEEDED,
    }
    # Reported (logged, signalled) with the code it was written with.
    assert reports.codes == {good.job_id: "", bad.job_id: RESULT_NOT_SERIALIZABLE, other.job_id: ""}
    # Recorded as a failure, not left running for the reaper to run again.
    refused = Job.objects.get(pk=bad.job_id)
    assert (refused.state, refused.attempts, refused.last_error_code) == (
        JobState.DEAD,
        1,
        RESULT_NOT_SERIALIZABLE,
    )
    assert refused.errors[-1]["exception"] == "django.db.utils.DataError"


@pytest.mark.django_db(transaction=True)
def test_a_batch_keeps_under_the_byte_cap_and_a_larger_result_is_written_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(completer_module, "MAX_BATCH_BYTES", 1000)
    tasks.noop.enqueue_many([((), {})] * 5)
    claimed = leases.claim(None, "w1", 5)
    write = leases.complete_many
    batches: list[list[int]] = []

    def record_each_batch(done: list[tuple[leases.Lease, str]]) -> leases.Completion:
        batches.append([len(encoded) for _, encoded in done])
        return write(done)

    monkeypatch.setattr(leases, "complete_many", record_each_batch)
    reports = Reports()
    completer = Completer(threading.Event(), reports)
    # Handed over before the completer starts, so its first gather takes all five at once.
    for lease, length in zip(claimed, (300, 300, 300, 1500, 300), strict=True):
        completer.succeeded(JobContext(lease), "x" * length, time.monotonic())
    with running(completer):
        outcomes = reports.wait_for(5)
    assert batches == [[302, 302, 302], [1502], [302]]
    assert set(outcomes.values()) == {Outcome.SUCCEEDED}
    assert Job.objects.filter(state=JobState.SUCCEEDED).count() == 5


@pytest.mark.django_db(transaction=True)
def test_a_stale_attempts_success_and_the_current_ones_of_one_job_are_told_their_own_outcomes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stale, current = reclaimed_by_another_worker()
    write = leases.complete_many
    batches: list[list[int]] = []

    def record_each_batch(done: list[tuple[leases.Lease, str]]) -> leases.Completion:
        batches.append([lease.lease_token for lease, _ in done])
        return write(done)

    monkeypatch.setattr(leases, "complete_many", record_each_batch)
    reported: list[Ended] = []
    completer = Completer(threading.Event(), reported.extend)
    # Handed over before the completer starts, so its first gather takes both at once.
    completer.succeeded(JobContext(current), {"attempt": 2}, time.monotonic())
    completer.succeeded(JobContext(stale), {"attempt": 1}, time.monotonic())
    with running(completer):
        wait_until(lambda: len(reported) == 2, WAIT, "both outcomes")
    outcomes = [(ended.context.lease.lease_token, ended.outcome) for ended in reported]
    assert outcomes == [
        (current.lease_token, Outcome.SUCCEEDED),
        (stale.lease_token, Outcome.LEASE_LOST),
    ]
    assert batches == [[current.lease_token], [stale.lease_token]]
    assert Job.objects.get(pk=current.job_id).result == {"attempt": 2}


def read_only_error() -> InternalError:
    """What psycopg and Django raise for a write to a database that became read-only."""
    error = InternalError("cannot execute UPDATE in a read-only transaction")
    error.__cause__ = pg_errors.ReadOnlySqlTransaction("read-only")
    return error


@pytest.mark.django_db(transaction=True)
def test_a_success_whose_reply_was_lost_is_reported_succeeded_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks.noop.enqueue()
    (lease,) = leases.claim(None, "w1", 1)
    write = leases.complete_many
    tries: list[int] = []

    def commit_then_lose_the_reply(done: list[tuple[leases.Lease, str]]) -> leases.Completion:
        tries.append(len(done))
        written = write(done)
        if len(tries) == 1:
            assert written.completed == {lease.job_id}  # the server committed it ...
            raise OperationalError("server closed the connection unexpectedly")  # ... unheard
        return written

    monkeypatch.setattr(leases, "complete_many", commit_then_lose_the_reply)
    reports: list[tuple[int, Outcome]] = []
    arrived = threading.Event()

    def written(batch: list[Ended]) -> None:
        reports.extend((attempt.context.job_id, attempt.outcome) for attempt in batch)
        arrived.set()

    with running(Completer(threading.Event(), written)) as completer:
        completer.succeeded(JobContext(lease), None, time.monotonic())
        assert arrived.wait(WAIT)
    assert tries == [1, 1]
    assert reports == [(lease.job_id, Outcome.SUCCEEDED)]
    assert Job.objects.get(pk=lease.job_id).state == JobState.SUCCEEDED


@pytest.mark.django_db(transaction=True)
def test_a_read_only_database_is_waited_out_not_reported_unrecorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks.noop.enqueue()
    (lease,) = leases.claim(None, "w1", 1)
    write = leases.complete_many
    refusals = iter([read_only_error(), read_only_error()])

    def read_only_for_two_tries(done: list[tuple[leases.Lease, str]]) -> leases.Completion:
        for refusal in refusals:
            raise refusal
        return write(done)

    monkeypatch.setattr(leases, "complete_many", read_only_for_two_tries)
    reports = Reports()
    with running(Completer(threading.Event(), reports)) as completer:
        completer.succeeded(JobContext(lease), None, time.monotonic())
        assert reports.wait_for(1) == {lease.job_id: Outcome.SUCCEEDED}
    assert Job.objects.get(pk=lease.job_id).state == JobState.SUCCEEDED


@pytest.mark.django_db(transaction=True)
def test_a_failing_report_neither_stops_the_completer_nor_the_next_report() -> None:
    tasks.noop.enqueue_many([((), {})] * 2)
    first, second = leases.claim(None, "w1", 2)
    reports = Reports()
    failed = threading.Event()

    def fail_on_the_first(written: list[Ended]) -> None:
        if any(attempt.context.job_id == first.job_id for attempt in written):
            failed.set()
            raise RuntimeError("a receiver bug")
        reports(written)

    with running(Completer(threading.Event(), fail_on_the_first)) as completer:
        completer.succeeded(JobContext(first), None, time.monotonic())
        assert failed.wait(WAIT)
        completer.succeeded(JobContext(second), None, time.monotonic())
        assert reports.wait_for(1) == {second.job_id: Outcome.SUCCEEDED}
        assert completer.is_alive()
    assert completer.backlog == 0


@pytest.mark.django_db(transaction=True)
def test_a_job_threads_write_runs_on_the_completer_and_returns_its_result() -> None:
    tasks.permanent.enqueue()
    (lease,) = leases.claim(None, "w1", 1)
    ran_on: list[str] = []

    def give_up() -> bool:
        ran_on.append(threading.current_thread().name)
        return leases.fail(lease, ErrorInfo("GAVE_UP", "no", ""), None)

    with running(Completer(threading.Event(), Reports())) as completer:
        assert completer.write(give_up, time.monotonic() + WAIT) is True
        assert completer.is_alive()
    assert ran_on == ["dbqueue-completer"]
    assert Job.objects.get(pk=lease.job_id).state == JobState.DEAD


@pytest.mark.django_db(transaction=True)
def test_what_a_write_raises_reaches_the_job_thread_and_the_completer_goes_on() -> None:
    def lose_the_connection() -> bool:
        raise OperationalError("server closed the connection unexpectedly")

    with running(Completer(threading.Event(), Reports())) as completer:
        with pytest.raises(OperationalError, match="server closed"):
            completer.write(lose_the_connection, time.monotonic() + WAIT)
        assert completer.write(lambda: True, time.monotonic() + WAIT) is True
        assert completer.is_alive()


def test_a_write_the_completer_does_not_take_in_time_is_not_made() -> None:
    completer = Completer(threading.Event(), Reports())
    # A completer that is alive but never takes the write (stuck in a long statement, say).
    completer.is_alive = lambda: True  # type: ignore[method-assign] # stands in for a stuck thread
    written: list[bool] = []

    def write() -> bool:
        written.append(True)
        return True

    with pytest.raises(WriteNotTaken):
        completer.write(write, time.monotonic() + 0.1)
    assert written == []


def test_a_write_after_the_completer_stopped_is_made_on_the_calling_thread() -> None:
    completer = Completer(threading.Event(), Reports())  # never started, as after shutdown
    ran_on: list[str] = []

    def note() -> bool:
        ran_on.append(threading.current_thread().name)
        return True

    assert completer.write(note, time.monotonic() + WAIT) is True
    assert ran_on == [threading.current_thread().name]


@pytest.mark.django_db(transaction=True)
def test_successes_that_queue_up_together_are_reported_in_one_call() -> None:
    tasks.noop.enqueue_many([((), {})] * 5)
    claimed = leases.claim(None, "w1", 5)
    calls: list[list[int]] = []
    done = threading.Event()

    def written(batch: list[Ended]) -> None:
        calls.append([attempt.context.job_id for attempt in batch])
        done.set()

    completer = Completer(threading.Event(), written)
    for lease in claimed:  # queued before the completer starts: one batch
        completer.succeeded(JobContext(lease), None, time.monotonic())
    with running(completer):
        assert done.wait(WAIT)
    assert calls == [[lease.job_id for lease in claimed]]
    assert completer.backlog == 0
