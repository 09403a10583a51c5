"""Finished jobs leave the table the claim reads: history tables (PostgreSQL).

Every job is written and claimed in ``dbqueue_job``. Soon after a job finishes,
the reaper moves it (``move``, in batches, each its own short transaction) into a
history table that inherits ``dbqueue_job``: one per ``HISTORY_TABLE_DAYS``
period for succeeded jobs, ``dbqueue_job_ended`` for dead and cancelled ones
(migration 0023). So the table the worker's statements read (``ONLY
dbqueue_job``) holds the jobs not finished and the few finished since the last
sweep, whatever the history's size; while a read of ``dbqueue_job`` (the ORM, the
admin, ``get_result``, a workflow's results) finds a job in any state, with its
id, wherever it lives.

A job that moves keeps every field, so fencing is untouched: a worker's write
names ``ONLY dbqueue_job`` and a job there is never finished, so a stale
worker's completion of a moved job changes nothing and reads as a lost lease,
and the lost-reply check (``leases.settled_by``) reads the job wherever it is.
A history table holds finished jobs only (its ``CHECK`` says so): before a
write that makes a finished job unfinished again (a requeue, a workflow's
dependent waiting again), ``restore`` moves it back into ``dbqueue_job``.

MySQL, MariaDB and SQLite keep every job in ``dbqueue_job``: each function here
does nothing there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import NamedTuple

from django.db.backends.base.base import BaseDatabaseWrapper

from django_dbqueue import conf, sql

log = logging.getLogger(__name__)

#: Finished jobs moved per statement.
MOVE_BATCH = 1000


def kept_apart(connection: BaseDatabaseWrapper) -> bool:
    """Whether finished jobs move out of ``dbqueue_job`` on this connection's database."""
    return sql.defines(connection, "move_finished")


def sweep(connection: BaseDatabaseWrapper, time_budget: float | None = None) -> int:
    """Create the history tables due soon (``prepare``), then move finished jobs.

    Moves ``MOVE_BATCH`` at a time until fewer are left or, with a
    ``time_budget`` (seconds), until that much time has passed (the first
    batch always runs). Returns how many moved; 0 where jobs are not kept apart.
    """
    if not kept_apart(connection):
        return 0
    deadline = None if time_budget is None else time.monotonic() + time_budget
    moved = 0
    for batch in batches(connection, keep_from=kept_from(connection)):
        moved += batch
        if deadline is not None and time.monotonic() >= deadline:
            break
    if moved:
        log.info("moved finished jobs to history count=%s", moved)
    return moved


def batches(
    connection: BaseDatabaseWrapper, limit: int = MOVE_BATCH, *, keep_from: datetime | None
) -> Iterator[int]:
    """Create the history tables due soon (``prepare``), then move finished jobs ``limit``
    at a time (``move``), yielding how many each batch moved, until one moves fewer.

    Each batch reads on from the latest finish time the one before it reached, so the
    jobs moved earlier, whose index entries stay until a vacuum, are not stepped over
    again. A job skipped in passing (another transaction held it) waits for the next
    sweep, which starts again from ``keep_from``.
    """
    prepare(connection)
    after = None
    while True:
        batch = move(connection, limit, keep_from=keep_from, after=after)
        yield batch.moved
        if batch.moved < limit:
            return
        after = batch.reached


def kept_from(connection: BaseDatabaseWrapper) -> datetime | None:
    """The finish time from which ``SUCCEEDED_RETENTION`` keeps succeeded jobs, by the
    database clock (``retention_cutoff``); ``None`` when it keeps them all."""
    age = conf.get().succeeded_retention
    return None if age is None else retention_cutoff(connection, age)


def prepare(connection: BaseDatabaseWrapper, at: datetime | None = None) -> list[str]:
    """Create, where missing, the history tables of the period holding ``at`` (``None``:
    the database clock's now) and of the next one, and the one of dead and cancelled jobs.

    Called every sweep, so a period's table exists a period before its first job
    finishes; ``move`` still creates one that is missing. Returns their names.
    """
    with sql.write_transaction(connection):
        rows = sql.run(connection, "prepare_history", {"at": at, "days": _days()})
    return [row["name"] for row in rows]


def unmoved(connection: BaseDatabaseWrapper, keep_from: datetime | None) -> int:
    """How many finished jobs in ``dbqueue_job`` itself ``move`` would move for
    ``keep_from`` (read through the indexes it reads)."""
    count: int = sql.run(connection, "unmoved_finished", {"keep_from": keep_from})[0]["jobs"]
    return count


class Batch(NamedTuple):
    """What one ``move`` did: how many jobs moved, and the latest finish time among them
    (``None`` when none moved)."""

    moved: int
    reached: datetime | None


