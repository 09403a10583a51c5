"""The benchmark's own PostgreSQL database: created, migrated, reset, seeded, dropped.

The harness talks to it through plain psycopg connections of its own, so its
bookkeeping never shares a connection (or a transaction) with what is measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

import psycopg
from django.core.management import call_command
from psycopg import sql

from benchmarks.tasks import noop

Connection = psycopg.Connection[tuple[Any, ...]]

TABLE = "dbqueue_job"

#: Values that turn a copy of a ready job into one that succeeded an hour ago: old enough
#: to be history, young enough that the reaper's retention (a day by default) keeps it.
SUCCEEDED_AN_HOUR_AGO = {
    "state": "'succeeded'",
    "attempts": "1",
    "lease_token": "1",
    "last_worker_id": "'seed'",
    "started_at": "now() - interval '1 hour'",
    "finished_at": "now() - interval '1 hour'",
}

COLUMNS = """
SELECT column_name FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = %s
  AND is_identity = 'NO' AND is_generated = 'NEVER'
ORDER BY ordinal_position
"""

COPIES = """
WITH copied AS (
    INSERT INTO {table} ({columns})
    SELECT {values} FROM {table} t, generate_series(1, %(count)s)
    WHERE t.id = %(template)s
    ORDER BY generate_series
    RETURNING id
)
SELECT min(id), max(id) FROM copied
"""

SPAN = """
SELECT count(*) FILTER (WHERE state = 'succeeded'),
       extract(epoch FROM max(finished_at) FILTER (WHERE state = 'succeeded') - min(started_at))
FROM dbqueue_job WHERE id BETWEEN %(first)s AND %(last)s
"""

START_SKEW = """
SELECT coalesce(extract(epoch FROM max(first_claim) - min(first_claim)), 0) FROM (
    SELECT min(started_at) AS first_claim FROM dbqueue_job
    WHERE id BETWEEN %(first)s AND %(last)s AND started_at IS NOT NULL
    GROUP BY last_worker_id
) per_worker
"""

#: The drain's rate over each quarter of the jobs, in claim order (ids, all due at once): from
#: the quarter's first claim to its last completion, by the database clock.
QUARTERS = """
SELECT count(*) / nullif(extract(epoch FROM max(finished_at) - min(started_at)), 0)
FROM (
    SELECT ntile(4) OVER (ORDER BY id) AS quarter, started_at, finished_at FROM dbqueue_job
    WHERE id BETWEEN %(first)s AND %(last)s AND state = 'succeeded'
) succeeded
GROUP BY quarter ORDER BY quarter
"""

AUTOVACUUMS = """
SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = 'dbqueue_job'::regclass
"""

SHARES = """
SELECT last_worker_id, count(*) FROM dbqueue_job
WHERE id BETWEEN %(first)s AND %(last)s AND state = 'succeeded'
GROUP BY last_worker_id ORDER BY last_worker_id
"""


@dataclass(frozen=True)
class Ids:
    """The ids of a batch of seeded jobs: ``first`` to ``last``, every one in between."""

    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    def params(self) -> dict[str, int]:
        return {"first": self.first, "last": self.last}


class Span(NamedTuple):
    """How many of the seeded jobs succeeded, and over how long by the database clock."""

    succeeded: int
    seconds: float
    start_skew: float


def connect(url: str) -> Connection:
    """An autocommit connection for the harness's own statements."""
    return psycopg.connect(url, autocommit=True)


def create(url: str) -> None:
    """Create the database named in ``url``, dropping any leftover of an earlier run."""
    with psycopg.connect(maintenance_url(url), autocommit=True) as conn:
        conn.execute(_database_statement("DROP DATABASE IF EXISTS {} WITH (FORCE)", url))
        conn.execute(_database_statement("CREATE DATABASE {}", url))


def drop(url: str) -> None:
    """Drop the database named in ``url``, disconnecting whoever is still on it."""
    with psycopg.connect(maintenance_url(url), autocommit=True) as conn:
        conn.execute(_database_statement("DROP DATABASE IF EXISTS {} WITH (FORCE)", url))


def maintenance_url(url: str) -> str:
    """``url`` pointing at the ``postgres`` database instead."""
    return urlunsplit(urlsplit(url)._replace(path="/postgres"))


def _database_statement(template: str, url: str) -> sql.Composed:
    name = urlsplit(url).path.lstrip("/")
    return sql.SQL(template).format(sql.Identifier(name))


def migrate() -> None:
    """Create the schema the way a project does: Django's ``migrate``."""
    call_command("migrate", verbosity=0, interactive=False)


#: Drop every history table (they inherit dbqueue_job): an earlier step's reapers made them.
DROP_HISTORY_TABLES = """
DO $$
DECLARE
    history regclass;
BEGIN
    FOR history IN
        SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'dbqueue_job'::regclass
    LOOP
        EXECUTE format('DROP TABLE %s', history);
    END LOOP;
END
$$
"""


