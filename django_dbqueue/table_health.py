"""The job table's bloat, seen before it hurts: its dead rows and what holds back vacuum.

Every finished, retried or reaped job leaves a dead row version behind in
PostgreSQL, which only vacuum removes; until it does, the claim's index scans
step over it. Vacuum cannot remove a dead row that an open snapshot may still
see, so one session left idle in a transaction (or a forgotten replication slot,
or a prepared transaction) lets the dead rows pile up however often autovacuum
runs. ``table_health`` reads both from the server's statistics, never from the
table, so it costs the same at 100 million rows as at ten; ``dbqueue_stats`` and
the metrics show it.

PostgreSQL only: InnoDB (MySQL, MariaDB) purges old row versions from its undo
log rather than the table, and SQLite rewrites pages in place, so there they are
``None``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import date
from typing import Any

from django.db import connections

from django_dbqueue import conf, sql


@dataclass(frozen=True)
class VacuumHorizon:
    """The oldest snapshot that keeps vacuum from removing dead rows of this database.

    ``kind``: ``"session"`` (a connection of this database with a transaction
    or query open, or a standby's feedback through a WAL sender),
    ``"replication slot"`` or ``"prepared transaction"``. ``holder``: the
    session's ``application_name``, the slot's name or the prepared
    transaction's ``gid``. ``pid``: the session's server process (``None``
    for the others). ``state``: the session's (``"idle in transaction"``...),
    ``None`` when not visible to this role. ``transactions``: how many
    transactions ago its snapshot was taken (``age(xmin)``): dead rows of every
    later transaction wait for it. ``seconds``: how long its transaction has
    been open, ``None`` for a slot or when not visible to this role (another
    role's session, unless this role has ``pg_read_all_stats``).
    """

    kind: str
    holder: str
    pid: int | None
    state: str | None
    transactions: int
    seconds: float | None


@dataclass(frozen=True)
class HistoryTables:
    """The history tables finished jobs moved to (``history``), from the catalogs.

    ``tables``: how many. ``bytes``: their size on disk, indexes and TOAST
    included. ``oldest_day``: the first day of the oldest table of succeeded
    jobs, ``None`` when there is none. Retention drops a table once its whole
    period is past ``SUCCEEDED_RETENTION``: an ``oldest_day`` further back than
    that and a period says a drop is held back.
    """

    tables: int
    bytes: int
    oldest_day: date | None


@dataclass(frozen=True)
class TableHealth:
    """The job table as vacuum sees it, from the server's statistics (estimates).

    ``live_rows`` and ``dead_rows``: the statistics system's counts, which
    autovacuum reads to decide when to run (updated at the end of each
    transaction, within a second or so). ``last_vacuum_age_seconds``: since
    the later of the last manual and automatic vacuum (``None``: never since
    the statistics were reset). ``horizon``: the oldest snapshot holding back
    vacuum on this database, ``None`` when nothing does. ``history``: the tables
    finished jobs moved out to; the counts above are of ``dbqueue_job`` alone.
    """

    table: str
    live_rows: int
    dead_rows: int
    last_vacuum_age_seconds: float | None
    horizon: VacuumHorizon | None
    history: HistoryTables

    @property
    def dead_share(self) -> float:
        """Dead rows as a share of all the table's rows (0 for an empty table)."""
        total = self.live_rows + self.dead_rows
        return self.dead_rows / total if total else 0.0

    def as_dict(self) -> dict[str, Any]:
        """Every field by name, ready for JSON: ``horizon`` as an object or ``null``,
        ``history`` as an object whose ``oldest_day`` is ISO 8601 or ``null``."""
        fields = asdict(self)
        oldest = self.history.oldest_day
        fields["history"]["oldest_day"] = None if oldest is None else oldest.isoformat()
        return fields


def table_health() -> TableHealth | None:
    """The job table's health on the queue's database (``DBQUEUE['DATABASE']``, never
    ``READ_DATABASE``: a replica's statistics are its own); ``None`` on MySQL, MariaDB and
    SQLite, or before the table exists.

    One query on PostgreSQL's statistics views: its cost does not grow with the table.
    """
    connection = connections[conf.get().database]
    if not sql.defines(connection, "table_health"):
        return None
    rows = sql.run(connection, "table_health", {})
    if not rows:
        return None
    (row,) = rows
    horizon = None
    if row["horizon_kind"] is not None:
        horizon = VacuumHorizon(
            kind=row["horizon_kind"],
            holder=row["horizon_holder"] or "",
            pid=row["horizon_pid"],
            state=row["horizon_state"],
            transactions=row["horizon_transactions"],
            seconds=row["horizon_seconds"],
        )
    return TableHealth(
        table="dbqueue_job",
        live_rows=row["live_rows"],
        dead_rows=row["dead_rows"],
        last_vacuum_age_seconds=row["last_vacuum_age"],
        horizon=horizon,
        history=HistoryTables(
            tables=row["history_tables"],
            bytes=row["history_bytes"],
            oldest_day=row["history_oldest"],
        ),
    )
