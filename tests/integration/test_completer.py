"""Batched completions: one statement for many jobs, each row fenced on its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import OperationalError, connection
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries

from django_dbqueue import leases
from django_dbqueue.models import Job, JobState
from django_dbqueue.worker.completer import Completer
from tests import tasks

WAIT = 30


@pytest.mark.django_db
def test_complete_many_applies_each_row_only_while_its_own_lease_holds() -> None:
    tasks.noop.enqueue_many([((), {})] * 3)
    kept, lost, stolen = leases.claim(None, "w1", 3)
    Job.objects.filter(pk=lost.job_id).update(lease_until=timezone.now() - timedelta(seconds=1))
    impostor = leases.Lease(**{**stolen.__dict__, "worker_id": "w2"})
    done = [(kept, '{"n": 1}'), (lost, None), (impostor, None)]
    assert leases.complete_many(done) == {kept.job_id}
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
        assert leases.complete_many([]) == set()


@pytest.mark.django_db(transaction=True)
def test_results_that_queue_up_during_a_write_share_the_next_statement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks.noop.enqueue_many([((), {})] * 8)
    claimed = leases.claim(None, "w1", 8)
    stop = threading.Event()
    completer = Completer(stop)
    batches: list[int] = []
    writing = threading.Event()
    write = leases.complete_many

    def hold_first_write_until_the_rest_queue(done: list[tuple[leases.Lease, str]]) -> set[int]:
        if not batches:
            writing.set()
            wait_until(lambda: completer._inbox.qsize() == 7)
        batches.append(len(done))
        return write(done)

    monkeypatch.setattr(leases, "complete_many", hold_first_write_until_the_rest_queue)
    answers: dict[int, bool] = {}

    def finish(lease: leases.Lease) -> None:
        answers[lease.job_id] = completer.complete(lease, {"id": lease.job_id})
        connection.close()

    completer.start()
    first, *rest = (threading.Thread(target=finish, args=(lease,)) for lease in claimed)
    try:
        first.start()
        assert writing.wait(WAIT)  # the first result is being written alone
        for thread in rest:
            thread.start()
        for thread in (first, *rest):
            thread.join(WAIT)
    finally:
        stop.set()
        completer.join(WAIT)
    assert batches == [1, 7]
    assert answers == {lease.job_id: True for lease in claimed}
    assert Job.objects.succeeded().count() == 8


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_result_that_is_not_json_is_refused_before_anything_is_queued() -> None:
    completer = Completer(threading.Event())
    lease = leases.Lease(1, 1, "w1", "t", [], {}, 1, 1, timezone.now(), 30, "default")
    with pytest.raises(leases.ResultNotSerializable):
        completer.complete(lease, {1, 2})
    assert completer._inbox.empty()


@pytest.mark.django_db(transaction=True)
def test_a_failed_batch_write_reaches_every_waiting_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(done: object) -> set[int]:
        raise OperationalError("server closed the connection")

    monkeypatch.setattr(leases, "complete_many", refuse)
    stop = threading.Event()
    completer = Completer(stop)
    completer.start()
    lease = leases.Lease(1, 1, "w1", "t", [], {}, 1, 1, timezone.now(), 30, "default")
    try:
        with pytest.raises(OperationalError, match="server closed"):
            completer.complete(lease, None)
    finally:
        stop.set()
        completer.join(WAIT)
