"""The task every benchmark job runs."""

from __future__ import annotations

from django_dbqueue import task


@task
def noop() -> None:
    """Do nothing: a drain of these jobs measures the queue alone."""
