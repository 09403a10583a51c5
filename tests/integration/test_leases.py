"""The lease protocol against a real database: exclusive claims and fencing."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TypeVar

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from pytest_django import Settings

from django_dbqueue import leases, reaper, sql
from django_dbqueue.errors import LEASE_EXPIRED, SHUTDOWN, ErrorInfo
from django_dbqueue.exceptions import ResultNotSerializable
from django_dbqueue.models import Job, JobState
from django_dbqueue.retry import Backoff
from django_dbqueue.worker.faults import Fault, classify
from tests.factories import JobFactory
from tests.jobs import tasks

WAIT = 30  # seconds any thread may take before the test fails
T = TypeVar("T")


def expire(*job_ids: int) -> None:
    """Move leases into the past, as if the workers had stalled."""
    Job.objects.filter(pk__in=job_ids).update(lease_until=timezone.now() - timedelta(seconds=1))


def claim_one(worker_id: str = "w1", queues: list[str] | None = None) -> leases.Lease:
    (lease,) = leases.claim(queues, worker_id, 1)
    return lease


def run_in_thread(target: Callable[..., object], *args: object) -> threading.Thread:
    """Start ``target`` on a thread with its own database connection, closed at the end."""

    def closing() -> None:
        try:
            target(*args)
        finally:
            connection.close()

    thread = threading.Thread(target=closing, daemon=True)
    thread.start()
    return thread


def statement_running_elsewhere(fragment: str) -> bool:
    """Whether another PostgreSQL session is running a statement whose text holds ``fragment``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_stat_activity WHERE state = 'active' "
            "AND pid <> pg_backend_pid() AND query LIKE %s",
            [f"%{fragment}%"],
        )
        return cursor.fetchone() is not None


@contextmanager
def row_locked_elsewhere(job_id: int) -> Iterator[None]:
    """Hold ``SELECT ... FOR UPDATE`` on the job from another connection meanwhile."""
    holding, finished = threading.Event(), threading.Event()

    def hold_lock() -> None:
        with transaction.atomic():
            Job.objects.select_for_update().get(pk=job_id)
            holding.set()
            finished.wait(WAIT)

    holder = run_in_thread(hold_lock)
    try:
        assert holding.wait(WAIT)
        yield
    finally:
        finished.set()
        holder.join(WAIT)


def finishes_without_waiting(call: Callable[[], T]) -> T:
    """Run ``call`` on another connection; fail if it blocks for the whole wait."""
    results: list[T] = []
    worker = run_in_thread(lambda: results.append(call()))
    worker.join(WAIT)
    assert not worker.is_alive(), "the call waited for a locked row"
    return results[0]


