"""The structured fields of a log line about a job, passed to logging as ``extra``.

Every line about one job carries ``job_id``, ``task``, ``queue``, ``attempt``
and ``worker_id`` (``job_fields``); the line of an attempt's outcome adds
``outcome``, ``duration_ms`` and ``error_code`` (``None`` for a success),
so it carries all of ``FIELDS``. A line about several jobs at once (the
reaper's sweep, a cancel request) carries their ids as ``job_ids``, a sorted
list. Any formatter that prints a record's extra attributes (a JSON
formatter such as python-json-logger) prints them; the message text stays
the human-readable ``key=value`` line.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

#: The fields of an attempt's outcome line, in the order the docs list them.
FIELDS = ("job_id", "task", "queue", "attempt", "outcome", "duration_ms", "error_code", "worker_id")


class LeasedJob(Protocol):
    """What ``job_fields`` reads: a ``leases.Lease`` (not imported: this module is below it)."""

    @property
    def job_id(self) -> int: ...
    @property
    def task(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def worker_id(self) -> str: ...


def job_fields(lease: LeasedJob) -> dict[str, object]:
    """The fields of a line about the leased job: those of ``FIELDS`` known before its outcome."""
    return {
        "job_id": lease.job_id,
        "task": lease.task,
        "queue": lease.queue,
        "attempt": lease.attempt,
        "worker_id": lease.worker_id,
    }


def outcome_fields(
    lease: LeasedJob, outcome: str, duration: float, error_code: str
) -> dict[str, object]:
    """Every field of ``FIELDS`` for the line of an attempt's outcome.

    ``duration`` is in seconds; ``duration_ms`` is in milliseconds, to the
    microsecond. An empty ``error_code`` (a success) is ``None``.
    """
    return {
        **job_fields(lease),
        "outcome": outcome,
        "duration_ms": round(duration * 1000, 3),
        "error_code": error_code or None,
    }


def jobs_fields(job_ids: Iterable[int]) -> dict[str, object]:
    """The field of a line about several jobs: their ids, sorted."""
    return {"job_ids": sorted(job_ids)}