def reset(conn: Connection) -> None:
    """Empty the job, workflow edge and business tables, and drop the history tables: each
    step starts from one job table, as before any job finished (an empty history table
    would still cost every read of ``dbqueue_job`` the planning of it)."""
    conn.execute(DROP_HISTORY_TABLES)
    conn.execute("TRUNCATE dbqueue_job, dbqueue_dependency, testapp_order")


def seed(conn: Connection, count: int, *, succeeded: bool = False) -> Ids:
    """Insert ``count`` no-op jobs in one ``INSERT ... SELECT generate_series``.

    Each is a copy of a job enqueued through the package, so every column
    holds what ``enqueue`` writes: ready and due, or (``succeeded``) finished
    an hour ago. The template job itself is deleted.
    """
    template = noop.enqueue().pk
    columns = [row[0] for row in conn.execute(COLUMNS, (TABLE,))]
    overrides = SUCCEEDED_AN_HOUR_AGO if succeeded else {}
    values = [
        sql.SQL(overrides[column]) if column in overrides else sql.Identifier("t", column)
        for column in columns
    ]
    statement = sql.SQL(COPIES).format(
        table=sql.Identifier(TABLE),
        columns=sql.SQL(", ").join(map(sql.Identifier, columns)),
        values=sql.SQL(", ").join(values),
    )
    first, last = one(conn, statement, {"count": count, "template": template})
    conn.execute("DELETE FROM dbqueue_job WHERE id = %s", (template,))
    return Ids(first, last)


#: Turns the seeded no-op jobs into ``sleep_for`` jobs of ``shortest`` to ``longest`` seconds,
#: spread evenly over that range in an order unrelated to the ids (so to the claim order).
SLOWED_DOWN = """
UPDATE dbqueue_job
SET task = 'benchmarks.tasks.sleep_for',
    kwargs = jsonb_build_object(
        'seconds', %(shortest)s + (%(longest)s - %(shortest)s) * ((id * 7919) %% 1000) / 999.0
    )
WHERE id BETWEEN %(first)s AND %(last)s
"""


#: Makes the seeded jobs run on another worker, with leases of ten minutes: no reaper takes
#: them back during a drain.
RUN_ELSEWHERE = """
UPDATE dbqueue_job
SET state = 'running', worker_id = 'elsewhere', attempts = 1, lease_token = 1,
    lease_until = now() + interval '10 minutes'
WHERE id BETWEEN %(first)s AND %(last)s
"""


def run_elsewhere(conn: Connection, ids: Ids) -> None:
    """Make the seeded ``ids`` jobs another worker's running ones."""
    conn.execute(RUN_ELSEWHERE, ids.params())


def slow_down(conn: Connection, ids: Ids, shortest: float, longest: float) -> None:
    """Make the seeded ``ids`` jobs that sleep ``shortest`` to ``longest`` seconds each."""
    params = {"shortest": shortest, "longest": longest, "first": ids.first, "last": ids.last}
    conn.execute(SLOWED_DOWN, params)


def vacuum(conn: Connection, table: str = TABLE) -> None:
    """Settle the table after seeding: planner statistics and the visibility map."""
    conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(table)))


def span(conn: Connection, ids: Ids) -> Span:
    """Jobs among ``ids`` that succeeded, from the first claim to the last completion.

    ``start_skew`` is how much later the last worker process claimed its first
    job than the first one did.
    """
    succeeded, seconds = one(conn, SPAN, ids.params())
    (skew,) = one(conn, START_SKEW, ids.params())
    return Span(succeeded, float(seconds or 0), float(skew))


def rate_by_quarter(conn: Connection, ids: Ids) -> list[float]:
    """Jobs per second over each quarter of the jobs among ``ids`` that succeeded, in id order.

    A drain that slows as it goes (dead index entries piling up, say) shows it here.
    """
    return [float(rate or 0) for (rate,) in conn.execute(QUARTERS, ids.params())]


def autovacuums(conn: Connection) -> int:
    """How many times autovacuum has vacuumed the job table since the server's statistics began."""
    return int(one(conn, AUTOVACUUMS)[0])


def shares(conn: Connection, ids: Ids) -> dict[str, int]:
    """How many of the jobs among ``ids`` each worker ran to success, by worker id."""
    return dict(conn.execute(SHARES, ids.params()).fetchall())


def server_facts(conn: Connection) -> dict[str, str]:
    """The server settings that move these figures most."""
    names = ("server_version", "jit", "synchronous_commit", "fsync", "shared_buffers")
    return {name: one(conn, sql.SQL("SHOW {}").format(sql.Identifier(name)))[0] for name in names}


def one(conn: Connection, query: Any, params: Any = None) -> tuple[Any, ...]:
    """The single row ``query`` returns."""
    row = conn.execute(query, params).fetchone()
    if row is None:
        raise LookupError(f"no row from {query!r}")
    return row