@pytest.mark.django_db
class TestClaim:
    def test_claim_marks_job_running_with_lease_token_and_attempt(self) -> None:
        job = tasks.noop.enqueue()
        lease = claim_one("worker-a")
        job.refresh_from_db()
        assert (lease.job_id, lease.worker_id, lease.attempt, lease.lease_token) == (
            job.pk,
            "worker-a",
            1,
            1,
        )
        assert job.state == JobState.RUNNING
        assert (job.worker_id, job.attempts, job.lease_token) == ("worker-a", 1, 1)
        assert job.lease_until == lease.lease_until
        assert job.lease_until > timezone.now() + timedelta(seconds=25)
        assert job.started_at is not None

    def test_claim_returns_task_arguments_and_budget(self) -> None:
        tasks.send_invoice.enqueue(42, copy=True)
        lease = claim_one()
        assert (lease.task, lease.args, lease.kwargs) == (
            "tests.jobs.tasks.send_invoice",
            [42],
            {"copy": True},
        )
        assert (lease.max_attempts, lease.lease_seconds, lease.queue) == (3, 20, "mail")

    def test_fractional_lease_seconds_round_up_to_whole_seconds(self, settings: Settings) -> None:
        settings.DBQUEUE = {"LEASE_SECONDS": 1.5}
        tasks.noop.enqueue()
        assert claim_one().lease_seconds == 2

    def test_claim_takes_higher_priority_first_then_older_run_at(self) -> None:
        now = timezone.now()
        old_low = JobFactory(priority=0, run_at=now - timedelta(minutes=2))
        new_high = JobFactory(priority=5, run_at=now - timedelta(minutes=1))
        old_high = JobFactory(priority=5, run_at=now - timedelta(minutes=3))
        claimed = [claim_one().job_id for _ in range(3)]
        assert claimed == [old_high.pk, new_high.pk, old_low.pk]

    def test_a_claimed_batch_comes_back_in_priority_order(self) -> None:
        now = timezone.now()
        jobs = [
            JobFactory(priority=priority, run_at=now - timedelta(minutes=minutes))
            for priority, minutes in [(0, 9), (7, 1), (7, 5), (3, 2)]
        ]
        batch = leases.claim(None, "w1", 4)
        assert [lease.job_id for lease in batch] == [jobs[i].pk for i in (2, 1, 3, 0)]

    def test_claim_leaves_jobs_scheduled_in_the_future(self) -> None:
        tasks.noop.using(delay=60).enqueue()
        due = tasks.noop.enqueue()
        assert [lease.job_id for lease in leases.claim(None, "w1", 10)] == [due.pk]

    def test_claim_batch_stops_at_limit(self) -> None:
        tasks.noop.enqueue_many([((), {})] * 5)
        assert len(leases.claim(None, "w1", 3)) == 3
        assert len(leases.claim(None, "w1", 3)) == 2
        assert leases.claim(None, "w1", 3) == []

    def test_claim_serves_only_the_named_queues(self) -> None:
        tasks.noop.using(queue="a").enqueue()
        mail = tasks.noop.using(queue="mail").enqueue()
        assert [lease.job_id for lease in leases.claim(["mail", "b"], "w1", 10)] == [mail.pk]

    def test_claim_ignores_jobs_that_are_not_ready(self) -> None:
        JobFactory(running=True)
        JobFactory(succeeded=True)
        JobFactory(dead=True)
        JobFactory(cancelled=True)
        assert leases.claim(None, "w1", 10) == []

    def test_one_busy_queue_cannot_starve_another(self) -> None:
        if connection.vendor == "mysql":
            pytest.skip("MySQL has no LATERAL: claims take priority order across queues")
        tasks.noop.using(queue="busy", priority=9).enqueue_many([((), {})] * 20)
        quiet = tasks.noop.using(queue="quiet").enqueue_many([((), {})] * 2)
        first_two = [claim_one().queue for _ in range(2)]
        assert sorted(first_two) == ["busy", "quiet"]
        batch = leases.claim(["busy", "quiet"], "w1", 4)
        assert Counter(lease.queue for lease in batch) == {"busy": 3, "quiet": 1}
        assert {job.pk for job in quiet} <= set(Job.objects.running().values_list("pk", flat=True))


@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_take_every_job_exactly_once() -> None:
    """8 threads on their own connections race for 1,000 jobs."""
    tasks.noop.enqueue_many([((), {})] * 1000)
    start = threading.Barrier(8, timeout=WAIT)
    claimed: list[list[int]] = [[] for _ in range(8)]

    def drain(slot: int) -> None:
        start.wait()
        while batch := leases.claim(None, f"worker-{slot}", 10):
            claimed[slot].extend(lease.job_id for lease in batch)

    threads = [run_in_thread(drain, slot) for slot in range(8)]
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()
    everything = [job_id for ids in claimed for job_id in ids]
    assert len(everything) == 1000
    assert len(set(everything)) == 1000
    assert Job.objects.running().filter(lease_token=1, attempts=1).count() == 1000


@pytest.mark.locking
@pytest.mark.django_db(transaction=True)
def test_claim_skips_rows_locked_by_another_transaction() -> None:
    locked, free = tasks.noop.enqueue(), tasks.noop.enqueue()
    with row_locked_elsewhere(locked.pk):
        got = finishes_without_waiting(lambda: leases.claim(None, "w1", 10))
        assert [lease.job_id for lease in got] == [free.pk]
    assert [lease.job_id for lease in leases.claim(None, "w1", 10)] == [locked.pk]


