"""SQLite beside a real worker: the web's transactions that read, then write, still commit.

SQLite has one writer. A transaction begun ``DEFERRED`` (Django's default) that
reads and then writes cannot wait for the write lock: SQLite refuses the
upgrade at once with ``database is locked``, whatever the timeout. The settings
``docs/howto/databases.md`` recommends (``OPTIONS["transaction_mode"] = "IMMEDIATE"``,
as ``tests/settings.py`` uses) take the lock at ``BEGIN``, where the busy timeout
applies, so every such transaction waits its turn and commits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import OperationalError, connection, transaction

from django_dbqueue.models import Job, JobState
from tests.e2e.conftest import WorkerProcess
from tests.jobs.e2e_tasks import recorded
from tests.testapp.models import Order
from tests.waiting import wait_until

pytestmark = [pytest.mark.sqlite, pytest.mark.django_db(transaction=True)]

WEB_THREADS = 4
TRANSACTIONS_EACH = 40


def web_requests(count: int, start: threading.Barrier, refused: list[str]) -> None:
    """``count`` request-like transactions: read, enqueue, save; each refusal recorded."""
    start.wait()
    try:
        for _ in range(count):
            try:
                with transaction.atomic():
                    Order.objects.count()
                    recorded.enqueue("web")
                    Order.objects.create(total=1)
            except OperationalError as exc:
                refused.append(str(exc))
    finally:
        connection.close()


def test_web_transactions_beside_a_worker_are_never_refused_as_locked(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    worker = start_worker("--concurrency", "2", settings={"POLL_INTERVAL": 0.1})
    recorded.enqueue("warm-up")
    wait_until(lambda: Job.objects.filter(state=JobState.SUCCEEDED).exists(), what="a worker")
    start = threading.Barrier(WEB_THREADS)
    refused: list[str] = []
    threads = [
        threading.Thread(target=web_requests, args=(TRANSACTIONS_EACH, start, refused))
        for _ in range(WEB_THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert not any(thread.is_alive() for thread in threads)
    assert refused == []
    assert Order.objects.count() == WEB_THREADS * TRANSACTIONS_EACH
    total = WEB_THREADS * TRANSACTIONS_EACH + 1
    wait_until(
        lambda: Job.objects.filter(state=JobState.SUCCEEDED).count() == total,
        what=f"the worker to run all {total} jobs",
    )
    assert worker.process.poll() is None
