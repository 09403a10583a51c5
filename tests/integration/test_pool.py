"""``worker.pool``: no slot is left on a broken or half-done connection by a job."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import connection, transaction

from django_dbqueue.worker.pool import JobPool
from tests.testapp.models import Order


def job_context(job_id: int) -> SimpleNamespace:
    """What the pool reads of a job's context: its id, and its lease for the log's fields."""
    lease = SimpleNamespace(job_id=job_id, task="t.noop", queue="default", attempt=1, worker_id="w")
    return SimpleNamespace(job_id=job_id, lease=lease)


pytestmark = pytest.mark.django_db(transaction=True)


def test_a_transaction_left_open_outside_task_code_is_rolled_back_before_the_next_job() -> None:
    seen: list[tuple[bool, int]] = []
    done = threading.Event()

    def run(context: Any, task: Any) -> None:
        if context.job_id == 1:  # a receiver, say, that enters atomic and never leaves
            transaction.atomic().__enter__()
            Order.objects.create(total=1)
            return
        try:
            seen.append((connection.in_atomic_block, Order.objects.count()))
            Order.objects.create(total=2)
        finally:
            done.set()

    pool = JobPool(1, run, lambda free: None)
    pool.start()
    try:
        pool.submit([(job_context(1), None), (job_context(2), None)])
        assert done.wait(30)
    finally:
        pool.stop(wait=30)
    assert seen == [(False, 0)]
    assert list(Order.objects.values_list("total", flat=True)) == [2]
