"""The worker's own database sessions: set up once per connection, statements prepared.

The claimer, completer, heartbeat and reaper threads run nothing on their
connection to the queue's database but the lease protocol. Inside
``worker_session()`` each new connection of such a thread is set up with the
vendor's ``worker_session`` statement (PostgreSQL: JIT off, since compiling a
claim costs more than running it, and asynchronous commit when
``WORKER_SYNCHRONOUS_COMMIT`` is False), and with ``PREPARED_STATEMENTS`` its
statements run prepared (``sql.psycopg3``). Job threads, where task code runs,
and enqueue keep the connection exactly as the project configured it.

Behind a transaction-mode pool (``POOLER = "transaction"``) a session setting
would stay on a server connection the pool then hands to other clients, so
there the worker's connections get no session settings at all, and their
statements run unprepared unless ``PREPARED_STATEMENTS`` is set True (for
PgBouncer 1.21+ with ``max_prepared_statements``, which keeps them per client).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from django_dbqueue import conf, sql
from django_dbqueue.sql import psycopg3

log = logging.getLogger(__name__)

_thread = threading.local()


@contextmanager
def worker_session() -> Iterator[None]:
    """Within the block, this thread's queue connection is the worker's own.

    It is set up now if already open, and whenever it reconnects; at the end
    it is closed, so its session settings never reach other code. A
    connection inside a transaction (``atomic``) is left exactly as it is.
    """
    cfg = conf.get()
    connection = connections[cfg.database]
    if connection.in_atomic_block:
        # The caller's own transaction (a worker run inside a test case): leave it be.
        yield
        return
    _thread.alias = cfg.database
    _thread.prepare = cfg.prepared_statements
    _thread.unprepared = False
    _thread.synchronous_commit = None if cfg.worker_synchronous_commit else "off"
    _thread.session_settings = cfg.pooler is None
    try:
        if connection.connection is not None:
            set_up(connection)
        yield
    finally:
        _thread.alias = None
        connection.close()


def set_up(connection: BaseDatabaseWrapper) -> None:
    """Apply the worker's settings to a new ``connection``: preparation, the vendor's set-up."""
    if _thread.unprepared:
        psycopg3.disable(connection)
    elif _thread.prepare:
        psycopg3.enable(connection)
    if _thread.session_settings and sql.defines(connection, "worker_session"):
        sql.run(connection, "worker_session", {"synchronous_commit": _thread.synchronous_commit})


def switched_off_for_pooler() -> str | None:
    """What the worker's sessions leave out because of ``POOLER``, for the start-up log.

    ``None`` when no pooler is configured and nothing is left out.
    """
    cfg = conf.get()
    if cfg.pooler is None:
        return None
    left_out = ["session settings (jit, synchronous_commit)"]
    if not cfg.prepared_statements:
        left_out.append("prepared statements")
    return f"pooler={cfg.pooler}: no {' and no '.join(left_out)} on worker connections"


def stop_preparing() -> None:
    """From now on this thread's worker session runs plain statements, never prepared ones.

    For a thread whose prepared statements vanished (a pooler handing it
    another server connection, a ``DEALLOCATE``): its next connection is set
    up unprepared. Outside a worker session it does nothing.
    """
    if getattr(_thread, "alias", None) is None or _thread.unprepared:
        return
    _thread.unprepared = True
    log.warning(
        "prepared statements vanished on this thread's connection; "
        "it runs plain statements from now on"
    )


def _on_connection_created(sender: Any, connection: BaseDatabaseWrapper, **_: Any) -> None:
    if getattr(_thread, "alias", None) == connection.alias:
        set_up(connection)


connection_created.connect(_on_connection_created, dispatch_uid="django_dbqueue.worker.session")