def move(
    connection: BaseDatabaseWrapper,
    limit: int = MOVE_BATCH,
    *,
    keep_from: datetime | None,
    after: datetime | None = None,
) -> Batch:
    """Move finished jobs into their history tables, in one transaction.

    Up to ``limit`` finished jobs that retention keeps (finished at ``keep_from``
    or later; ``None``: all) and finished at ``after`` or later (``None``: any), oldest
    finish first; in a batch that finds fewer, also up to ``limit`` dead and ``limit``
    cancelled ones finished before ``keep_from``. A succeeded job already past retention
    stays for the purge: moving it would only copy it before its deletion. Rows
    other transactions hold are skipped (a later batch moves them), never awaited.
    """
    params = {"limit": limit, "days": _days(), "keep_from": keep_from, "after": after}
    with sql.write_transaction(connection):
        (row,) = sql.run(connection, "move_finished", params)
    return Batch(row["moved"], row["reached"])


def vacuum(connection: BaseDatabaseWrapper) -> list[str]:
    """``VACUUM (ANALYZE)`` ``dbqueue_job``, then each history table, one statement each, outside
    any transaction (call it in autocommit); return the tables' names, in that order.

    After a large move (an upgrade's ``dbqueue_move_history``), ``dbqueue_job`` holds a
    dead row for every job moved, and each index still points at it until a vacuum: the
    claim's scans step over them and autovacuum would clean all at once later, on the
    workers' cores. Vacuum takes no lock that stops reads or writes. Nothing where jobs
    are not kept apart.
    """
    if not kept_apart(connection):
        return []
    tables = sql.run(connection, "vacuum_job_tables", {})
    for table in tables:
        with connection.cursor() as cursor:
            cursor.execute(table["vacuum"])
    return [table["name"] for table in tables]


def retention_cutoff(connection: BaseDatabaseWrapper, age: timedelta) -> datetime:
    """The finish time before which succeeded jobs are past a retention of ``age``.

    The database clock less ``age``: every job goes once past it. With
    ``WHOLE_TABLE_RETENTION`` and an ``age`` of a history table's period
    (``HISTORY_TABLE_DAYS``) or more, the start of the period holding that
    instant, so retention takes whole tables (``drop_expired``) and deletes no
    job one at a time: a succeeded job is then kept for ``age`` at least and one
    period more at most.
    """
    cfg = conf.get()
    params = {
        "age": age.total_seconds(),
        "days": cfg.history_table_days,
        "whole_tables": cfg.whole_table_retention,
    }
    cutoff: datetime = sql.run(connection, "retention_cutoff", params)[0]["cutoff"]
    return cutoff


def drop_expired(connection: BaseDatabaseWrapper, cutoff: datetime) -> int:
    """Drop the history tables of succeeded jobs whose whole period ended by ``cutoff``,
    each in a transaction of its own; return how many jobs they held.

    A table is kept while one of its jobs is needed by a dependent not finished (the
    batched purge deletes the others), or when a lock is not granted within a second
    (the next sweep tries again).
    """
    dropped = 0
    for table in sql.run(connection, "expired_history", {"cutoff": cutoff}):
        with sql.write_transaction(connection):
            jobs = sql.run(connection, "drop_history", {"table": table["name"]})[0]["dropped"]
        if jobs is None:
            log.info("kept history table past retention table=%s", table["name"])
        else:
            log.info("dropped history table table=%s jobs=%s", table["name"], jobs)
            dropped += jobs
    return dropped


def locked_wherever(
    connection: BaseDatabaseWrapper, name: str, job_ids: Iterable[int]
) -> list[sql.Row]:
    """Run the locking read ``name`` (a block taking ``job_ids``, returning rows with
    ``id``) of ``job_ids``, then once more of the ids it missed, where jobs are kept apart;
    the rows in id order.

    A job the reaper was moving while the read waited for its row lock reads as
    missing: the move deleted the row the read waited for, and its copy in a
    history table came after the read's snapshot. The second read starts after
    the move committed and finds the copy. Costs nothing more when none is missing.
    """
    ids = sorted(set(job_ids))
    rows = sql.run(connection, name, {"job_ids": ids})
    if kept_apart(connection) and len(rows) < len(ids):
        found = {row["id"] for row in rows}
        missing = [job_id for job_id in ids if job_id not in found]
        rows += sql.run(connection, name, {"job_ids": missing})
    return sorted(rows, key=lambda row: row["id"])


def hold(connection: BaseDatabaseWrapper, job_ids: Iterable[int]) -> None:
    """Lock the jobs among ``job_ids`` still in ``dbqueue_job`` until the transaction ends.

    Call in a transaction that must find these jobs wherever they are: a move of
    one under way ends first, so a later statement of the transaction finds it
    in its history table (a statement that began before the move committed
    would find it nowhere), and none of them moves until the transaction ends.
    """
    ids = sorted(set(job_ids))
    if ids and kept_apart(connection):
        sql.run(connection, "hold_unmoved", {"job_ids": ids})


def restore(connection: BaseDatabaseWrapper, job_ids: Iterable[int], states: list[str]) -> None:
    """Move the jobs among ``job_ids`` in one of ``states`` back into ``dbqueue_job``.

    Call in the transaction that then makes them unfinished (``hold`` is taken
    first): each keeps its id and every field; a job not in a history table, or
    in another state, is left where it is.
    """
    ids = sorted(set(job_ids))
    if ids and kept_apart(connection):
        hold(connection, ids)
        sql.run(connection, "restore_finished", {"job_ids": ids, "states": states})


def _days() -> int:
    return conf.get().history_table_days
