"""The reaper: recovers expired leases, moves finished jobs to their history tables
(``history``, PostgreSQL) and deletes finished jobs past retention.

``runworkers`` calls ``sweep()`` every ``REAPER_INTERVAL``. Both halves work
in bounded batches, each its own short transaction, so many workers can reap
at once (locked rows are skipped) and a large backlog never holds long locks.
A sweep purges for a bounded time only (``PURGE_SHARE`` of the interval), so
however many finished rows wait for deletion, expired leases are recovered
every sweep. Queue pauses whose time is up are deleted first (``pauses.sweep``), so
the claim's plain path comes back. Only terminal rows are ever deleted, never one that a job not
finished yet depends on (``needed_by_dependents``), and a job's dependency
edges go with it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.db.models import DateTimeField, Exists, ExpressionWrapper, OuterRef, Q, QuerySet

from django_dbqueue import conf, history, leases, limits, pauses, runnable, sql
from django_dbqueue.models import UNFINISHED_STATES, Dependency, Job, JobState, UtcNow

log = logging.getLogger(__name__)

#: Rows deleted per statement.
PURGE_BATCH = 1000
#: The share of ``REAPER_INTERVAL`` one sweep may spend purging: the rest of a large
#: backlog waits for the next sweeps, which recover expired leases first.
PURGE_SHARE = 0.25
#: The share of ``REAPER_INTERVAL`` one sweep may spend moving finished jobs to their
#: history tables (``history.sweep``), on the same terms.
MOVE_SHARE = 0.25


def reap(limit: int = leases.REAP_BATCH) -> leases.ReapResult:
    """``leases.reap`` of up to ``limit`` expired leases, each retried with its task's backoff.

    The task's policy comes from ``runnable.backoff_for``: the settings' policy
    when the job's task no longer imports.
    """
    return leases.reap(limit, backoff_for=runnable.backoff_for)


def sweep() -> tuple[int, int]:
    """Delete the pauses that ended and the rate limits' old paces, recover every expired
    lease (``reap`` batch by batch), move finished jobs to their history tables
    (``history.sweep``, PostgreSQL) for a while, then purge for a while.

    The move stops once ``MOVE_SHARE`` of ``REAPER_INTERVAL`` is spent, and
    the purge once ``PURGE_SHARE`` is (after one batch at least each), so a
    lease that expires during a large backlog of either is recovered by the
    next sweep, not after the whole backlog is done. Returns ``(recovered, purged)``.
    """
    pauses.sweep()
    limits.sweep()
    recovered = 0
    while True:
        result = reap()
        batch = len(result.retried) + len(result.dead)
        recovered += batch
        if batch < leases.REAP_BATCH:
            interval = conf.get().reaper_interval
            history.sweep(leases.queue_connection(), time_budget=MOVE_SHARE * interval)
            return recovered, purge(time_budget=PURGE_SHARE * interval)


def retention_rules() -> list[tuple[tuple[str, ...], timedelta]]:
    """``(states, age)`` pairs from the settings; a ``None`` retention keeps rows forever."""
    cfg = conf.get()
    rules: list[tuple[tuple[str, ...], timedelta | None]] = [
        ((JobState.SUCCEEDED,), cfg.succeeded_retention),
        ((JobState.DEAD, JobState.CANCELLED), cfg.dead_retention),
    ]
    return [(states, age) for states, age in rules if age is not None]


def purge(
    batch_size: int = PURGE_BATCH, *, dry_run: bool = False, time_budget: float | None = None
) -> int:
    """Delete finished jobs past their retention, ``batch_size`` rows at a time.

    With a ``time_budget`` (seconds) no batch starts once that much time has
    passed, so the purge ends within about the budget plus one batch and may
    leave rows due for a later call; the first batch always runs, so every
    call makes progress. ``None`` deletes everything due.

    ``succeeded`` rows go after ``SUCCEEDED_RETENTION`` (on PostgreSQL, where a
    retention of a history table's period or more takes whole periods, first by
    dropping the history tables it passed whole: ``history.retention_cutoff`` and
    ``history.drop_expired``); ``dead`` and
    ``cancelled`` after ``DEAD_RETENTION`` (``None``: never); a job that an
    unfinished job depends on is kept, whatever its age, so its result stays
    readable (``needed_by_dependents``). Unfinished jobs are never touched:
    each batch is locked (rows others hold are skipped) and deleted by a
    statement that re-checks state and age (``delete_where``). Returns how
    many rows were deleted, or with ``dry_run`` how many would be, deleting
    nothing. A ``batch_size`` below 1 is a ``ValueError``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be 1 or more, not {batch_size}.")
    database = conf.get().database
    connection = leases.queue_connection()
    deadline = None if time_budget is None else time.monotonic() + time_budget
    deleted = 0
    for states, age in retention_rules():
        # Ages count back from the database clock: a worker's clock cannot purge rows early.
        cutoff: Any = ExpressionWrapper(UtcNow() - age, output_field=DateTimeField())
        if states == (JobState.SUCCEEDED,) and history.kept_apart(connection):
            cutoff = history.retention_cutoff(connection, age)
            if not dry_run:
                deleted += history.drop_expired(connection, cutoff)
        old = (
            Job.objects.using(database)
            .filter(state__in=states, finished_at__lt=cutoff)
            .exclude(needed_by_dependents())
        )
        if dry_run:
            deleted += old.count()
            continue
        while True:
            with sql.write_transaction(connection):
                locked = old.order_by("finished_at").select_for_update(skip_locked=True)
                batch = list(locked.values_list("pk", flat=True)[:batch_size])
                deleted += delete_where(old.filter(pk__in=batch))
                delete_edges(database, batch)
            if len(batch) < batch_size:
                break
            if deadline is not None and time.monotonic() >= deadline:
                log.info("purge paused for the next sweep deleted=%s", deleted)
                return deleted
    if deleted and not dry_run:
        log.info("purged finished jobs count=%s", deleted)
    return deleted


