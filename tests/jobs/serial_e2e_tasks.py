"""Tasks of the serial-key e2e test (``test_serial_workers.py``), run by real workers.

Start and finish are read from the database server's clock, the one clock
every worker process shares, so executions on different workers compare.
"""

from __future__ import annotations

import time
from datetime import datetime

from django.db import connection

from django_dbqueue import JobContext, task
from django_dbqueue.clock import database_now
from tests.testapp.models import Execution


def database_clock() -> datetime:
    """The database server's time now, not the transaction's (``clock.database_now``)."""
    return database_now(connection)


@task(takes_context=True)
def serial_step(context: JobContext, key: str, pause: float) -> None:
    """Hold the job for ``pause`` seconds; record its start and finish (label: ``key``)."""
    started = database_clock()
    time.sleep(pause)
    execution = Execution.objects.create(
        job_id=context.job_id,
        attempt=context.attempt,
        worker_id=context.worker_id,
        idempotency_key=context.idempotency_key,
        label=key,
    )
    Execution.objects.filter(pk=execution.pk).update(
        started_at=started, finished_at=database_clock()
    )
