"""(h) The job table at scale, with finished jobs kept apart (on demand: ``--large-table``).

Issue 31's figures, in one run:

- the upgrade of a table holding ``large_finished`` finished jobs (ten million by
  default) and ``large_ready`` ready ones: migration 0023 applied to it, then
  ``dbqueue_move_history`` moving the finished jobs to their history tables, then
  vacuuming the job tables as it does; the time of each, the rate of the move, the
  longest ``ACCESS EXCLUSIVE`` lock seen on the job tables, and every row accounted
  for after;
- the 1 x 8 drain of ``large_ready`` jobs on an emptied table, then the same drain
  among those finished jobs, moved, its rate read against the first one's and by
  quarter of the drain. Run it on a server with PostgreSQL's default vacuum settings
  to see what most sites get (the label says the server's);
- the size of ``dbqueue_job`` (with its TOAST and indexes: the table the claim reads)
  once ``hot_drained`` jobs were drained into an emptied table, the workers' reapers
  moving finished jobs out as they go, and the rest moved and the table vacuumed as the
  next sweep and autovacuum would; read against its size before the drain, when it held
  those jobs ready;
- retention of a day of ``retention_rows`` succeeded jobs past ``SUCCEEDED_RETENTION``,
  both ways in the same run: batched deletes (``reaper.purge`` of jobs still in
  ``dbqueue_job``, the only way before this layout) and the drop of their history
  table (after the move, timed apart: the cost every job pays once); the time of each,
  the WAL the server wrote and the dead rows left for vacuum.
"""

from __future__ import annotations

import dataclasses
import time
from io import StringIO

from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.test import override_settings

from benchmarks import database, drain, locks, purge_backlog
from benchmarks.results import Result
from benchmarks.session import Session
from django_dbqueue import history, reaper

#: The drains read against each other: one process of 8 threads, as the backlog drain.
EMPTY = drain.Drain("large_table_drain_empty", 1, 8, raw="raw_claim_complete_b8")
AMONG_FINISHED = drain.Drain("large_table_drain", 1, 8, raw=EMPTY.key)
#: Drains ``hot_drained`` jobs before the table's size is read.
FILLER = drain.Drain("large_table_filler", 2, 32)

#: The size in bytes of dbqueue_job itself (its heap with its maps and TOAST; its indexes)
#: and of its history tables (with theirs); the jobs by whether they are finished; and
#: the jobs in dbqueue_job itself.
SIZES = """
SELECT pg_table_size('dbqueue_job'),
       pg_indexes_size('dbqueue_job'),
       (SELECT COALESCE(sum(pg_total_relation_size(inhrelid)), 0)::bigint FROM pg_inherits
        WHERE inhparent = 'dbqueue_job'::regclass),
       count(*) FILTER (WHERE finished_at IS NOT NULL),
       count(*) FILTER (WHERE finished_at IS NULL),
       (SELECT count(*) FROM ONLY dbqueue_job)
FROM dbqueue_job
"""
#: The jobs by where they are: finished in dbqueue_job itself, in a history table, in all.
PLACES = """
SELECT count(*) FILTER (WHERE tableoid = 'dbqueue_job'::regclass AND finished_at IS NOT NULL),
       count(*) FILTER (WHERE tableoid <> 'dbqueue_job'::regclass),
       count(*)
FROM dbqueue_job
"""
#: The migration before the one that keeps finished jobs apart.
BEFORE_HISTORY = "0022_awaited_among"

MIB = 1024 * 1024


def run(session: Session) -> None:
    """The upgrade with the drain among the jobs it moved, the drain on an emptied table,
    the table's size after ``hot_drained`` jobs, then retention both ways."""
    sizes = session.sizes
    deadline = sizes.large_drain_deadline
    empty = drain.among_finished(session, EMPTY, 0, sizes.large_ready, deadline)
    session.results.add(empty)
    upgraded: list[Result] = []
    among = drain.among_finished(
        session,
        AMONG_FINISHED,
        sizes.large_finished,
        sizes.large_ready,
        deadline,
        after_seeding=lambda: upgraded.append(upgrade(session, sizes.large_finished)),
    )
    for result in [*upgraded, among]:
        session.results.add(result)
    session.results.add(size_after_drain(session, sizes.hot_drained, deadline))
    for result in retention(session, sizes.retention_rows):
        session.results.add(result)


