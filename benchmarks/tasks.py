"""The task every benchmark job runs."""

from __future__ import annotations

import time

from django_dbqueue import JobContext, Retry, task


@task
def noop() -> None:
    """Do nothing: a drain of these jobs measures the queue alone."""


@task
def sleep_for(seconds: float) -> None:
    """Wait ``seconds``, as a job waiting on a remote service does (its thread idle)."""
    time.sleep(seconds)


@task(takes_context=True, max_attempts=2)
def retry_once(context: JobContext, delay: float) -> None:
    """Ask for a retry after ``delay`` seconds on the first attempt; succeed on the second."""
    if context.attempt == 1:
        raise Retry(delay=delay)
