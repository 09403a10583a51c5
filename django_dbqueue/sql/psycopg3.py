"""The queue's statements run through psycopg 3 itself (PostgreSQL), prepared where allowed.

On psycopg 3 every statement of the queue runs on a psycopg cursor of this
module's making, wrapped by Django's cursor wrapper (execute wrappers see it,
errors are Django's), with three things Django's own cursor does not do:

- its rows come as dicts (``dict_row``), their names read from the result
  once, where ``cursor.description`` builds column objects on every read; and
  ``timestamptz`` is read by psycopg's C loader, not Django's Python one;
- it is kept from one statement to the next on its connection (``_kept``),
  where a new cursor would look up its dumpers and loaders again;
- it is prepared, parsed and planned once per connection instead of on every
  call, which is most of a claim's cost and half of an enqueue's, on two kinds
  of connection:

  - those a worker thread owns: the claimer, completer, heartbeat and reaper
    run nothing else on theirs, so the worker turns preparation on there
    (``enable``, from ``worker.session``) unless ``PREPARED_STATEMENTS`` is False;
  - yours, where you turned preparation on yourself
    (``DATABASES[...]["OPTIONS"]["prepare_threshold"]``). Django leaves it off by
    default, which is what a pooler that cannot keep prepared statements needs,
    so enqueue never prepares on a connection that did not ask for it: there the
    cursor is of the connection's own class, binding as Django's does.

  A prepared statement reaches psycopg with PostgreSQL's own placeholders
  (``$1``...), numbered once per statement (``numbered``), so psycopg has no
  placeholder to find on each call; execute wrappers still see the statement and
  its parameters as the statement files write them.

While Django logs a connection's queries (``DEBUG``, ``assertNumQueries``) the
statements run through Django's own cursor instead, with their SQL in the log.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Mapping
from typing import Any, cast
from weakref import WeakKeyDictionary

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils.connection import ConnectionProxy

from django_dbqueue.sql.rows import Row

#: psycopg's default: a statement run this many times prepares itself. The
#: queue's statements ask to be prepared at once (``prepare=True``) anyway.
PREPARE_THRESHOLD = 5


def enable(connection: BaseDatabaseWrapper) -> None:
    """Let a new ``connection``, one the worker owns, prepare statements.

    Django opens psycopg connections with preparation off
    (``prepare_threshold=None``), which even ``prepare=True`` respects. Only
    the worker's own connections are passed here, so no other code sees it.
    """
    if _psycopg3(connection):
        connection.connection.prepare_threshold = PREPARE_THRESHOLD


def disable(connection: BaseDatabaseWrapper) -> None:
    """Make a new ``connection`` run every statement unprepared, whatever its options say."""
    if _psycopg3(connection):
        connection.connection.prepare_threshold = None


def handles(connection: BaseDatabaseWrapper) -> bool:
    """Whether the queue's statements on ``connection`` (an open one) run here (``run``).

    On psycopg 3, unless Django logs the connection's queries (``DEBUG``,
    ``assertNumQueries``): its log cannot show a prepared statement's SQL, so
    those run through Django's own cursor as usual.
    """
    return _psycopg3(connection) and not connection.queries_logged


def _psycopg3(connection: BaseDatabaseWrapper) -> bool:
    return connection.vendor == "postgresql" and _driver_is_psycopg3()


@functools.cache
def _driver_is_psycopg3() -> bool:
    # Imported here: the module imports psycopg (or psycopg2), which SQLite-only
    # projects may not have.
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


def run(connection: BaseDatabaseWrapper, statement: str, params: Mapping[str, Any]) -> list[Row]:
    """Execute one statement on ``connection`` (open); its rows by name (none: ``[]``).

    Prepared, on a server-side binding cursor, where the connection allows
    preparation; otherwise on a cursor of the connection's own class. Either
    goes through Django's cursor wrapper (execute wrappers, Django's exceptions).
    The cursor is the connection's kept one (``_kept``), taken for the statement: a
    statement run meanwhile on the same connection (by an execute wrapper, say) gets a
    cursor of its own, so neither reads the other's rows.
    """
    connection.validate_thread_sharing()
    wrapper = connection
    if isinstance(connection, ConnectionProxy):  # django.db.connection: every thread's own
        wrapper = connections[connection.alias]
    made_for = _made_for(connection)
    with _kept_lock:
        kept = _kept.pop(wrapper, None)
    if kept is not None and kept[0] == made_for and not kept[1].closed:
        raw = kept[1]
    else:
        raw = _new_cursor(connection, made_for)
    try:
        cursor = connection.make_cursor(raw)  # not closed after: the cursor is kept
        cursor.execute(statement, params)
        result = raw.pgresult
        return cursor.fetchall() if result is not None and result.nfields else []
    finally:
        with _kept_lock:
            _kept[wrapper] = (made_for, raw)


#: What a kept cursor was made for: its psycopg connection, its class, and whether it reads
#: timestamptz with psycopg's own loader (USE_TZ).
MadeFor = tuple[Any, type[Any], bool]

#: The psycopg cursor each Django connection runs the queue's statements on, with what it
#: was made for (``_made_for``), kept from one statement to the next: a new cursor looks up
#: every parameter's dumper and every column's loader again, about 45 us of CPU a statement
#: (measured on 2 cores), a quarter of an enqueue's. A reconnection makes a new one.
_kept: WeakKeyDictionary[BaseDatabaseWrapper, tuple[MadeFor, Any]] = WeakKeyDictionary()
_kept_lock = threading.Lock()


def _new_cursor(connection: BaseDatabaseWrapper, made_for: MadeFor) -> Any:
    """A cursor of ``connection`` (open) for the queue's statements, as ``made_for`` says."""
    psycopg_connection, cursor_class, aware = made_for
    with connection.wrap_database_errors:
        raw = cursor_class(psycopg_connection, row_factory=_dict_row())
    if aware:
        # Django reads timestamptz with a loader of its own, in Python, only to pin the zone
        # the session already has under USE_TZ; psycopg's own (C) loader reads the same aware
        # datetimes about ten times faster, which a claim of many jobs notices.
        raw.adapters.register_loader("timestamptz", _timestamptz_loader())
    return raw