def upgrade(session: Session, finished: int) -> Result:
    """Migration 0023 applied to the seeded table, then ``dbqueue_move_history`` (its
    vacuum of the job tables timed apart), with the ``ACCESS EXCLUSIVE`` locks they took
    on the job tables; rows moved a second."""
    harness = session.harness
    call_command("migrate", "django_dbqueue", BEFORE_HISTORY, verbosity=0)
    with locks.AccessExclusiveWatch(harness.info.dsn) as watch:
        started = time.monotonic()
        call_command("migrate", "django_dbqueue", verbosity=0)
        migrated = time.monotonic()
        progress = StringIO()
        call_command("dbqueue_move_history", "--no-vacuum", stdout=progress)
        moved_at = time.monotonic()
        # What the command does next unless --no-vacuum, timed apart from the move.
        vacuumed = history.vacuum(connections["default"])
        vacuumed_at = time.monotonic()
    unmoved, in_history, total = database.one(harness, PLACES)
    seconds = moved_at - migrated
    details = {
        "migrate_seconds": migrated - started,
        "move_seconds": seconds,
        "vacuum_seconds": vacuumed_at - moved_at,
        "vacuumed_tables": len(vacuumed),
        "longest_access_exclusive_on_dbqueue_job_s": watch.longest("dbqueue_job"),
        "longest_access_exclusive_s": watch.longest(),
        "access_exclusive_holds": len(watch.spans),
        "finished_left_in_dbqueue_job": unmoved,
        "in_history": in_history,
        "rows": total,
        "progress": progress.getvalue().splitlines(),
    }
    label = f"upgrade: migration 0023, then {finished:,} finished jobs moved to history"
    return Result(
        "large_table_upgrade", label, in_history / seconds, "rows/s", n=finished, details=details
    )


def size_after_drain(session: Session, count: int, deadline: float) -> Result:
    """The size in MiB of dbqueue_job itself (its heap with TOAST, and its indexes) once
    ``count`` jobs were drained, the workers' reapers moving finished jobs out, and the
    rest moved and the table vacuumed as the next sweep and autovacuum would; with its size
    before the drain, holding the ``count`` jobs ready, to read the growth against."""
    harness = session.harness
    database.reset(harness)
    ids = database.seed(harness, count)
    database.vacuum(harness)
    table_before, indexes_before, *_ = database.one(harness, SIZES)
    drained = drain.measure(session, FILLER, ids, deadline)
    table_drained, indexes_drained, _, _, _, left = database.one(harness, SIZES)
    call_command("dbqueue_move_history", stdout=StringIO())
    database.vacuum(harness)
    table, indexes, history, finished, unfinished, hot = database.one(harness, SIZES)
    total = (table + indexes) / MIB
    details = {
        "drained": drained.details["succeeded"],
        "cut_short": drained.details["cut_short"],
        "table_mib": table / MIB,
        "indexes_mib": indexes / MIB,
        "before_drain_mib": (table_before + indexes_before) / MIB,
        "right_after_drain_mib": (table_drained + indexes_drained) / MIB,
        "left_in_dbqueue_job_right_after_drain": left,
        "history_mib": history / MIB,
        "finished_rows": finished,
        "unfinished_rows": unfinished,
        "rows_in_dbqueue_job": hot,
    }
    label = (
        f"dbqueue_job after {count:,} jobs drained, the rest moved and vacuumed "
        "(with indexes; history apart)"
    )
    return Result("large_table_size", label, total, "MiB", n=count, details=details)


def retention(session: Session, rows: int) -> tuple[Result, Result]:
    """``reaper.purge`` of ``rows`` succeeded two days ago, on an emptied table: by batched
    deletes while they are in dbqueue_job, then by the drop of their history table once
    moved; rows a second of each, with the WAL written and the dead rows left."""
    harness = session.harness
    database.reset(harness)
    harness.execute(purge_backlog.SEED_PAST_RETENTION, {"count": rows})
    database.vacuum(harness)
    batched = purged(session, rows, "large_table_retention", "batched deletes (reaper.purge)")
    database.reset(harness)
    harness.execute(purge_backlog.SEED_PAST_RETENTION, {"count": rows})
    database.vacuum(harness)
    (wal_start,) = database.one(harness, purge_backlog.WAL_NOW)
    started = time.monotonic()
    # Moved as the reaper moves jobs while retention keeps them, then past it.
    with override_settings(DBQUEUE={**settings.DBQUEUE, "SUCCEEDED_RETENTION": None}):
        call_command("dbqueue_move_history", stdout=StringIO())
    move_seconds = time.monotonic() - started
    (move_wal,) = database.one(harness, purge_backlog.WAL_SINCE, (wal_start,))
    dropped = purged(session, rows, "large_table_retention_drop", "dropping its history table")
    moved = {"move_seconds": round(move_seconds, 2), "move_wal_bytes": move_wal}
    return batched, dataclasses.replace(dropped, details={**dropped.details, **moved})


def purged(session: Session, rows: int, key: str, how: str) -> Result:
    """``reaper.purge`` timed: rows a second, the WAL written, the dead rows left."""
    harness = session.harness
    (wal_start,) = database.one(harness, purge_backlog.WAL_NOW)
    started = time.monotonic()
    deleted = reaper.purge()
    seconds = time.monotonic() - started
    (wal_bytes,) = database.one(harness, purge_backlog.WAL_SINCE, (wal_start,))
    (dead_rows,) = database.one(harness, purge_backlog.DEAD_ROWS)
    details = {
        "deleted": deleted,
        **purge_backlog.purge_figures(rows, seconds, wal_bytes, dead_rows),
    }
    label = f"retention of {rows:,} succeeded jobs by {how}"
    return Result(key, label, deleted / seconds, "rows/s", n=rows, details=details)
