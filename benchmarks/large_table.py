"""(h) The job table at scale, as it is laid out today (on demand: ``--large-table``).

The baseline of issue 31 (finished jobs leave the claimable table), in one run:

- the 1 x 8 drain of ``large_ready`` jobs on an emptied table, then the same drain
  among ``large_finished`` finished rows (ten million by default), its rate read
  against the first one's and by quarter of the drain. Run it on a server with
  PostgreSQL's default vacuum settings to see what most sites get (the label says
  the server's);
- the size of the table the claim reads (with its TOAST and indexes) once ``hot_drained``
  jobs were drained into an emptied table: today every finished job stays in it
  until retention deletes it;
- retention of a day of ``retention_rows`` succeeded jobs past ``SUCCEEDED_RETENTION``
  as the reaper does it today, batched deletes (``reaper.purge``, here uninterrupted):
  its time, the WAL the server wrote and the dead rows it left for vacuum.
"""

from __future__ import annotations

import time

from benchmarks import database, drain, purge_backlog
from benchmarks.results import Result
from benchmarks.session import Session
from django_dbqueue import reaper

#: The drains read against each other: one process of 8 threads, as the backlog drain.
EMPTY = drain.Drain("large_table_drain_empty", 1, 8, raw="raw_claim_complete_b8")
AMONG_FINISHED = drain.Drain("large_table_drain", 1, 8, raw=EMPTY.key)
#: Drains ``hot_drained`` jobs before the table's size is read.
FILLER = drain.Drain("large_table_filler", 2, 32)

#: The job table's size in bytes (its heap with its maps and TOAST; its indexes), and its
#: rows by whether they are finished.
SIZES = """
SELECT pg_table_size(%(table)s::regclass),
       pg_indexes_size(%(table)s::regclass),
       count(*) FILTER (WHERE finished_at IS NOT NULL),
       count(*) FILTER (WHERE finished_at IS NULL)
FROM dbqueue_job
"""

MIB = 1024 * 1024


def run(session: Session) -> None:
    """Both drains, the table's size after ``hot_drained`` jobs, then the purge of
    ``retention_rows``."""
    sizes = session.sizes
    deadline = sizes.large_drain_deadline
    empty = drain.among_finished(session, EMPTY, 0, sizes.large_ready, deadline)
    session.results.add(empty)
    among = drain.among_finished(
        session, AMONG_FINISHED, sizes.large_finished, sizes.large_ready, deadline
    )
    session.results.add(among)
    session.results.add(size_after_drain(session, sizes.hot_drained, deadline))
    session.results.add(retention(session, sizes.retention_rows))


def size_after_drain(session: Session, count: int, deadline: float) -> Result:
    """The job table's size in MiB (its heap with TOAST, and its indexes) once ``count``
    jobs were drained."""
    database.reset(session.harness)
    ids = database.seed(session.harness, count)
    database.vacuum(session.harness)
    drained = drain.measure(session, FILLER, ids, deadline)
    table, indexes, finished, unfinished = database.one(
        session.harness, SIZES, {"table": database.TABLE}
    )
    total = (table + indexes) / MIB
    details = {
        "drained": drained.details["succeeded"],
        "cut_short": drained.details["cut_short"],
        "table_mib": table / MIB,
        "indexes_mib": indexes / MIB,
        "finished_rows": finished,
        "unfinished_rows": unfinished,
    }
    label = f"the claimable table after {count:,} jobs drained ({database.TABLE}, with indexes)"
    return Result("large_table_size", label, total, "MiB", n=count, details=details)


def retention(session: Session, rows: int) -> Result:
    """Rows a second ``reaper.purge`` deletes of ``rows`` succeeded two days ago, on an
    emptied table, with the WAL written and the dead rows left."""
    harness = session.harness
    database.reset(harness)
    harness.execute(purge_backlog.SEED_PAST_RETENTION, {"count": rows})
    database.vacuum(harness)
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
    label = f"retention of {rows:,} succeeded jobs by batched deletes (reaper.purge)"
    return Result(
        "large_table_retention", label, deleted / seconds, "rows/s", n=rows, details=details
    )
