"""(on demand, ``--purge-backlog``) Lease recovery while the reaper purges a large backlog,
and what the purge itself costs.

``purge_backlog_rows`` finished jobs past retention wait for deletion when one
idle worker starts (``REAPER_INTERVAL`` 1 s). Once its reaper has begun to
purge, a job whose lease expired a second ago is written, as a crashed worker
leaves it; the first figure is how long until that job is ``ready`` again (its
history says ``LEASE_EXPIRED``), by the harness's clock. A sweep that deleted
the whole backlog before reaping again took as long as the purge.

The second is retention as today's layout does it, row by row in batches, for a
quarter of each reaper interval: the rows purged a second, from the first
deletion seen to the last, with the WAL the server wrote meanwhile and the dead
rows the deletes left for vacuum (the baseline of issue 31's partitioned
history, whose retention drops whole partitions).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from benchmarks import database, workers
from benchmarks.results import Result
from benchmarks.session import Session

REAPER_INTERVAL = 1.0
#: How long the lease may take to be recovered before the run gives up on it.
DEADLINE = 600.0
POLL = 0.02

SEED_PAST_RETENTION = """
INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at, attempts,
    max_attempts, lease_token, lease_seconds, created_at, started_at, finished_at,
    last_worker_id, last_error_code, last_error, errors)
SELECT 'default', 'benchmarks.tasks.noop', '[]', '{}', 'succeeded', 0, now(), 1, 5, 1, 60,
    now() - interval '2 days', now() - interval '2 days', now() - interval '2 days', 'seed',
    '', '', '[]'
FROM generate_series(1, %(count)s)
"""
#: The seeded backlog still there, finished two days ago (the recovered job, run and finished
#: meanwhile, is not), counted through the finished-at index.
BACKLOG = "SELECT count(*) FROM dbqueue_job WHERE finished_at < now() - interval '1 day'"
EXPIRED_LEASE = """
INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at, attempts,
    max_attempts, lease_token, lease_seconds, created_at, started_at, worker_id, lease_until,
    last_worker_id, last_error_code, last_error, errors)
SELECT 'default', 'benchmarks.tasks.noop', '[]', '{}', 'running', 0, now(), 1, 5, 1, 60,
    now(), now(), 'crashed', now() - interval '1 second', 'crashed', '', '', '[]'
RETURNING id
"""
RECOVERED = "SELECT last_error_code = 'LEASE_EXPIRED' FROM dbqueue_job WHERE id = %s"
WAL_NOW = "SELECT pg_current_wal_lsn()"
WAL_SINCE = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)::bigint"
#: The statistics' dead rows of the job table (this harness session's counts flushed first).
DEAD_ROWS = """
SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = to_regclass('dbqueue_job')
"""


def run(session: Session) -> None:
    """Seed the backlog, start a worker, expire a lease mid-purge, time its recovery."""
    harness = session.harness
    rows = session.sizes.purge_backlog_rows
    database.reset(harness)
    harness.execute(SEED_PAST_RETENTION, {"count": rows})
    harness.execute("ANALYZE dbqueue_job")
    (wal_start,) = database.one(harness, WAL_NOW)
    env = workers.environment(session.url, "0", {"REAPER_INTERVAL": REAPER_INTERVAL})
    with workers.started(1, [], env, session.logs / "purge_backlog") as running:
        until(lambda: database.one(harness, BACKLOG)[0] < rows, "the purge to start")
        purge_started = time.monotonic()
        (job_id,) = database.one(harness, EXPIRED_LEASE)
        expired = time.monotonic()
        until(lambda: database.one(harness, RECOVERED, (job_id,))[0], "the lease's recovery")
        seconds = time.monotonic() - expired
        (left,) = database.one(harness, BACKLOG)
        until(lambda: database.one(harness, BACKLOG)[0] == 0, "the purge to finish")
        purge_seconds = time.monotonic() - purge_started
        (wal_bytes,) = database.one(harness, WAL_SINCE, (wal_start,))
        workers.stop_all(running)
    (dead_rows,) = database.one(harness, DEAD_ROWS)
    session.results.add(
        Result(
            "purge_backlog_lease_recovery",
            f"expired lease recovered during a {rows:,}-row purge",
            seconds,
            "s",
            n=rows,
            details={"reaper_interval": REAPER_INTERVAL, "finished_rows_left": left},
        )
    )
    session.results.add(
        Result(
            "purge_backlog_rate",
            f"retention of {rows:,} finished rows by batched deletes",
            rows / purge_seconds,
            "rows/s",
            n=rows,
            details={
                "reaper_interval": REAPER_INTERVAL,
                **purge_figures(rows, purge_seconds, wal_bytes, dead_rows),
            },
        )
    )


def purge_figures(rows: int, seconds: float, wal_bytes: int, dead_rows: int) -> dict[str, object]:
    """What a purge of ``rows`` cost: its time, the WAL written (per row too), the dead rows
    it left for vacuum."""
    return {
        "seconds": round(seconds, 2),
        "wal_bytes": wal_bytes,
        "wal_bytes_per_row": round(wal_bytes / rows, 1),
        "dead_rows_after": dead_rows,
    }


def until(condition: Callable[[], object], what: str) -> None:
    """Poll ``condition`` until it is truthy; fail the run after ``DEADLINE`` seconds."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {DEADLINE:.0f} s")
        time.sleep(POLL)
