"""Timestamp arithmetic to the microsecond for SQLite's statements.

SQLite's date functions keep milliseconds and round to them, so
``strftime(..., now, '+30 seconds')`` can land up to half a millisecond after
the instant asked for (and a job due now would not be due yet), and a
difference of two ``julianday()`` values is off by up to about 40 µs (a day
number near 2.46 million leaves a double that little room for the fraction).
SQLite's ``'now'`` is cut to the millisecond too, where the ``%(now)s`` its
statements take is this host's clock to the microsecond: a failure stamped with
it could read up to a millisecond before the attempt it ends had started.
PostgreSQL and MySQL keep microseconds; so does the queue on SQLite: every
SQLite connection gets ``dbqueue_plus_seconds(timestamp, seconds)``, which adds
exactly, ``dbqueue_seconds_between(later, earlier)``, which subtracts exactly,
and ``dbqueue_utc_now()``, the clock that ``%(now)s`` is read from, in UTC.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper


def plus_seconds(timestamp: str | None, seconds: float | None) -> str | None:
    """``timestamp`` (as ``sql.adapt`` writes it) plus ``seconds``, in the same form.

    NULL for either gives NULL, as SQLite's own functions do.
    """
    if timestamp is None or seconds is None:
        return None
    later = datetime.fromisoformat(timestamp) + timedelta(seconds=seconds)
    return later.isoformat(" ", "microseconds")


def seconds_between(later: str | None, earlier: str | None) -> float | None:
    """Seconds from ``earlier`` to ``later`` (both as ``sql.adapt`` writes them), to the
    microsecond; negative when ``later`` is the earlier one. NULL for either gives NULL."""
    if later is None or earlier is None:
        return None
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()


def utc_now() -> str:
    """This host's clock now (an embedded database's clock), in UTC, to the microsecond,
    in the form ``sql.adapt`` writes: the clock ``%(now)s`` is read from, whatever
    ``USE_TZ`` says, so a stamp taken after ``%(now)s`` never reads before it."""
    return datetime.now(timezone.utc).replace(tzinfo=None).isoformat(" ", "microseconds")


def register(database: sqlite3.Connection) -> None:
    """Give a DB-API SQLite connection the functions the statements of ``sqlite.sql`` call."""
    database.create_function("dbqueue_plus_seconds", 2, plus_seconds, deterministic=True)
    database.create_function("dbqueue_seconds_between", 2, seconds_between, deterministic=True)
    database.create_function("dbqueue_utc_now", 0, utc_now)


def install(sender: Any, connection: BaseDatabaseWrapper, **_: Any) -> None:
    """``connection_created`` receiver: give a new SQLite connection the functions."""
    if connection.vendor == "sqlite":
        register(connection.connection)
