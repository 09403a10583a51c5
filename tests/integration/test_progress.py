"""Progress reports against a real database: fenced by the lease, paced, never on the task's
transaction in a worker, never waiting for a row lock."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.backends.signals import connection_created
from django.utils import timezone

from django_dbqueue import leases, progress, reaper
from django_dbqueue.context import JobContext
from django_dbqueue.exceptions import InvalidProgress, LeaseLost
from django_dbqueue.models import Job
from django_dbqueue.progress import Progress
from django_dbqueue.testing import run_jobs
from django_dbqueue.worker.counters import WorkerCounters
from django_dbqueue.worker.heartbeat import Heartbeat
from django_dbqueue.worker.live import LiveJobs
from tests.integration.test_leases import (
    WAIT,
    claim_one,
    expire,
    finishes_without_waiting,
    row_locked_elsewhere,
    run_in_thread,
)
from tests.integration.test_worker import row_is_locked
from tests.jobs import tasks
from tests.waiting import wait_until

#: The progress write of every vendor's ``set_progress`` block (MySQL's block runs three).
PROGRESS_WRITE = re.compile(r"SET (j\.)?progress = ")
#: Calls of the tight loop, and the pauses that make it last a few seconds.
CALLS = 10_000
PAUSE_EVERY, PAUSE = 1_000, 0.25


def stored(job_id: int) -> dict[str, Any] | None:
    return Job.objects.get(pk=job_id).progress  # type: ignore[no-any-return]  # a JSON object


def reclaimed_by_another_worker() -> tuple[leases.Lease, leases.Lease]:
    """A job whose lease ``stale`` (worker a) expired; the reaper and worker b took it over."""
    tasks.noop.enqueue()
    stale = claim_one("a")
    expire(stale.job_id)
    reaper.reap()
    Job.objects.filter(pk=stale.job_id).update(run_at=timezone.now())
    return stale, claim_one("b")


@pytest.mark.django_db
class TestWrite:
    def test_stores_the_report_with_its_attempt_and_the_database_clock(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        before = timezone.now()
        written = progress.write([(lease, Progress(3, 10, "rows"))])
        assert written.written == {lease.job_id}
        report = stored(lease.job_id)
        assert report is not None
        at = datetime.fromisoformat(report.pop("at"))
        assert report == {"done": 3, "total": 10, "message": "rows", "attempt": 1}
        assert abs(at - before) < timedelta(seconds=5)
        assert at.utcoffset() == timedelta(0)

    def test_a_fraction_and_an_unknown_total_round_trip(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        progress.write([(lease, Progress(2.5, None, "ünïcödé 🚀"))])
        report = stored(lease.job_id)
        assert report is not None
        assert (report["done"], report["total"], report["message"]) == (2.5, None, "ünïcödé 🚀")

    def test_one_statement_writes_several_jobs(self) -> None:
        tasks.noop.enqueue_many([((), {})] * 3)
        held = leases.claim(None, "w1", 3)
        written = progress.write([(lease, Progress(i, 3, "")) for i, lease in enumerate(held)])
        assert written.written == {lease.job_id for lease in held}
        assert [stored(lease.job_id)["done"] for lease in held] == [0, 1, 2]  # type: ignore[index]


@pytest.mark.django_db
class TestFencing:
    def test_writes_after_a_lost_lease_change_nothing(self) -> None:
        stale, current = reclaimed_by_another_worker()
        assert progress.write([(current, Progress(1, 5, "b's"))]).written == {current.job_id}
        before = Job.objects.get(pk=stale.job_id)

        written = progress.write([(stale, Progress(4, 5, "a's"))])

        assert written.missed == {stale.job_id}
        after = Job.objects.get(pk=stale.job_id)
        assert after.progress == before.progress
        assert after.progress["message"] == "b's"
        assert after.progress["attempt"] == 2
        assert (after.lease_until, after.worker_id) == (before.lease_until, before.worker_id)

    def test_an_expired_lease_writes_nothing_even_before_the_reaper_runs(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        expire(lease.job_id)
        assert progress.write([(lease, Progress(1, None, ""))]).missed == {lease.job_id}
        assert stored(lease.job_id) is None

    def test_another_worker_with_the_same_token_writes_nothing(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one("a")
        impostor = leases.Lease(**{**lease.__dict__, "worker_id": "b"})
        assert progress.write([(impostor, Progress(1, None, ""))]).missed == {lease.job_id}
        assert stored(lease.job_id) is None

    def test_a_finished_job_takes_no_more_progress(self) -> None:
        tasks.noop.enqueue()
        lease = claim_one()
        progress.write([(lease, Progress(9, 10, "almost"))])
        assert leases.complete(lease, None)
        assert progress.write([(lease, Progress(10, 10, "late"))]).missed == {lease.job_id}
        assert stored(lease.job_id)["message"] == "almost"  # type: ignore[index]

    def test_set_progress_after_a_lost_lease_raises_and_writes_nothing(self) -> None:
        stale, _ = reclaimed_by_another_worker()
        context = JobContext(stale)
        with pytest.raises(LeaseLost, match=f"job {stale.job_id}: the lease of attempt 1"):
            context.set_progress(1, 2)
        assert context.lease_lost.is_set()
        assert stored(stale.job_id) is None
        with pytest.raises(LeaseLost):
            context.set_progress(2, 2)  # known lost: not even tried


@pytest.mark.django_db
class TestCurrentProgress:
    def test_is_the_latest_attempts_report_only(self) -> None:
        stale, current = reclaimed_by_another_worker()
        Job.objects.filter(pk=stale.job_id).update(
            progress={"done": 7, "total": 9, "message": "", "attempt": 1, "at": "x"}
        )
        assert Job.objects.get(pk=stale.job_id).current_progress is None
        progress.write([(current, Progress(1, 9, ""))])
        assert Job.objects.get(pk=stale.job_id).current_progress["done"] == 1  # type: ignore[index]

    def test_is_none_before_any_report(self) -> None:
        assert tasks.noop.enqueue().current_progress is None


@pytest.mark.django_db
class TestInline:
    """Outside a worker (``run_jobs``): written on the calling thread's connection, paced."""

    def test_the_first_report_is_written_at_once_and_later_ones_wait_their_turn(self) -> None:
        tasks.noop.enqueue()
        context = JobContext(claim_one())
        context.set_progress(1, 3)
        assert stored(context.job_id)["done"] == 1  # type: ignore[index]
        context.set_progress(2, 3)
        assert stored(context.job_id)["done"] == 1  # type: ignore[index]

        def next_call_writes() -> bool:
            context.set_progress(3, 3, "done")
            return stored(context.job_id)["done"] == 3  # type: ignore[index]

        wait_until(next_call_writes, 5, "the next turn", every=0.1)

    def test_a_tight_loop_writes_at_most_once_a_second(self) -> None:
        tasks.noop.enqueue()
        context = JobContext(claim_one())
        with counted_writes(connection) as writes:
            started = time.monotonic()
            tight_loop(context)
            elapsed = time.monotonic() - started
        print(f"inline: {CALLS} calls in {elapsed:.2f}s, {len(writes)} writes")
        assert 1 <= len(writes) <= elapsed / progress.INTERVAL + 1

    @pytest.mark.parametrize(("then_fail", "state"), [(False, "succeeded"), (True, "dead")])
    def test_the_last_report_of_a_burst_is_written_before_the_outcome(
        self, then_fail: bool, state: str
    ) -> None:
        job = tasks.reports_a_burst.enqueue(500, then_fail=then_fail)
        with counted_writes(connection) as writes:
            run_jobs()
        finished = Job.objects.get(pk=job.pk)
        assert finished.state == state
        assert (finished.progress["done"], finished.progress["message"]) == (500, "row 500")
        assert len(writes) == 2  # the first report at once, the last with the outcome

    def test_a_bad_value_leaves_the_tasks_transaction_usable(self) -> None:
        tasks.noop.enqueue()
        context = JobContext(claim_one())
        with transaction.atomic():
            with pytest.raises(InvalidProgress):
                context.set_progress(1, 2, "nul \x00 here")
            with pytest.raises(InvalidProgress):
                context.set_progress(-1)
            assert Job.objects.filter(pk=context.job_id).exists()
        assert stored(context.job_id) is None