def delete_finished(job_ids: Iterable[int]) -> list[int]:
    """Delete the jobs among ``job_ids`` that are in a terminal state; return their ids.

    Unfinished jobs are never deleted, whatever was selected, nor a job an
    unfinished job depends on (``needed_by_dependents``): the rows
    are locked first and the delete re-checks their state, so a job requeued
    meanwhile is not deleted either. A job the reaper is moving to its history
    table meanwhile is found there (``history.hold``).
    """
    ids = list(job_ids)
    database = conf.get().database
    finished = (
        Job.objects.using(database).finished().filter(pk__in=ids).exclude(needed_by_dependents())
    )
    connection = leases.queue_connection()
    with sql.write_transaction(connection):
        history.hold(connection, ids)
        deleted = sorted(finished.select_for_update().values_list("pk", flat=True))
        delete_where(finished.filter(pk__in=deleted))
        delete_edges(database, deleted)
    return deleted


def needed_by_dependents() -> Exists:
    """Whether a job still has a dependent that may read its result: one not finished,
    or one a requeue may return to waiting (cancelled with dependencies pending)."""
    waiting_on = Q(job__state__in=UNFINISHED_STATES) | Q(job__pending_dependencies__gt=0)
    return Exists(Dependency.objects.filter(waiting_on, depends_on=OuterRef("pk")))


def delete_edges(database: str, job_ids: list[int]) -> None:
    """Delete the dependency edges of the jobs ``job_ids``, deleted in this transaction."""
    if job_ids:
        edges = Dependency.objects.using(database).filter(
            Q(job_id__in=job_ids) | Q(depends_on_id__in=job_ids)
        )
        edges._raw_delete(database)


def delete_where(jobs: QuerySet[Job]) -> int:
    """Delete the rows ``jobs`` matches in one filtered ``DELETE``; return how many.

    ``QuerySet.delete()`` would, once any ``pre_delete``/``post_delete``
    receiver is connected, select the rows first and then delete them by
    primary key alone, without the filter: a job requeued in between would be
    deleted while ready. The raw delete keeps the filter in the statement, so
    the database re-checks it on every row it deletes. The price: deleting
    jobs sends no model delete signals (their dependency edges, the only rows
    that refer to them, are deleted by ``delete_edges``).
    """
    # None: the filter matches nothing by construction (an empty id list), so nothing ran.
    return jobs._raw_delete(jobs.db) or 0
