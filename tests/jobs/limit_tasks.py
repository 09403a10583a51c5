"""Tasks of the concurrency-limit e2e tests (``tests/e2e/test_limit_workers.py``).

Each returns when it started and ended by the database clock, read by the task
itself, so a test can compute how many ran at once from the results alone.
"""

from __future__ import annotations

import time
from pathlib import Path

from django.db import connection

from django_dbqueue import clock, task
from tests.jobs.crash_tasks import QUICK_RETRY
from tests.jobs.e2e_tasks import GATE_TIMEOUT

#: The size of ``limited``'s limit, and of each tenant's for ``per_tenant``.
TASK_LIMIT = 3
TENANT_LIMIT = 2
#: ``paced``'s rate, in starts per second.
RATE = 20


def timed(milliseconds: int) -> dict[str, str]:
    """Spend ``milliseconds`` between two readings of the database clock; both, as text."""
    start = clock.database_now(connection)
    time.sleep(milliseconds / 1000)
    return {"start": clock.stamp(start), "end": clock.stamp(clock.database_now(connection))}


@task(concurrency=TASK_LIMIT)
def limited(milliseconds: int = 200) -> dict[str, str]:
    """At most ``TASK_LIMIT`` of these run at once, on every worker together."""
    return timed(milliseconds)


@task(concurrency=TENANT_LIMIT)
def per_tenant(tenant: str, milliseconds: int = 100) -> dict[str, str]:
    """Enqueued with ``concurrency_key=tenant``: ``TENANT_LIMIT`` per tenant at once."""
    return timed(milliseconds)


@task(concurrency=TASK_LIMIT, lease=2, retry=QUICK_RETRY)
def held(folder: str) -> None:
    """While ``folder/hold`` exists, stay running (the worker renews the lease); then end.

    A worker killed meanwhile holds its slots until its leases expire and the
    reaper frees them.
    """
    hold = Path(folder, "hold")
    deadline = time.monotonic() + GATE_TIMEOUT
    while hold.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@task(rate=f"{RATE}/s")
def paced() -> None:
    """Does nothing: ``RATE`` of these start a second, on every worker together."""


@task(rate="1/s")
def trickle() -> None:
    """Does nothing, one start a second at most: slow enough for a test to watch the pace."""
