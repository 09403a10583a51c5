"""Retention: finished jobs are deleted once they are older than the settings allow.

Recovering expired leases is ``leases.reap``; ``runworkers`` calls both on the
reaper interval. Only terminal rows are ever deleted, in bounded batches, each
batch its own short statement, so a large backlog never holds long locks.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.utils import timezone

from django_dbqueue import conf
from django_dbqueue.models import Job, JobState

log = logging.getLogger(__name__)

#: Rows deleted per statement.
PURGE_BATCH = 1000


def retention_rules() -> list[tuple[tuple[str, ...], timedelta]]:
    """``(states, age)`` pairs from the settings; a ``None`` retention keeps rows forever."""
    cfg = conf.get()
    rules: list[tuple[tuple[str, ...], timedelta | None]] = [
        ((JobState.SUCCEEDED,), cfg.succeeded_retention),
        ((JobState.DEAD, JobState.CANCELLED), cfg.dead_retention),
    ]
    return [(states, age) for states, age in rules if age is not None]


def purge(batch_size: int = PURGE_BATCH) -> int:
    """Delete finished jobs past their retention, ``batch_size`` rows at a time.

    ``succeeded`` rows go after ``SUCCEEDED_RETENTION``; ``dead`` and
    ``cancelled`` after ``DEAD_RETENTION`` (``None``: never). Ready and running
    jobs are never touched. Returns how many rows were deleted.
    """
    database = conf.get().database
    deleted = 0
    for states, age in retention_rules():
        old = Job.objects.using(database).filter(
            state__in=states, finished_at__lt=timezone.now() - age
        )
        while batch := list(old.order_by("finished_at").values_list("pk", flat=True)[:batch_size]):
            count, _ = old.filter(pk__in=batch).delete()
            deleted += count
            if len(batch) < batch_size:
                break
    if deleted:
        log.info("purged finished jobs count=%s", deleted)
    return deleted
