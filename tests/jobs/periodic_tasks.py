"""Tasks the periodic tests put on schedules.

The tests declare the schedules themselves (``periodic(...)(task)``): a
module-level ``@periodic`` here would add a schedule to every worker that any
other test runs in this process.
"""

from __future__ import annotations

from django_dbqueue import JobContext, task
from tests.jobs.e2e_tasks import finish, record


@task
def report(region: str = "eu", *, full: bool = False) -> str:
    """A plain task with arguments for schedules to pass."""
    return f"{region}:{full}"


@task(queue="reports")
def nightly() -> None:
    """A task with its own queue."""


@task(takes_context=True)
def tick(context: JobContext, label: str = "") -> None:
    """Record the attempt (``Execution``), so a test can count runs per slot."""
    finish(record(context, label))