@pytest.mark.locking
@pytest.mark.django_db(transaction=True)
class TestARowLockedElsewhere:
    def test_the_write_skips_it_without_waiting_and_writes_the_others(self) -> None:
        tasks.noop.enqueue_many([((), {})] * 2)
        locked, other = leases.claim(None, "w1", 2)
        reports = [(locked, Progress(1, None, "")), (other, Progress(2, None, ""))]
        with row_locked_elsewhere(locked.job_id):
            written = finishes_without_waiting(lambda: progress.write(reports))
        assert (written.written, written.skipped, written.missed) == (
            {other.job_id},
            {locked.job_id},
            set(),
        )
        assert stored(locked.job_id) is None
        assert progress.write(reports[:1]).written == {locked.job_id}


def counting_into(writes: list[str]) -> Callable[..., Any]:
    """An execute wrapper appending each progress write's SQL to ``writes`` (no mock)."""

    def count(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        if PROGRESS_WRITE.search(sql):
            writes.append(sql)
        return execute(sql, *args)

    return count


@contextmanager
def counted_writes(on: Any) -> Iterator[list[str]]:
    """The progress writes run on connection ``on`` meanwhile."""
    writes: list[str] = []
    with on.execute_wrapper(counting_into(writes)):
        yield writes


def tight_loop(context: JobContext) -> None:
    """``CALLS`` reports as fast as they go, with a pause every ``PAUSE_EVERY`` (~2.5 s in all)."""
    for done in range(CALLS):
        context.set_progress(done, CALLS - 1, f"row {done}")
        if done % PAUSE_EVERY == PAUSE_EVERY - 1:
            time.sleep(PAUSE)


@contextmanager
def heartbeat_wrapped(live: LiveJobs, wrapper: Callable[..., Any]) -> Iterator[Heartbeat]:
    """A running heartbeat whose connection (made on its thread) runs its statements through
    the execute wrapper ``wrapper``."""
    threads: list[int] = []

    def wrap_on_heartbeat(sender: Any, connection: Any, **_: Any) -> None:
        if threading.current_thread().name == "dbqueue-heartbeat":
            threads.append(threading.get_ident())
            connection.execute_wrappers.append(wrapper)

    connection_created.connect(wrap_on_heartbeat)
    stop = threading.Event()
    heartbeat = Heartbeat(live, WorkerCounters(), stop)
    heartbeat.start()
    try:
        yield heartbeat
    finally:
        stop.set()
        heartbeat.close()
        connection_created.disconnect(wrap_on_heartbeat)
    assert threads, "the heartbeat never opened its connection"


@contextmanager
def heartbeat_counting_writes(live: LiveJobs) -> Iterator[tuple[Heartbeat, list[str]]]:
    """A running heartbeat whose connection counts its progress writes."""
    writes: list[str] = []
    with heartbeat_wrapped(live, counting_into(writes)) as heartbeat:
        yield heartbeat, writes


class HeldWrite:
    """An execute wrapper holding the heartbeat's first progress write until ``release``."""

    def __init__(self) -> None:
        self.sent, self.released = threading.Event(), threading.Event()

    def __call__(self, execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        if PROGRESS_WRITE.search(sql) and not self.sent.is_set():
            self.sent.set()
            assert self.released.wait(WAIT)
        return execute(sql, *args)


@pytest.mark.django_db(transaction=True)
class TestInAWorker:
    """Reports go to the heartbeat thread, which writes them on its own connection."""

    def test_a_tight_loop_costs_one_write_a_second_and_its_last_report_lands(self) -> None:
        tasks.noop.enqueue()
        live = LiveJobs()
        with heartbeat_counting_writes(live) as (heartbeat, writes):
            context = JobContext(claim_one(), heartbeat.renew_now, heartbeat.progress)
            live.add([(context, None)])
            with counted_writes(connection) as on_the_tasks_connection:
                started = time.monotonic()
                tight_loop(context)
                stopped = time.monotonic()
                wait_until(
                    lambda: (stored(context.job_id) or {}).get("done") == CALLS - 1,
                    5,
                    "the last report",
                    every=0.02,
                )
                landed = time.monotonic()
            assert on_the_tasks_connection == []
            final = len(writes)
        elapsed = stopped - started
        print(
            f"worker: {CALLS} calls in {elapsed:.2f}s, {final} writes "
            f"({final / (landed - started):.2f}/s); last report landed "
            f"{landed - stopped:.2f}s after the loop"
        )
        assert 1 <= final <= (landed - started) / progress.INTERVAL + 1
        assert landed - stopped < progress.INTERVAL + 1
        assert stored(context.job_id)["message"] == f"row {CALLS - 1}"  # type: ignore[index]

    @pytest.mark.locking
    def test_a_report_inside_the_tasks_transaction_leaves_the_row_unlocked(self) -> None:
        tasks.noop.enqueue()
        live = LiveJobs()
        with heartbeat_counting_writes(live) as (heartbeat, _):
            context = JobContext(claim_one(), heartbeat.renew_now, heartbeat.progress)
            live.add([(context, None)])
            with transaction.atomic():
                tasks.noop.enqueue()  # the task wrote something first
                context.set_progress(1, 2, "inside")
                wait_until(lambda: finishes_without_waiting(lambda: stored(context.job_id)), 5)
                assert not finishes_without_waiting(lambda: row_is_locked(context.job_id))

    @pytest.mark.locking
    def test_a_locked_row_is_written_once_the_lock_is_gone(self) -> None:
        tasks.noop.enqueue()
        live = LiveJobs()
        with heartbeat_counting_writes(live) as (heartbeat, writes):
            context = JobContext(claim_one(), heartbeat.renew_now, heartbeat.progress)
            live.add([(context, None)])
            with row_locked_elsewhere(context.job_id):
                context.set_progress(5, 9, "while locked")
                wait_until(lambda: writes, 5, "a write tried while the row is locked")
                assert not context.lease_lost.is_set()
            wait_until(lambda: stored(context.job_id), 5, "the write after the lock")
        assert stored(context.job_id)["message"] == "while locked"  # type: ignore[index]

    def test_a_write_in_flight_lands_before_the_attempts_last_report(self) -> None:
        # The heartbeat takes the first report and is held before its statement; the task
        # reports again and its attempt ends, writing its last report as execute does. The
        # finished job shows the last report: the held one landed before it, not after.
        tasks.noop.enqueue()
        live = LiveJobs()
        held = HeldWrite()
        with heartbeat_wrapped(live, held) as heartbeat:
            context = JobContext(claim_one(), heartbeat.renew_now, heartbeat.progress)
            live.add([(context, None)])
            context.set_progress(1, 2, "first")
            assert held.sent.wait(WAIT), "the heartbeat never wrote the first report"
            context.set_progress(2, 2, "last")

            def end_the_attempt() -> None:
                last = context.unwritten_progress()  # None: the heartbeat wrote it meanwhile
                if last is not None:
                    progress.write([(context.lease, last)])

            ending = run_in_thread(end_the_attempt)
            ending.join(1.0)  # a board that does not wait has written the last report by now
            held.released.set()
            ending.join(WAIT)
            assert not ending.is_alive()
        assert stored(context.job_id)["message"] == "last"  # type: ignore[index]

    def test_a_report_the_write_finds_lost_makes_the_next_call_raise(self) -> None:
        stale, _ = reclaimed_by_another_worker()
        live = LiveJobs()
        with heartbeat_counting_writes(live) as (heartbeat, _):
            context = JobContext(stale, heartbeat.renew_now, heartbeat.progress)
            live.add([(context, None)])
            context.set_progress(1, 2)  # only posted: the heartbeat writes it
            wait_until(context.lease_lost.is_set, 5, "the heartbeat to find the lease lost")
            with pytest.raises(LeaseLost):
                context.set_progress(2, 2)
        assert stored(stale.job_id) is None
