"""The dead jobs at a glance: how many carry each queue, task and last error code.

The admin's queue health counts dead jobs per queue (``stats.queue_stats``); its queue,
task and error-code filters and its search's task paths list the values dead jobs
carry. Both come from ``counts``: one index-only read of the dead jobs' partial index
in the order of the three columns (``dbqueue_job_dead_kinds``), grouped as it reads,
so its cost follows the dead jobs, never the finished history. Within ``one_read``
(one admin page) each database is read once and every caller shares the result;
outside it each call reads afresh, so nothing is kept from one request to the next.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NamedTuple

from django.db.models import Count

from django_dbqueue.models import Job, JobState


class DeadKind(NamedTuple):
    """What dead jobs have in common: their queue, task and last error code."""

    queue: str
    task: str
    last_error_code: str


#: ``counts`` by database alias while one admin page is built (``one_read``).
_shared: ContextVar[dict[str, Mapping[DeadKind, int]] | None] = ContextVar(
    "dbqueue_dead_counts", default=None
)


@contextmanager
def one_read() -> Iterator[None]:
    """Within the block, ``counts`` reads each database once: the health table, the
    filters and the search of one admin page share the read."""
    token = _shared.set({})
    try:
        yield
    finally:
        _shared.reset(token)


def counts(alias: str) -> Mapping[DeadKind, int]:
    """How many dead jobs on ``alias`` share each ``DeadKind``, in one read of their
    partial index; read once per ``one_read``."""
    shared = _shared.get()
    if shared is not None and alias in shared:
        return shared[alias]
    dead = Job.objects.using(alias).filter(state=JobState.DEAD).order_by()
    # COUNT(*), not COUNT(id): the index holds no id, and needs none to count (index-only).
    rows = dead.values_list(*DeadKind._fields).annotate(jobs=Count("*"))
    found = {DeadKind(queue, task, code): jobs for queue, task, code, jobs in rows}
    if shared is not None:
        shared[alias] = found
    return found


def per_queue(alias: str) -> Counter[str]:
    """How many dead jobs each queue on ``alias`` holds (``counts``, added up)."""
    queues: Counter[str] = Counter()
    for kind, jobs in counts(alias).items():
        queues[kind.queue] += jobs
    return queues
