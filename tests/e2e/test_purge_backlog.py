"""A large purge backlog never delays lease recovery (issue 26, item 8).

A worker's reaper sweeps every ``REAPER_INTERVAL``: expired leases first, then
finished rows past retention. Each sweep purges for a share of the interval
only, so a lease that expires while hundreds of thousands of rows wait for
deletion is recovered at the next sweep, not once they are all gone. The
1 M-row figure is ``python -m benchmarks --purge-backlog``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from django_dbqueue import Job
from tests.e2e.conftest import WorkerProcess
from tests.factories import JobFactory
from tests.waiting import wait_until

logger = logging.getLogger(__name__)

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

#: Finished rows past retention: the old sweep took 18 s to delete them before reaping again.
BACKLOG = 300_000
REAPER_INTERVAL = 1.0

SEED_FINISHED = """
INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at, attempts,
    max_attempts, lease_token, lease_seconds, created_at, started_at, finished_at,
    last_worker_id, last_error_code, last_error, errors)
SELECT 'default', 'tests.jobs.tasks.noop', '[]', '{}', 'succeeded', 0, now(), 1, 5, 1, 60,
    now() - interval '2 days', now() - interval '2 days', now() - interval '2 days', 'w0',
    '', '', '[]'
FROM generate_series(1, %s)
"""


def finished_rows() -> int:
    return Job.objects.filter(finished_at__isnull=False).count()


def test_a_lease_expiring_during_a_large_purge_is_recovered_at_the_next_sweep(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    with connection.cursor() as cursor:
        cursor.execute(SEED_FINISHED, [BACKLOG])
        cursor.execute("ANALYZE dbqueue_job")
    start_worker("--concurrency", "1", settings={"REAPER_INTERVAL": REAPER_INTERVAL})
    wait_until(lambda: finished_rows() < BACKLOG, what="the purge to start")

    expired = JobFactory(
        running=True, worker_id="gone", lease_until=timezone.now() - timedelta(seconds=1)
    )
    created = time.monotonic()
    wait_until(
        lambda: Job.objects.get(pk=expired.pk).last_error_code == "LEASE_EXPIRED",
        what="the expired lease to be recovered",
    )
    took = time.monotonic() - created

    left = finished_rows()
    logger.info(f"expired lease recovered after {took:.2f}s with {left} finished rows left")
    assert took < 2 * REAPER_INTERVAL
    assert left > 0, "the purge ended before the lease expired: nothing was measured"
