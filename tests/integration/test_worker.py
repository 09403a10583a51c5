"""The worker's parts in-process, on PostgreSQL and SQLite."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import DatabaseError, connections, transaction
from django.db.backends.signals import connection_created
from django.utils import timezone

from django_dbqueue import leases, runnable
from django_dbqueue.context import JobContext
from django_dbqueue.errors import SHUTDOWN, TASK_NOT_FOUND
from django_dbqueue.exceptions import LeaseLost
from django_dbqueue.models import Job, JobState
from django_dbqueue.worker.counters import WorkerCounters
from django_dbqueue.worker.heartbeat import Heartbeat
from django_dbqueue.worker.live import LiveJobs
from django_dbqueue.worker.worker import Worker, WorkerOptions
from tests.factories import JobFactory
from tests.integration.test_leases import finishes_without_waiting, row_locked_elsewhere
from tests.jobs import tasks
from tests.waiting import wait_until


@contextmanager
def running(worker: Worker) -> Iterator[Worker]:
    """``worker.run()`` on a thread of its own; stopped and joined when the block ends."""
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(60)
        assert not thread.is_alive(), "the worker did not stop"


def live_job(timeout: float | None = None) -> tuple[LiveJobs, JobContext]:
    tasks.noop.enqueue()
    (lease,) = leases.claim(None, "w1", 1)
    live = LiveJobs()
    context = JobContext(lease)
    live.add([(context, timeout)])
    return live, context


@pytest.mark.django_db(transaction=True)
class TestWorkerInProcess:
    def test_burst_runs_every_due_job_then_returns(self) -> None:
        tasks.noop.enqueue_many([((), {})] * 30)
        tasks.noop.using(delay=600).enqueue()
        worker = Worker(WorkerOptions(burst=True, concurrency=3))
        worker.run()
        assert Job.objects.succeeded().count() == 30
        assert Job.objects.ready().count() == 1
        assert worker.counters.snapshot()["claimed"] == 30
        assert worker.counters.snapshot()["succeeded"] == 30

    def test_a_burst_outlasts_a_claim_that_ran_while_its_own_job_still_held_the_key(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The burst ends on an empty claim only if the worker had no job when it claimed.

        Here the claim finds the key's second job waiting on the first, this worker's own,
        and the first job's success is written before the empty answer comes back.
        """
        monkeypatch.setattr(tasks, "HELD", tasks.Held())
        tasks.held.using(serial_key="k").enqueue()
        tasks.held.using(serial_key="k").enqueue()
        worker = Worker(WorkerOptions(burst=True, concurrency=2))
        claim = leases.claim
        raced: list[int] = []

        def claim_racing_the_first_success(*args: Any, **kwargs: Any) -> list[leases.Lease]:
            had_jobs = len(worker.live) > 0
            claimed = claim(*args, **kwargs)
            if had_jobs and not claimed and not raced:
                raced.append(len(worker.live))
                tasks.HELD.let_go(2)
                wait_until(lambda: len(worker.live) == 0, what="the first job's success written")
            return claimed

        monkeypatch.setattr(leases, "claim", claim_racing_the_first_success)
        worker.run()
        assert raced == [1], "no claim ran while the first job held the key"
        assert Job.objects.succeeded().count() == 2

    def test_a_claim_resolves_each_task_once_and_each_failure_for_its_own_job(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        real = runnable.resolve
        resolved: list[str] = []

        def counted(task: str, backend: str | None) -> runnable.Runnable:
            resolved.append(task)
            return real(task, backend)

        monkeypatch.setattr(runnable, "resolve", counted)
        tasks.noop.enqueue_many([((), {})] * 3)
        JobFactory.create_batch(2, task="tests.jobs.tasks.no_such_task")
        Worker(WorkerOptions(burst=True, concurrency=8)).run()  # one claim takes all five
        assert Job.objects.succeeded().count() == 3
        dead = Job.objects.filter(state=JobState.DEAD)
        assert [job.last_error_code for job in dead] == [TASK_NOT_FOUND] * 2
        assert sorted(resolved) == ["tests.jobs.tasks.no_such_task"] * 2 + ["tests.jobs.tasks.noop"]

    def test_outcomes_are_counted(self) -> None:
        tasks.noop.enqueue()
        tasks.permanent.enqueue()
        tasks.flaky.enqueue("down")
        worker = Worker(WorkerOptions(burst=True))
        worker.run()
        counts = worker.counters.snapshot()
        assert (counts["succeeded"], counts["dead"], counts["retried"]) == (1, 1, 1)

    def test_a_claimed_job_never_calls_back_into_the_worker(self) -> None:
        worker = Worker(WorkerOptions(concurrency=2))
        # What a slot, the completer and the reporter call once a job is claimed.
        hooks = [
            worker.pool.run,
            worker.pool._freed,
            worker.completer.written,
            worker.reporter.wake,
        ]
        assert [getattr(hook, "__self__", None) is worker for hook in hooks] == [False] * 4

    def test_max_jobs_stops_after_that_many(self) -> None:
        tasks.noop.enqueue_many([((), {})] * 5)
        Worker(WorkerOptions(max_jobs=2, concurrency=4, poll_interval=0.1)).run()
        assert Job.objects.succeeded().count() == 2
        assert Job.objects.ready().count() == 3

    def test_only_the_named_queues_are_served(self) -> None:
        tasks.noop.using(queue="a").enqueue()
        other = tasks.noop.using(queue="b").enqueue()
        Worker(WorkerOptions(queues=["a"], burst=True)).run()
        assert list(Job.objects.ready().values_list("pk", flat=True)) == [other.pk]

    def test_a_success_frees_its_slot_while_the_completer_writes_it(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        tasks.noop.enqueue_many([((), {})] * 2)
        worker = Worker(WorkerOptions(burst=True, concurrency=1))
        write = leases.complete_many
        second_claimed_before_first_write: list[bool] = []

        def write_once_the_next_job_is_claimed(
            done: list[tuple[leases.Lease, str]],
        ) -> leases.Completion:
            if not second_claimed_before_first_write:
                deadline = time.monotonic() + 30
                while worker.counters.claimed < 2 and time.monotonic() < deadline:
                    time.sleep(0.005)
                second_claimed_before_first_write.append(worker.counters.claimed == 2)
            return write(done)

        monkeypatch.setattr(leases, "complete_many", write_once_the_next_job_is_claimed)
        worker.run()  # returns only once every success is written
        assert second_claimed_before_first_write == [True]
        assert Job.objects.succeeded().count() == 2
        assert worker.counters.snapshot()["succeeded"] == 2

    def test_a_claim_batch_never_runs_more_jobs_at_once_than_there_are_slots(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(tasks, "HELD", tasks.Held())
        tasks.held.enqueue_many([((), {})] * 12)
        worker = Worker(WorkerOptions(burst=True, concurrency=4))
        with running(worker):
            wait_until(lambda: tasks.HELD.running == 4, what="four held jobs running")
            assert worker.counters.claimed == 4  # the other eight wait for slots, unclaimed
            tasks.HELD.let_go(12)
            wait_until(lambda: worker.counters.succeeded == 12, what="every held job done")
        assert tasks.HELD.most_running == 4
        assert Job.objects.succeeded().count() == 12

    def test_a_slot_freed_by_a_failure_wakes_the_claimer_long_before_the_poll(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(tasks, "HELD", tasks.Held())
        tasks.held.enqueue_many([((), {"fail": True})] * 5)
        # No commit, completer write or reporter wakes it: a dead job is written by its slot.
        worker = Worker(WorkerOptions(concurrency=4, poll_interval=60))
        with running(worker):
            wait_until(lambda: tasks.HELD.running == 4, what="four held jobs running")
            tasks.HELD.let_go(1)
            wait_until(lambda: worker.counters.claimed == 5, 20, "the fifth job claimed")
            tasks.HELD.let_go(4)
            wait_until(lambda: worker.counters.dead == 5, what="five dead jobs")
        assert Job.objects.filter(state=JobState.DEAD).count() == 5

    def test_a_slot_freed_among_long_jobs_is_filled_without_waiting_for_more_slots(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(tasks, "HELD", tasks.Held())
        tasks.held.enqueue_many([((), {"fail": True})] * 9)
        # One free slot of eight is no batch, and no commit, completer write or reporter wakes
        # the claimer (a dead job is written by its slot): the slot's own wake-up and its
        # patience claim the ninth job, not a poll a minute later.
        worker = Worker(WorkerOptions(concurrency=8, poll_interval=60))
        with running(worker):
            wait_until(lambda: tasks.HELD.running == 8, what="eight held jobs running")
            tasks.HELD.let_go(1)
            wait_until(lambda: worker.counters.claimed == 9, 20, "the ninth job claimed")
            wait_until(lambda: tasks.HELD.running == 8, what="the ninth job running")
            tasks.HELD.let_go(8)
            wait_until(lambda: worker.counters.dead == 9, what="nine dead jobs")
        assert tasks.HELD.most_running == 8

    def test_a_claim_batch_met_by_a_shutdown_is_recorded_not_lost(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(tasks, "HELD", tasks.Held())
        tasks.held.enqueue_many([((), {})] * 6)
        worker = Worker(WorkerOptions(concurrency=6, shutdown_timeout=0.2, poll_interval=60))
        with running(worker):
            wait_until(lambda: tasks.HELD.running == 6, what="the batch's six jobs running")
            worker.stop()
            wait_until(lambda: Job.objects.dead().count() == 6, what="every job released")
            tasks.HELD.let_go(6)
        # Their code started: each attempt counts (held has one, so each job is dead).
        assert set(Job.objects.values_list("attempts", "last_error_code")) == {(1, SHUTDOWN)}
        assert worker.counters.snapshot()["succeeded"] == 0

    def test_a_job_released_before_its_code_started_is_refunded_and_never_runs(self) -> None:
        worker = Worker(WorkerOptions(poll_interval=60))
        tasks.noop.enqueue()
        (lease,) = leases.claim(None, worker.worker_id, 1)
        context = JobContext(lease)
        worker.live.add([(context, None)])

        worker._release_unfinished()
        worker.pool.run(context, runnable.resolve(lease.task, None))  # its slot comes too late

        job = Job.objects.get(pk=lease.job_id)
        assert (job.state, job.attempts, job.lease_token, job.errors) == (
            JobState.READY,
            0,
            1,
            [],
        )
        assert sum(worker.counters.snapshot().values()) == 0  # no outcome: it never ran

    def test_stop_from_another_thread_drains_and_returns(self) -> None:
        worker = Worker(WorkerOptions(poll_interval=30))
        threading.Timer(0.2, worker.stop).start()
        worker.run()  # Returns well before the 30 s poll: stop() wakes the claimer.
        assert worker.stopping.is_set()


@pytest.fixture
def connected_threads() -> Iterator[list[str]]:
    """The name of the thread behind each database connection opened during the test."""
    names: list[str] = []

    def note(sender: Any, **_: Any) -> None:
        names.append(threading.current_thread().name)

    connection_created.connect(note, weak=False, dispatch_uid="test_worker.connected_threads")
    yield names
    connection_created.disconnect(dispatch_uid="test_worker.connected_threads")


def slot_connections(names: list[str]) -> list[str]:
    return [name for name in names if name.startswith("dbqueue-slot-")]


@pytest.mark.django_db(transaction=True)
class TestJobThreadConnections:
    def test_failed_jobs_outcomes_are_written_without_a_connection_of_their_slot(
        self, connected_threads: list[str]
    ) -> None:
        dead = tasks.permanent.enqueue()
        retried = tasks.flaky.enqueue("down")
        worker = Worker(WorkerOptions(burst=True, concurrency=2))
        worker.run()
        assert Job.objects.get(pk=dead.pk).state == JobState.DEAD
        assert Job.objects.get(pk=retried.pk).errors[-1]["message"] == "ConnectionError: down"
        assert (worker.counters.snapshot()["dead"], worker.counters.snapshot()["retried"]) == (1, 1)
        assert slot_connections(connected_threads) == []

    def test_a_job_that_used_the_database_gives_its_connection_back_on_return(
        self, connected_threads: list[str]
    ) -> None:
        """With Django's default CONN_MAX_AGE = 0, as at the end of a request."""
        tasks.reads_the_database.enqueue_many([((), {}), ((), {})])
        Worker(WorkerOptions(burst=True, concurrency=1)).run()
        assert Job.objects.succeeded().count() == 2
        # One slot ran both jobs: each query connected anew, the first connection closed.
        assert slot_connections(connected_threads) == ["dbqueue-slot-0"] * 2

    @pytest.mark.postgresql
    def test_with_persistent_connections_a_job_thread_keeps_its_connection_for_the_next(
        self, connected_threads: list[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """CONN_MAX_AGE > 0 keeps it from job to job, as from request to request.

        Its session is reset between them (``DISCARD ALL``, worker.leftovers).
        """
        monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 600)
        tasks.reads_the_database.enqueue_many([((), {}), ((), {})])
        Worker(WorkerOptions(burst=True, concurrency=1)).run()
        assert Job.objects.succeeded().count() == 2
        assert slot_connections(connected_threads) == ["dbqueue-slot-0"]

    def test_where_no_session_reset_exists_a_kept_connection_is_closed_after_a_job_used_it(
        self, connected_threads: list[str], monkeypatch: pytest.MonkeyPatch, vendor: str
    ) -> None:
        """SQLite and MySQL cannot reset a session: the next job connects anew instead."""
        if vendor == "postgresql":
            pytest.skip("PostgreSQL resets the session and keeps the connection (test above)")
        monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 600)
        tasks.reads_the_database.enqueue_many([((), {}), ((), {})])
        Worker(WorkerOptions(burst=True, concurrency=1)).run()
        assert Job.objects.succeeded().count() == 2
        assert slot_connections(connected_threads) == ["dbqueue-slot-0"] * 2


def row_is_locked(job_id: int) -> bool:
    """Whether another transaction holds the job's row locked (tried without waiting)."""
    try:
        with transaction.atomic():
            Job.objects.select_for_update(nowait=True).filter(pk=job_id).exists()
    except DatabaseError:
        return True
    return False


@pytest.mark.django_db(transaction=True)
class TestHeartbeat:
    def test_beat_renews_live_leases(self) -> None:
        live, context = live_job()
        Job.objects.filter(pk=context.job_id).update(
            lease_until=timezone.now() + timedelta(seconds=1)
        )
        Heartbeat(live, WorkerCounters(), threading.Event()).beat()
        assert Job.objects.get(pk=context.job_id).lease_until > timezone.now() + timedelta(
            seconds=20
        )
        assert not context.lease_lost.is_set()

    def test_beat_flags_a_lease_the_database_no_longer_grants(self) -> None:
        live, context = live_job()
        Job.objects.filter(pk=context.job_id).update(
            lease_until=timezone.now() - timedelta(seconds=1)
        )
        counters = WorkerCounters()
        Heartbeat(live, counters, threading.Event()).beat()
        assert context.lease_lost.is_set()
        assert counters.snapshot()["leases_lost"] == 1

    def test_beat_over_a_job_its_own_success_just_settled_is_no_lost_lease(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        live, context = live_job()
        assert leases.complete(context.lease, None)  # the completer wrote it; not yet removed
        counters = WorkerCounters()
        Heartbeat(live, counters, threading.Event()).beat()
        assert counters.snapshot()["leases_lost"] == 0
        assert "lease lost" not in caplog.text

    def test_a_failing_beat_is_survived_and_retried_within_the_lease(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        live, context = live_job()
        real = leases.renew_all
        calls: list[int] = []
        renewed = threading.Event()

        def fail_twice(held: object) -> leases.Renewal:
            calls.append(1)
            if len(calls) <= 2:
                raise RuntimeError("a bug in the beat")
            renewal = real(held)  # type: ignore[arg-type]  # the leases the heartbeat passes
            renewed.set()
            return renewal

        monkeypatch.setattr(leases, "renew_all", fail_twice)
        stop = threading.Event()
        heartbeat = Heartbeat(live, WorkerCounters(), stop)
        heartbeat.interval = lambda: 0.3  # type: ignore[method-assign]  # beat often in a test
        heartbeat.start()
        try:
            assert renewed.wait(30)
            assert heartbeat.is_alive()
        finally:
            stop.set()
            heartbeat.close()
        assert caplog.text.count("lease renewal failed (unexpected error)") == 1
        assert not context.lease_lost.is_set()

    def test_beat_stops_renewing_a_job_past_its_timeout(self) -> None:
        live, context = live_job(timeout=-1)
        before = Job.objects.get(pk=context.job_id).lease_until
        Heartbeat(live, WorkerCounters(), threading.Event()).beat()
        assert context.lease_lost.is_set()
        assert Job.objects.get(pk=context.job_id).lease_until == before

    @pytest.mark.locking
    def test_beat_skips_a_row_locked_elsewhere_until_its_lease_runs_out(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        tasks.noop.enqueue_many([((), {})] * 2)
        locked, other = leases.claim(None, "w1", 2)
        # The lease is as the claim made it (30 s), but this process reckons it at 1 s.
        contexts = [JobContext(dataclasses.replace(locked, lease_seconds=1)), JobContext(other)]
        live = LiveJobs()
        live.add((context, None) for context in contexts)
        counters = WorkerCounters()
        heartbeat = Heartbeat(live, counters, threading.Event())
        before = dict(Job.objects.values_list("pk", "lease_until"))
        with row_locked_elsewhere(locked.job_id):
            finishes_without_waiting(heartbeat.beat)
            assert not contexts[0].lease_lost.is_set()
            assert Job.objects.get(pk=other.job_id).lease_until > before[other.job_id]

            def beat_and_look() -> bool:
                finishes_without_waiting(heartbeat.beat)
                return contexts[0].lease_lost.is_set()

            wait_until(beat_and_look, 10, "the locked lease to run out", every=0.2)
        assert not contexts[1].lease_lost.is_set()
        assert counters.snapshot()["leases_lost"] == 1
        assert f"job id={locked.job_id} lease ran out while its row was locked" in caplog.text

    @pytest.mark.locking
    def test_a_task_heartbeat_inside_its_transaction_leaves_the_job_row_unlocked(self) -> None:
        live, context = live_job()
        stop = threading.Event()
        heartbeat = Heartbeat(live, WorkerCounters(), stop)
        renewed_by_the_heartbeat = JobContext(context.lease, heartbeat.renew_now)
        before = Job.objects.get(pk=context.job_id).lease_until
        heartbeat.start()
        try:
            with transaction.atomic():
                tasks.noop.enqueue()  # the task wrote something first
                renewed_by_the_heartbeat.heartbeat()
                assert not finishes_without_waiting(lambda: row_is_locked(context.job_id))
        finally:
            stop.set()
            heartbeat.close()
        assert Job.objects.get(pk=context.job_id).lease_until > before

    def test_a_task_heartbeat_without_a_running_heartbeat_renews_on_its_own_connection(
        self,
    ) -> None:
        live, context = live_job()
        heartbeat = Heartbeat(live, WorkerCounters(), threading.Event())
        JobContext(context.lease, heartbeat.renew_now).heartbeat()
        Job.objects.filter(pk=context.job_id).update(lease_until=timezone.now())
        late = JobContext(context.lease, heartbeat.renew_now)
        with pytest.raises(LeaseLost):
            late.heartbeat()
        assert late.lease_lost.is_set()

    def test_interval_is_a_third_of_the_shortest_lease(self) -> None:
        live, _ = live_job()
        assert Heartbeat(live, WorkerCounters(), threading.Event()).interval() == pytest.approx(10)
