"""Prepared execution for the connections a worker owns (PostgreSQL with psycopg 3).

A thread that owns its connection to the queue's database (``own``) runs the
queue's statements server-side bound and prepared: each is parsed and planned
once per connection instead of on every call, which is most of a claim's cost.
Only the worker's protocol threads own their connection; connections that
task code or a web request use are never touched.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

_thread = threading.local()

#: psycopg's default: a statement run this many times prepares itself. The
#: queue's statements ask to be prepared at once (``prepare=True``) anyway.
PREPARE_THRESHOLD = 5


def own(alias: str | None) -> None:
    """Run this thread's statements on ``alias`` prepared from now on (``None``: stop)."""
    _thread.alias = alias


def owns(connection: BaseDatabaseWrapper) -> bool:
    """Whether this thread's statements on ``connection`` run prepared."""
    return (
        getattr(_thread, "alias", None) == connection.alias
        and connection.vendor == "postgresql"
        and _psycopg3()
    )


def _psycopg3() -> bool:
    # Imported here: the module imports psycopg (or psycopg2), which SQLite-only
    # projects may not have.
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


def enable(connection: BaseDatabaseWrapper) -> None:
    """Let ``connection`` prepare statements, when this thread owns it.

    Django opens psycopg connections with preparation off
    (``prepare_threshold=None``), which ``prepare=True`` cannot override.
    Call once per new connection; the connection is the worker's own, so no
    other code sees the change.
    """
    if owns(connection):
        connection.connection.prepare_threshold = PREPARE_THRESHOLD


def run(
    connection: BaseDatabaseWrapper, statement: str, params: Mapping[str, Any]
) -> list[tuple[Any, ...]]:
    """Execute one statement prepared on ``connection``; its rows (none: ``[]``).

    Errors are Django's, as from ``connection.cursor()``, so the caller's
    handling of a lost connection applies unchanged.
    """
    import psycopg

    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(statement, params, prepare=True)
        return cursor.fetchall() if cursor.description else []
