"""The database clock: the one clock deadlines, retry times and history stamps are read from.

Workers' clocks may be minutes off the database's and off each other; every
time the queue stores or compares is the database's, so a skewed worker can
neither run a retry early nor hold it back. Inside the lease statements the
clock is read in SQL (``clock_timestamp()``, ``UTC_TIMESTAMP(6)``); this
module reads it for Python code that needs the instant itself.
"""

from __future__ import annotations

from datetime import datetime
from datetime import timezone as dt_timezone

from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from django_dbqueue import sql

UTC = dt_timezone.utc


def database_now(connection: BaseDatabaseWrapper) -> datetime:
    """The database clock now, as an aware UTC datetime, whatever ``USE_TZ`` says.

    One small query (block ``database_now``, which every vendor answers in
    UTC wall-clock time). SQLite is embedded: its clock is this host's.
    """
    (row,) = sql.run(connection, "database_now", {})
    return as_utc(sql.to_datetime(row["now"]))


def as_utc(moment: datetime) -> datetime:
    """``moment`` (aware, or naive UTC as the clock columns of the SQL blocks are) as aware UTC."""
    if timezone.is_naive(moment):
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def stamp(moment: datetime) -> str:
    """``moment`` as a history entry's ``at``: ISO 8601 in UTC, with its offset."""
    return as_utc(moment).isoformat()