def _made_for(connection: BaseDatabaseWrapper) -> MadeFor:
    """``(psycopg connection, cursor class, USE_TZ)``: what a cursor of ``connection`` is
    made with. Prepared, a server-side binding cursor; else the connection's own class."""
    psycopg_connection = connection.connection
    if psycopg_connection.prepare_threshold is None:
        cursor_class = psycopg_connection.cursor_factory
    else:
        cursor_class = _preparing_cursor()
    return psycopg_connection, cursor_class, connection.timezone is not None


@functools.cache
def _timestamptz_loader() -> type[Any]:
    """psycopg's default text loader of ``timestamptz`` (its C one when psycopg has it)."""
    import psycopg

    oid = psycopg.adapters.types["timestamptz"].oid
    # psycopg registers one for every built-in type: never None.
    return cast("type[Any]", psycopg.adapters.get_loader(oid, psycopg.pq.Format.TEXT))


@functools.cache
def _preparing_cursor() -> type[Any]:
    """psycopg's server-side binding cursor for PostgreSQL's own placeholders (``RawCursor``),
    preparing every statement it runs, given in the statement files' form (``numbered``)."""
    import psycopg

    class PreparingCursor(psycopg.RawCursor[Any]):
        def execute(self, query: Any, params: Any = None, **options: Any) -> Any:
            text, names = numbered(query)
            try:
                values = [params[name] for name in names]
            except KeyError as missing:
                raise psycopg.ProgrammingError(f"query parameter missing: {missing}") from None
            return super().execute(text, values, prepare=True)

    return PreparingCursor


#: A ``%(name)s`` placeholder of the statement files, a ``%%`` (a literal ``%``), or a
#: ``%`` that is neither.
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%|%")


@functools.lru_cache(maxsize=128)
def numbered(statement: str) -> tuple[str, tuple[str, ...]]:
    """``statement`` with its ``%(name)s`` placeholders as PostgreSQL's own ``$1``, ``$2``...
    (one number per name, in order of first use, as psycopg numbers them) and ``%%`` as
    ``%``; and the names, in their numbers' order.

    Done once per statement, where psycopg converts a statement with named placeholders on
    every execute and keeps the result only for statements under 4 KB: the claim's is
    7 KB, and splitting it again took 35 us of the claim loop's CPU on every claim. A
    ``%`` that is neither raises ``ValueError``, as psycopg refuses it.
    """
    names: dict[str, str] = {}

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            if match.group(0) == "%":
                raise ValueError(f"a % that is no placeholder in: {statement[:80]!r}...")
            return "%"
        return names.setdefault(name, f"${len(names) + 1}")

    return _PLACEHOLDER.sub(number, statement), tuple(names)


@functools.cache
def _dict_row() -> Any:
    """psycopg's ``dict_row``: rows as ``{column name: value}``, names read once per result."""
    from psycopg.rows import dict_row

    return dict_row
