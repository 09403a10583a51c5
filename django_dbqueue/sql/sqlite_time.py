"""Timestamp arithmetic to the microsecond for SQLite's statements.

SQLite's date functions keep milliseconds and round to them, so
``strftime(..., now, '+30 seconds')`` can land up to half a millisecond after
the instant asked for (and a job due now would not be due yet). PostgreSQL and
MySQL keep microseconds; so does the queue on SQLite: every SQLite connection
gets ``dbqueue_plus_seconds(timestamp, seconds)``, which adds exactly.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

#: The name the statements of ``sqlite.sql`` call.
FUNCTION = "dbqueue_plus_seconds"


def plus_seconds(timestamp: str | None, seconds: float | None) -> str | None:
    """``timestamp`` (as ``sql.adapt`` writes it) plus ``seconds``, in the same form.

    NULL for either gives NULL, as SQLite's own functions do.
    """
    if timestamp is None or seconds is None:
        return None
    later = datetime.fromisoformat(timestamp) + timedelta(seconds=seconds)
    return later.isoformat(" ", "microseconds")


def install(sender: Any, connection: BaseDatabaseWrapper, **_: Any) -> None:
    """``connection_created`` receiver: give a new SQLite connection the function."""
    if connection.vendor == "sqlite":
        connection.connection.create_function(FUNCTION, 2, plus_seconds, deterministic=True)
