"""What task code leaves behind on its thread, undone before the thread runs anything else.

``guarded(call)`` runs task code and, the moment it returns or raises, makes
three promises:

- **A forked child never comes back.** If task code forked and the child
  returns (or raises) into the worker's code, the child leaves at once with
  ``os._exit`` (status 0 if it returned, 1 if it raised), touching nothing: no
  outcome written, no log line, no database call, no further job.
- **Nothing uncommitted is reported as done.** On each connection of this
  thread, a transaction the task left open (an ``atomic`` block entered and
  never exited, a raw ``BEGIN``, autocommit switched off) is rolled back by
  closing the connection, Django's wrapper is reset so the next query
  reconnects, and a task that returned raises ``TransactionLeftOpen``
  (``TRANSACTION_LEFT_OPEN``) instead: the attempt fails, never ``succeeded``.
  A task that raised keeps its own error. An open transaction is seen from
  Django's wrapper and from the server's own report: the driver's
  transaction status on PostgreSQL (psycopg) and SQLite; on MariaDB
  ``@@in_transaction`` (block ``transaction_open``), asked only of a
  connection the task used. MySQL reports no such thing: a raw
  ``START TRANSACTION`` there is not seen (the connection is closed after
  the job all the same, so it never reaches the next one).
- **The next job finds the session as configured.** A connection the task
  used that outlives the job (``CONN_MAX_AGE`` other than 0) has its session
  reset (``reset_session``): on PostgreSQL ``DISCARD ALL`` (role, search_path
  and every other setting, advisory locks, temporary tables, prepared
  statements, ``LISTEN``), then Django's own set-up (time zone, role option)
  again; behind a transaction-mode pool (``POOLER``), and on MySQL and SQLite,
  the connection is closed instead.

Connections already inside the caller's ``atomic`` block before the call
(``run_jobs`` in a test's transaction) keep that transaction: only what the
task opened inside it is undone, and their session is left alone.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_dbqueue import conf, sql
from django_dbqueue.exceptions import TransactionLeftOpen

log = logging.getLogger(__name__)

T = TypeVar("T")

#: libpq's ``PQTRANS_IDLE``: psycopg 3's ``TransactionStatus.IDLE`` and psycopg2's alike.
_PQ_IDLE = 0


def guarded(call: Callable[[], T]) -> T:
    """``call()`` (task code), its leftovers undone before anything else runs here.

    Returns what it returned, or raises what it raised; raises
    ``TransactionLeftOpen`` instead of returning when it left a transaction
    open. In a forked child, never returns at all (module docstring).
    """
    pid = os.getpid()
    # This thread's wrapper of every alias, read once: a connection the task opens is one of
    # them, so the same list serves the depths before, the use noted during and the tidy after.
    wrappers = connections.all()
    depths = {c.alias: len(c.atomic_blocks) for c in _open(wrappers)}
    used: set[str] = set()
    with _UseNoted(wrappers, used):
        try:
            result = call()
        except BaseException:
            _leave_if_forked(pid, status=1)
            tidy(depths, used, wrappers)
            raise
        _leave_if_forked(pid, status=0)
    if left_open := tidy(depths, used, wrappers):
        raise TransactionLeftOpen(
            f"The task returned with a transaction open on database {', '.join(left_open)}: "
            "its writes there were rolled back. Leave every atomic block you enter "
            "(use `with transaction.atomic():`) and COMMIT what you BEGIN."
        )
    return result


def tidy(
    depths: dict[str, int], used: set[str], wrappers: Sequence[BaseDatabaseWrapper]
) -> list[str]:
    """Undo what the task left on this thread's connections; the aliases it left open.

    ``depths`` gives each connection's ``atomic`` depth before the task
    (missing: it was not open); ``used`` the aliases the task ran queries on;
    ``wrappers`` this thread's connection wrappers (``connections.all()``).
    Never raises: a connection that cannot be tidied is closed.
    """
    left_open = []
    for connection in _open(wrappers):
        depth = depths.get(connection.alias, 0)
        try:
            if _left_open(connection, depth, connection.alias in used):
                left_open.append(connection.alias)
                _roll_back(connection, depth)
            elif depth == 0 and connection.alias in used and _outlives_job(connection):
                reset_session(connection)
        except DatabaseError as exc:
            log.warning(
                "closing connection %s, which could not be tidied: %s", connection.alias, exc
            )
            _close(connection)
    return left_open


def reset_session(connection: BaseDatabaseWrapper) -> None:
    """Give ``connection`` back the session its settings make, or close it (module docstring)."""
    if sql.defines(connection, "reset_session") and conf.get().pooler is None:
        sql.run(connection, "reset_session", {})
        connection.init_connection_state()
    else:
        _close(connection)


def _open(wrappers: Sequence[BaseDatabaseWrapper]) -> list[BaseDatabaseWrapper]:
    """Those of ``wrappers`` with a connection open."""
    return [c for c in wrappers if c.connection is not None]


class _UseNoted:
    """While open, the alias of every connection a query runs on is added to ``used``.

    One execute wrapper per connection (Django's ``execute_wrapper``, without
    its generator: this runs around every job), taken off by identity on exit,
    so a wrapper the task installed and left in place stays where it is.
    """

    def __init__(self, wrappers: Sequence[BaseDatabaseWrapper], used: set[str]) -> None:
        self._notes = [(c, functools.partial(_note_use, used, c.alias)) for c in wrappers]

    def __enter__(self) -> None:
        for connection, note in self._notes:
            connection.execute_wrappers.append(note)

    def __exit__(self, *exc_info: object) -> None:
        for connection, note in self._notes:
            with contextlib.suppress(ValueError):  # the task emptied the list itself
                connection.execute_wrappers.remove(note)


def _note_use(used: set[str], alias: str, execute: Any, *args: Any) -> Any:
    used.add(alias)
    return execute(*args)


def _leave_if_forked(pid: int, status: int) -> None:
    if os.getpid() != pid:
        os._exit(status)


def _left_open(connection: BaseDatabaseWrapper, depth: int, used: bool) -> bool:
    """Whether the task left a transaction open on ``connection`` (``depth``: see ``tidy``)."""
    if len(connection.atomic_blocks) > depth:
        return True
    if depth > 0:
        return False  # the caller's own transaction: open, as it was
    if connection.autocommit != connection.settings_dict["AUTOCOMMIT"]:
        return True
    return _server_in_transaction(connection, used)


def _server_in_transaction(connection: BaseDatabaseWrapper, used: bool) -> bool:
    raw = connection.connection
    if connection.vendor == "postgresql":
        return int(raw.info.transaction_status) != _PQ_IDLE
    if connection.vendor == "sqlite":
        return bool(raw.in_transaction)
    if used and getattr(connection, "mysql_is_mariadb", False):
        return bool(sql.run(connection, "transaction_open", {})[0]["in_transaction"])
    return False


def _roll_back(connection: BaseDatabaseWrapper, depth: int) -> None:
    """Undo the task's open transaction on ``connection``, down to the caller's ``depth``."""
    if depth == 0:
        connection.atomic_blocks.clear()
        connection.savepoint_ids.clear()
        connection.in_atomic_block = False
        connection.needs_rollback = False
        _close(connection)  # the server rolls back; the next query reconnects
        return
    # The task's outermost block inside the caller's is atomic_blocks[depth]; its savepoint
    # (None if it made none) is savepoint_ids[depth - 1], the outermost block having none.
    savepoint = connection.savepoint_ids[depth - 1]
    del connection.atomic_blocks[depth:]
    del connection.savepoint_ids[depth - 1 :]
    if savepoint is None:
        connection.needs_rollback = True  # nothing to roll back to but the caller's start
    else:
        connection.savepoint_rollback(savepoint)


def _outlives_job(connection: BaseDatabaseWrapper) -> bool:
    return bool(connection.settings_dict["CONN_MAX_AGE"] != 0)


def _close(connection: BaseDatabaseWrapper) -> None:
    connection.closed_in_transaction = False
    try:
        connection.close()
    except DatabaseError as exc:
        log.debug("closing a broken connection failed (it is dropped anyway): %s", exc)
