"""Tasks of the fault, fairness and shutdown e2e tests (``test_runtime.py``).

Each records its attempt as an ``Execution`` row, so the tests can tell which
jobs ran, how often, when, and on which worker.
"""

from __future__ import annotations

import time

from django_dbqueue import JobContext, task
from django_dbqueue.retry import Backoff
from tests.e2e.tasks import finish, record


@task(takes_context=True)
def paced(context: JobContext, label: str = "", milliseconds: int = 20) -> None:
    """Record the attempt, spend ``milliseconds`` working, then record the end."""
    execution = record(context, label)
    time.sleep(milliseconds / 1000)
    finish(execution)


@task(takes_context=True, lease=5, retry=Backoff(base=0.2, factor=2, cap=1))
def paced_short_lease(context: JobContext, milliseconds: int = 8) -> None:
    """``paced`` with a 5 s lease and sub-second retries, so lost outcomes recover fast."""
    execution = record(context)
    time.sleep(milliseconds / 1000)
    finish(execution)