@pytest.mark.django_db
class TestFencing:
    def test_reclaim_after_expiry_has_a_larger_lease_token(self) -> None:
        tasks.noop.enqueue()
        first = claim_one("a")
        expire(first.job_id)
        assert reaper.reap().retried == [first.job_id]
        Job.objects.filter(pk=first.job_id).update(run_at=timezone.now())
        second = claim_one("b")
        assert second.job_id == first.job_id
        assert second.lease_token > first.lease_token
        assert second.attempt == 2

    def test_stale_owner_changes_nothing_after_reap_and_reclaim(self) -> None:
        tasks.noop.enqueue()
        stale = claim_one("a")
        expire(stale.job_id)
        reaper.reap()
        Job.objects.filter(pk=stale.job_id).update(run_at=timezone.now())
        current = claim_one("b")
        before = Job.objects.get(pk=stale.job_id)

        assert leases.renew([stale]) == set()
        assert leases.complete(stale, {"from": "a"}) is False
        assert leases.fail(stale, ErrorInfo("BOOM", "a failed"), None) is False
        assert leases.release(stale, started=False) is False
        assert leases.release(stale, started=True) is False
        after = Job.objects.get(pk=stale.job_id)
        assert (after.state, after.worker_id, after.lease_token, after.lease_until) == (
            before.state,
            before.worker_id,
            before.lease_token,
            before.lease_until,
        )
        assert after.errors == before.errors

        assert leases.complete(current, {"from": "b"}) is True
        done = Job.objects.get(pk=stale.job_id)
        assert (done.state, done.result) == (JobState.SUCCEEDED, {"from": "b"})
        assert leases.complete(stale, {"from": "a"}) is False
        assert Job.objects.get(pk=stale.job_id).result == {"from": "b"}

    def test_an_expired_lease_cannot_complete_even_before_the_reaper_runs(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        expire(lease.job_id)
        assert leases.complete(lease, None) is False
        assert leases.renew([lease]) == set()
        assert Job.objects.get(pk=lease.job_id).state == JobState.RUNNING

    def test_another_worker_with_the_same_token_cannot_write(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one("a")
        impostor = leases.Lease(**{**lease.__dict__, "worker_id": "b"})
        assert leases.complete(impostor, None) is False
        assert leases.renew([impostor]) == set()

    def test_renew_extends_owned_leases_and_reports_lost_ones(self) -> None:
        tasks.noop.enqueue_many([((), {})] * 2)
        kept, lost = leases.claim(None, "w1", 2)
        Job.objects.filter(pk=kept.job_id).update(lease_until=timezone.now() + timedelta(seconds=2))
        expire(lost.job_id)
        assert leases.renew([kept, lost]) == {kept.job_id}
        renewed = Job.objects.get(pk=kept.job_id).lease_until
        assert renewed > timezone.now() + timedelta(seconds=25)

    def test_a_job_deleted_while_running_is_lost_to_its_writes_never_skipped(self) -> None:
        tasks.noop.enqueue_many([((), {})] * 2)
        gone, kept = leases.claim(None, "w1", 2)
        Job.objects.filter(pk=gone.job_id).delete()
        renewal = leases.renew_all([gone, kept])
        assert (renewal.owned, renewal.skipped, renewal.lost) == (
            {kept.job_id},
            set(),
            {gone.job_id},
        )
        completion = leases.complete_many([(gone, None), (kept, None)])
        assert completion == leases.Completion(completed={kept.job_id})

    def test_lost_lease_writes_are_logged(self, caplog: pytest.LogCaptureFixture) -> None:
        tasks.noop.enqueue()
        lease = claim_one("a")
        expire(lease.job_id)
        leases.complete(lease, None)
        assert f"lease lost action=complete job={lease.job_id} worker=a" in caplog.text


@pytest.mark.locking
@pytest.mark.django_db(transaction=True)
class TestARowLockedElsewhere:
    """One job row locked by another transaction holds back that job's writes, never the batch."""

    def test_renew_skips_the_locked_lease_and_extends_the_others(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        tasks.noop.enqueue_many([((), {})] * 3)
        locked, *others = leases.claim(None, "w1", 3)
        before = dict(Job.objects.values_list("pk", "lease_until"))
        with row_locked_elsewhere(locked.job_id):
            renewal = finishes_without_waiting(lambda: leases.renew_all([locked, *others]))
        assert renewal.owned == {lease.job_id for lease in others}
        assert renewal.skipped == {locked.job_id}
        assert renewal.lost == set()
        assert "lease lost" not in caplog.text
        after = dict(Job.objects.values_list("pk", "lease_until"))
        assert after[locked.job_id] == before[locked.job_id]
        assert all(after[lease.job_id] > before[lease.job_id] for lease in others)
        assert leases.renew_all([locked]).owned == {locked.job_id}

    def test_complete_many_skips_the_locked_row_and_completes_the_others(self) -> None:
        tasks.noop.enqueue_many([((), {})] * 3)
        locked, *others = leases.claim(None, "w1", 3)
        done = [(lease, '{"ok": true}') for lease in (locked, *others)]
        with row_locked_elsewhere(locked.job_id):
            completion = finishes_without_waiting(lambda: leases.complete_many(done))
        assert completion.completed == {lease.job_id for lease in others}
        assert completion.skipped == {locked.job_id}
        assert Job.objects.get(pk=locked.job_id).state == JobState.RUNNING
        assert leases.complete_many(done[:1]) == leases.Completion(completed={locked.job_id})

    def test_fail_of_a_locked_row_raises_a_transient_conflict_at_once(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        raised: list[Fault] = []

        def fail() -> None:
            try:
                leases.fail(lease, ErrorInfo("BOOM", "boom"), None)
            except DatabaseError as exc:
                raised.append(classify(exc))

        with row_locked_elsewhere(lease.job_id):
            finishes_without_waiting(fail)
        assert raised == [Fault.CONFLICT]
        assert Job.objects.get(pk=lease.job_id).state == JobState.RUNNING
        assert leases.fail(lease, ErrorInfo("BOOM", "boom"), None) is True

    def test_complete_of_one_job_writes_it_once_the_lock_is_gone(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        holding, finished = threading.Event(), threading.Event()

        def hold_lock_briefly() -> None:
            with transaction.atomic():
                Job.objects.select_for_update().get(pk=lease.job_id)
                holding.set()
                finished.wait(0.5)

        holder = run_in_thread(hold_lock_briefly)
        assert holding.wait(WAIT)
        assert leases.complete(lease, None) is True
        holder.join(WAIT)
        assert Job.objects.get(pk=lease.job_id).state == JobState.SUCCEEDED


@pytest.mark.django_db
class TestOwnWritesAreNotLostLeases:
    """A write or renewal that finds the job settled by this very lease is not a lost lease."""

    def test_renewal_of_a_job_its_lease_just_completed_is_settled_not_lost(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        tasks.noop.enqueue_many([((), {})] * 3)
        running, completed, stolen = leases.claim(None, "w1", 3)
        assert leases.complete(completed, None)
        expire(stolen.job_id)
        reaper.reap()
        renewal = leases.renew_all([running, completed, stolen])
        assert renewal.owned == {running.job_id}
        assert renewal.settled == {completed.job_id: JobState.SUCCEEDED}
        assert renewal.lost == {stolen.job_id}
        assert f"action=renew job={completed.job_id}" not in caplog.text
        assert f"lease lost action=renew job={stolen.job_id}" in caplog.text

    def test_renewal_of_a_job_its_lease_just_failed_is_settled_not_lost(self) -> None:
        tasks.noop.enqueue_many([((), {})] * 2)
        retried, dead = leases.claim(None, "w1", 2)
        assert leases.fail(retried, ErrorInfo("BOOM", "boom"), timezone.now())
        assert leases.fail(dead, ErrorInfo("BOOM", "boom"), None)
        renewal = leases.renew_all([retried, dead])
        assert renewal.settled == {retried.job_id: JobState.READY, dead.job_id: JobState.DEAD}
        assert renewal.lost == set()

    def test_an_expiry_is_never_the_lease_own_write(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        expire(lease.job_id)
        reaper.reap()
        assert leases.settled_by([lease]) == {}
        assert leases.renew_all([lease]).lost == {lease.job_id}

    def test_a_completion_tried_again_after_a_lost_reply_counts_as_completed(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        assert leases.complete_many([(lease, '{"n": 1}')]).completed == {lease.job_id}
        assert leases.complete_many([(lease, '{"n": 1}')]).completed == {lease.job_id}
        assert "lease lost" not in caplog.text

    def test_a_failure_tried_again_after_a_lost_reply_counts_as_recorded(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        error = ErrorInfo("BOOM", "boom")
        assert leases.fail(lease, error, timezone.now() + timedelta(minutes=1))
        assert leases.fail(lease, error, timezone.now() + timedelta(minutes=1))
        assert len(Job.objects.get(pk=lease.job_id).errors) == 1
        assert "lease lost" not in caplog.text

    def test_a_newer_claim_is_never_this_lease_own_write(self) -> None:
        tasks.noop.enqueue()
        old = claim_one("w1")
        assert leases.fail(old, ErrorInfo("BOOM", "boom"), timezone.now())
        new = claim_one("w2")
        assert leases.complete(new, None)
        assert leases.settled_by([old]) == {}
        assert leases.complete(old, None) is False


@pytest.mark.django_db
class TestTransitions:
    def test_complete_stores_result_and_finishes(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        assert leases.complete(lease, [1, "two"]) is True
        job = Job.objects.get(pk=lease.job_id)
        assert (job.state, job.result, job.worker_id, job.lease_until) == (
            JobState.SUCCEEDED,
            [1, "two"],
            None,
            None,
        )
        assert job.finished_at is not None

    def test_complete_refuses_a_result_that_is_not_json(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        with pytest.raises(ResultNotSerializable):
            leases.complete(lease, {1, 2})
        assert Job.objects.get(pk=lease.job_id).state == JobState.RUNNING

    def test_release_refunds_the_attempt_keeps_the_token_and_is_due_now(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        assert leases.release(lease, started=False) is True
        job = Job.objects.get(pk=lease.job_id)
        assert (job.state, job.attempts, job.lease_token, job.errors) == (
            JobState.READY,
            0,
            1,
            [],
        )
        assert claim_one().lease_token == 2

    def test_release_of_a_started_attempt_counts_it_with_a_shutdown_entry_due_now(
        self,
    ) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        assert leases.release(lease, started=True) is True
        job = Job.objects.get(pk=lease.job_id)
        assert (job.state, job.attempts, job.lease_token, job.last_error_code) == (
            JobState.READY,
            1,
            1,
            SHUTDOWN,
        )
        assert [(entry["attempt"], entry["code"]) for entry in job.errors] == [(1, SHUTDOWN)]
        assert Job.objects.due().filter(pk=job.pk).exists()

    def test_release_of_a_started_last_attempt_makes_the_job_dead(self) -> None:
        job = tasks.noop.enqueue()
        Job.objects.filter(pk=job.pk).update(max_attempts=1)
        lease = claim_one()
        assert leases.release(lease, started=True) is True
        job.refresh_from_db()
        assert (job.state, job.attempts, job.last_error_code) == (JobState.DEAD, 1, SHUTDOWN)
        assert job.finished_at is not None

    def test_fail_with_retry_at_makes_the_job_ready_then(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        retry_at = timezone.now() + timedelta(minutes=5)
        assert leases.fail(lease, ValueError("nope"), retry_at) is True
        job = Job.objects.get(pk=lease.job_id)
        assert (job.state, job.run_at, job.attempts, job.last_error_code) == (
            JobState.READY,
            retry_at,
            1,
            "ValueError",
        )
        assert job.finished_at is None
        assert [entry["code"] for entry in job.errors] == ["ValueError"]
        assert leases.claim(None, "w1", 1) == []

    def test_fail_without_retry_at_makes_the_job_dead(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        assert leases.fail(lease, ErrorInfo("CARD_DECLINED", "declined"), None) is True
        job = Job.objects.get(pk=lease.job_id)
        assert (job.state, job.last_error_code, job.last_error) == (
            JobState.DEAD,
            "CARD_DECLINED",
            "declined",
        )
        assert job.finished_at is not None

    def test_fail_makes_the_job_dead_when_the_budget_is_spent(self) -> None:
        JobFactory(max_attempts=1)
        lease = claim_one()
        assert leases.fail(lease, ValueError("x"), timezone.now()) is True
        assert Job.objects.get(pk=lease.job_id).state == JobState.DEAD


@pytest.mark.django_db
class TestReap:
    def test_reap_returns_expired_jobs_to_ready_with_backoff(self) -> None:
        tasks.flaky.enqueue("x")
        lease = claim_one("a")
        expire(lease.job_id)
        before = timezone.now()
        assert reaper.reap() == leases.ReapResult(retried=[lease.job_id], dead=[])
        job = Job.objects.get(pk=lease.job_id)
        assert (job.state, job.attempts, job.lease_token, job.worker_id) == (
            JobState.READY,
            1,
            1,
            None,
        )
        # flaky's Backoff(base=10): the first retry waits 5 to 10 seconds.
        assert before + timedelta(seconds=5) <= job.run_at <= timezone.now() + timedelta(seconds=10)
        assert job.last_error_code == LEASE_EXPIRED
        (entry,) = job.errors
        assert (entry["attempt"], entry["worker"], entry["code"]) == (1, "a", LEASE_EXPIRED)

    def test_reap_makes_the_job_dead_when_the_budget_is_spent(self) -> None:
        JobFactory(max_attempts=1)
        lease = claim_one()
        expire(lease.job_id)
        assert reaper.reap() == leases.ReapResult(retried=[], dead=[lease.job_id])
        job = Job.objects.get(pk=lease.job_id)
        assert (job.state, job.attempts, job.last_error_code) == (JobState.DEAD, 1, LEASE_EXPIRED)
        assert job.finished_at is not None

    def test_reap_leaves_live_leases_alone(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        assert reaper.reap() == leases.ReapResult(retried=[], dead=[])
        assert leases.complete(lease, None) is True

    def test_reap_handles_at_most_limit_jobs(self) -> None:
        tasks.noop.enqueue_many([((), {})] * 5)
        expire(*(lease.job_id for lease in leases.claim(None, "w1", 5)))
        assert len(reaper.reap(limit=3).retried) == 3
        assert len(reaper.reap(limit=3).retried) == 2

    def test_reap_uses_the_settings_policy_when_the_task_is_gone(self) -> None:
        JobFactory(task="tests.nowhere.gone")
        lease = claim_one()
        expire(lease.job_id)
        assert reaper.reap().retried == [lease.job_id]

    def test_reap_retries_with_the_policy_its_caller_looks_up(self) -> None:
        tasks.flaky.enqueue("x")
        lease = claim_one("a")
        expire(lease.job_id)
        asked = []

        def backoff_for(task: str, backend: str | None) -> Backoff:
            asked.append((task, backend))
            return Backoff(base=600, factor=2, cap=3600)

        before = timezone.now()
        assert leases.reap(backoff_for=backoff_for).retried == [lease.job_id]
        assert asked == [("tests.jobs.tasks.flaky", None)]
        # Base 600 s, jittered to [300, 600]; flaky's own policy would wait 5-10 s.
        run_at = Job.objects.get(pk=lease.job_id).run_at
        assert before + timedelta(seconds=300) <= run_at <= timezone.now() + timedelta(seconds=600)


@pytest.mark.locking
@pytest.mark.django_db(transaction=True)
def test_reap_skips_rows_another_reaper_holds() -> None:
    tasks.noop.enqueue_many([((), {})] * 2)
    held, free = leases.claim(None, "w1", 2)
    expire(held.job_id, free.job_id)
    with row_locked_elsewhere(held.job_id):
        result = finishes_without_waiting(reaper.reap)
    assert result == leases.ReapResult(retried=[free.job_id], dead=[])


@pytest.mark.django_db
class TestOperatorTransitions:
    def test_requeue_gives_dead_jobs_more_attempts_and_keeps_their_history(self) -> None:
        dead = JobFactory(dead=True, dedupe_key="k", errors=[{"code": "X"}])
        ready = JobFactory()
        assert leases.requeue([dead.pk, ready.pk], 2, actor="alice") == [dead.pk]
        dead.refresh_from_db()
        assert (dead.state, dead.attempts, dead.max_attempts, dead.finished_at) == (
            JobState.READY,
            5,
            7,
            None,
        )
        assert (dead.dedupe_key, dead.errors, dead.idempotency_key) == (
            "k",
            [{"code": "X"}],
            f"dbqueue-job-{dead.pk}",
        )
        assert dead.pk in {lease.job_id for lease in leases.claim(None, "w1", 2)}

    def test_requeue_skips_a_job_whose_dedupe_key_is_active_again(self) -> None:
        dead = JobFactory(dead=True, dedupe_key="k")
        JobFactory(dedupe_key="k")
        assert leases.requeue([dead.pk], 1, actor="alice") == []
        assert Job.objects.get(pk=dead.pk).state == JobState.DEAD

    def test_requeue_revives_one_of_several_dead_jobs_sharing_a_dedupe_key(self) -> None:
        first, second, third = (JobFactory(dead=True, dedupe_key="k") for _ in range(3))
        other_task = JobFactory(dead=True, dedupe_key="k", task="tests.jobs.tasks.flaky")
        plain = JobFactory(dead=True)
        selected = [third.pk, second.pk, first.pk, other_task.pk, plain.pk]
        result = leases.requeue_report(selected, 1, actor="alice")
        assert result == leases.RequeueResult(
            requeued=sorted([first.pk, other_task.pk, plain.pk]),
            duplicates=sorted([second.pk, third.pk]),
        )
        states = dict(Job.objects.values_list("pk", "state"))
        assert [states[j.pk] for j in (first, second, third)] == ["ready", "dead", "dead"]

    def test_requeue_reports_dead_jobs_whose_dedupe_key_an_active_job_holds(self) -> None:
        dead = JobFactory(dead=True, dedupe_key="k")
        JobFactory(running=True, dedupe_key="k")
        assert leases.requeue_report([dead.pk], 1, actor="alice") == leases.RequeueResult(
            requeued=[], duplicates=[dead.pk]
        )

    def test_requeue_needs_at_least_one_extra_attempt(self) -> None:
        with pytest.raises(ValueError, match="extra_attempts"):
            leases.requeue([1], 0, actor="alice")

    def test_cancel_changes_only_ready_jobs(self) -> None:
        ready = JobFactory()
        running = JobFactory(running=True)
        dead = JobFactory(dead=True)
        assert leases.cancel([ready.pk, running.pk, dead.pk]) == [ready.pk]
        states = dict(Job.objects.values_list("pk", "state"))
        assert states == {
            ready.pk: JobState.CANCELLED,
            running.pk: JobState.RUNNING,
            dead.pk: JobState.DEAD,
        }
        assert Job.objects.get(pk=ready.pk).finished_at is not None


@pytest.mark.locking
@pytest.mark.django_db(transaction=True)
def test_requeue_skips_a_dedupe_key_a_concurrent_requeue_takes_meanwhile() -> None:
    elsewhere, here = (JobFactory(dead=True, dedupe_key="k") for _ in range(2))
    requeued, release = threading.Event(), threading.Event()

    def requeue_and_hold() -> None:
        with transaction.atomic():
            assert leases.requeue([elsewhere.pk], 1, actor="bob") == [elsewhere.pk]
            requeued.set()
            release.wait(WAIT)

    holder = run_in_thread(requeue_and_hold)
    assert requeued.wait(WAIT)
    results: list[leases.RequeueResult] = []
    racer = run_in_thread(lambda: results.append(leases.requeue_report([here.pk], 1, "alice")))
    racer.join(0.5)  # it waits on the index entry of the uncommitted requeue
    release.set()
    holder.join(WAIT)
    racer.join(WAIT)
    assert not racer.is_alive()
    assert results == [leases.RequeueResult(requeued=[], duplicates=[here.pk])]
    assert dict(Job.objects.values_list("pk", "state")) == {
        elsewhere.pk: JobState.READY,
        here.pk: JobState.DEAD,
    }


@pytest.mark.django_db
class TestCancelRequests:
    def test_request_cancel_marks_only_running_jobs(self) -> None:
        running = JobFactory(running=True)
        others = [JobFactory(), JobFactory(dead=True), JobFactory(succeeded=True)]
        assert leases.request_cancel([running.pk, *(j.pk for j in others)], "ops") == [running.pk]
        marks = dict(Job.objects.values_list("pk", "cancel_requested_at"))
        assert marks[running.pk] is not None
        assert [marks[j.pk] for j in others] == [None, None, None]
        assert Job.objects.get(pk=running.pk).state == JobState.RUNNING

    def test_a_second_request_keeps_the_first_requests_time(self) -> None:
        running = JobFactory(running=True)
        leases.request_cancel([running.pk], "ops")
        first = Job.objects.get(pk=running.pk).cancel_requested_at
        assert leases.request_cancel([running.pk], "ops") == [running.pk]
        assert Job.objects.get(pk=running.pk).cancel_requested_at == first

    def test_renew_reports_the_mark_of_owned_jobs_in_the_same_statement(self) -> None:
        tasks.noop.enqueue_many([((), {})] * 2)
        marked, unmarked = leases.claim(None, "w1", 2)
        leases.request_cancel([marked.job_id], "ops")
        with CaptureQueriesContext(connection) as queries:
            renewal = leases.renew_all([marked, unmarked])
        # Nothing beyond the renew block (one statement; three on MySQL, which lacks RETURNING).
        renew_block = sql.statements(connection.vendor)["renew"].split(sql.STATEMENT_END)
        assert len([q for q in queries if "dbqueue_job" in q["sql"]]) == len(renew_block)
        assert renewal == leases.Renewal(
            owned={marked.job_id, unmarked.job_id},
            settled={},
            lost=set(),
            cancel_requested={marked.job_id},
        )
        assert leases.renew([marked, unmarked]) == {marked.job_id, unmarked.job_id}

    def test_a_stale_attempt_cannot_cancel_the_newer_attempt(self) -> None:
        tasks.noop.enqueue()
        stale = claim_one("w1")
        leases.request_cancel([stale.job_id], "ops")
        expire(stale.job_id)
        assert reaper.reap().retried == [stale.job_id]
        Job.objects.filter(pk=stale.job_id).update(run_at=timezone.now())
        newer = claim_one("w2")
        assert leases.cancel_running(stale) is False
        job = Job.objects.get(pk=stale.job_id)
        assert (job.state, job.worker_id, job.lease_token) == (
            JobState.RUNNING,
            "w2",
            newer.lease_token,
        )
        assert leases.cancel_running(newer) is True
        assert Job.objects.get(pk=stale.job_id).state == JobState.CANCELLED

    def test_a_cancel_request_after_the_job_finished_changes_nothing(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one("w1")
        assert leases.complete(lease, None)
        assert leases.request_cancel([lease.job_id], "ops") == []
        assert leases.cancel_running(lease) is False
        job = Job.objects.get(pk=lease.job_id)
        assert (job.state, job.cancel_requested_at) == (JobState.SUCCEEDED, None)

    def test_requeue_clears_the_cancel_mark(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one("w1")
        leases.request_cancel([lease.job_id], "ops")
        assert leases.fail(lease, ErrorInfo("X", "boom"), None)
        assert leases.requeue([lease.job_id], 1, "ops") == [lease.job_id]
        assert Job.objects.get(pk=lease.job_id).cancel_requested_at is None


@pytest.mark.django_db
def test_next_due_is_none_without_ready_jobs_scheduled_later() -> None:
    tasks.noop.enqueue()  # due now: a claim passed it by, so it is not waited for
    JobFactory(running=True, run_at=timezone.now() + timedelta(minutes=5))

    assert leases.next_due(None) is None
    assert leases.next_due(["default"]) is None


@pytest.mark.django_db
def test_next_due_counts_seconds_to_the_earliest_scheduled_job_of_the_queues_served() -> None:
    tasks.noop.using(delay=30).enqueue()
    tasks.noop.using(delay=20, priority=-5).enqueue()
    tasks.send_invoice.using(delay=10).enqueue(1)  # queue "mail"

    default_due = leases.next_due(["default"])
    every_due = leases.next_due(None)

    # SQLite keeps timestamps to the millisecond: allow that much above the delay.
    assert default_due is not None
    assert 18 < default_due < 20.01
    assert every_due is not None
    assert 8 < every_due < 10.01
    assert leases.next_due(["reports"]) is None


@pytest.mark.django_db
def test_claim_jobs_leases_only_the_named_ready_jobs_due_or_not() -> None:
    later = tasks.noop.using(delay=600).enqueue()
    other = tasks.noop.enqueue()

    claimed = leases.claim_jobs([later.pk], "w1")

    assert [(lease.job_id, lease.attempt, lease.lease_token) for lease in claimed] == [
        (later.pk, 1, 1)
    ]
    assert Job.objects.get(pk=later.pk).state == JobState.RUNNING
    assert Job.objects.get(pk=other.pk).state == JobState.READY
    assert leases.claim_jobs([later.pk], "w1") == []


@pytest.mark.django_db
def test_a_claimed_lease_is_the_frozen_value_lease_init_makes() -> None:
    tasks.send_invoice.enqueue(7)
    tasks.noop.enqueue()
    for lease in leases.claim(None, "w1", 2):
        fields = {field.name: getattr(lease, field.name) for field in dataclasses.fields(lease)}
        assert vars(lease) == fields
        assert lease == leases.Lease(**fields)
        with pytest.raises(dataclasses.FrozenInstanceError):
            lease.job_id = 0  # type: ignore[misc]  # frozen: the assignment is the point


def test_json_read_from_a_row_is_a_new_object_each_time() -> None:
    first, second = sql.to_json("[]"), sql.to_json("[]")
    first.append(1)
    assert (second, sql.to_json("{}"), sql.to_json('{"a": [1]}')) == ([], {}, {"a": [1]})
    assert sql.to_json(b"[2]") == [2]
