"""Named SQL statements per database vendor, and the one place that runs them.

``<vendor>.sql`` holds blocks that start with ``-- name: <name>``; every vendor
defines the same names, but for six optional ones: ``worker_session`` (the
set-up of a worker's own connection), ``insert_job`` (a faster single-row
``insert_jobs``) and ``insert_job_call`` (the same, faster still on a connection
that has enqueued a few jobs: ``enqueue.single_insert``), ``listen_session`` and
``notify_probe`` (the set-up of the ``LISTEN`` connection and the wake-up probe
of a vendor with ``LISTEN``) and ``reset_session`` (a job connection's fresh
session, ``worker.leftovers``); two MySQL/MariaDB alone has:
``loose_collations`` (what the system check ``dbqueue.E019`` reads) and
``transaction_open`` (MariaDB's report of an open transaction); and thirteen
PostgreSQL alone has: ``error_search_state``, ``error_search_ready``,
``error_search_recent`` and ``error_search_index`` (the admin's search in error
text, with ``pg_trgm``), ``table_health`` (the job table's bloat signals:
``table_health``), and ``move_finished``, ``unmoved_finished``,
``prepare_history``, ``hold_unmoved``, ``restore_finished``,
``retention_cutoff``, ``expired_history`` and ``drop_history`` (the history
tables finished jobs move to: ``history``). A block is one statement, or (where
the vendor lacks ``UPDATE ... RETURNING``) several, run in order in the caller's
transaction, the last one that returns rows giving the result, by column name; a
statement may read the rows of the latest one that returned rows as
``%(previous)s`` (a JSON array of arrays, columns in order). A statement whose
text starts with ``/* if previous */`` runs only when the latest statement that
returned rows returned at least one (none yet counts as none): a cheap statement
can probe for what a costly part of the block needs, and when it finds nothing
that part costs not even a round trip. A statement skipped returns nothing, so
the ones after it see the same latest rows: once one finds no rows, every later
marked statement is skipped too. Python never builds SQL: it asks for a block by
name and passes a dict of parameters. Structured parameters (lists, dicts) are
sent as JSON text and datetimes in the form the vendor stores, so the SQL files
share one calling convention.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from datetime import timezone as dt_timezone
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from django.conf import settings
from django.db import OperationalError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_dbqueue.exceptions import UnsupportedDatabase
from django_dbqueue.sql import psycopg3
from django_dbqueue.sql.rows import Row as Row  # re-exported: sql.Row
from django_dbqueue.sql.rows import fetch

SQL_DIR = Path(__file__).parent
VENDOR_FILES = {"postgresql": "postgresql.sql", "sqlite": "sqlite.sql", "mysql": "mysql.sql"}
NAME_LINE = re.compile(r"^-- name: (\w+)\s*$")
#: Separates the statements of a multi-statement block (a ``;`` ending a line).
STATEMENT_END = ";\n"
#: Starts a statement of a block that runs only when the latest one that returned rows
#: returned at least one (a comment, so the server ignores it).
IF_PREVIOUS = "/* if previous */"

#: How often a SQLite ``BEGIN IMMEDIATE`` is retried when the database stays
#: locked past the connection's busy timeout, and the first pause between tries.
SQLITE_BEGIN_TRIES = 5
SQLITE_BEGIN_BACKOFF = 0.05


def parse(text: str) -> dict[str, str]:
    """Split a statement file into ``{name: sql}``; comment lines are dropped."""
    statements: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        match = NAME_LINE.match(line)
        if match:
            current = statements.setdefault(match.group(1), [])
        elif current is not None and not line.lstrip().startswith("--"):
            current.append(line)
    return {name: "\n".join(lines).strip().rstrip(";") for name, lines in statements.items()}


@functools.cache
def statements(vendor: str) -> dict[str, str]:
    """Every named statement for ``vendor``."""
    try:
        filename = VENDOR_FILES[vendor]
    except KeyError:
        raise UnsupportedDatabase(
            f"django_dbqueue has no SQL for the {vendor!r} database. "
            f"Use one of: {', '.join(sorted(VENDOR_FILES))}."
        ) from None
    return parse((SQL_DIR / filename).read_text())


def defines(connection: BaseDatabaseWrapper, name: str) -> bool:
    """Whether the connection's vendor has block ``name`` (for the optional ones)."""
    return name in statements(connection.vendor)


def run(connection: BaseDatabaseWrapper, name: str, params: Mapping[str, Any]) -> list[Row]:
    """Execute block ``name`` for the connection's vendor; return its last statement's rows.

    Rows are read by column name (``sql.rows``): ``row["lease_token"]``. A statement
    of a multi-statement block marked ``/* if previous */`` is skipped when the latest
    one that returned rows returned none (module docstring).

    ``now`` is added for statements that take the clock as a parameter
    (SQLite); call inside ``write_transaction`` so it is read under the lock.
    On psycopg 3 it runs through ``sql.psycopg3`` where ``psycopg3.handles`` says so.
    """
    sql = statements(connection.vendor)[name]
    values = dict(params)
    if "%(now)s" in sql:
        values["now"] = timezone.now()
    adapted = {key: adapt(connection, value) for key, value in values.items()}
    connection.ensure_connection()
    if psycopg3.handles(connection):
        return psycopg3.run(connection, sql, adapted)
    rows: list[Row] = []
    with connection.cursor() as cursor:
        for statement in sql.split(STATEMENT_END):
            if not rows and statement.lstrip().startswith(IF_PREVIOUS):
                continue
            if "%(previous)s" in statement:
                # The SQL reads these by position (JSON arrays), as JSON_TABLE paths do.
                adapted["previous"] = adapt(connection, [list(row.values()) for row in rows])
            cursor.execute(statement, adapted)
            description = cursor.description
            if description:
                rows = fetch(cursor, description)
    return rows


def adapt(connection: BaseDatabaseWrapper, value: object) -> object:
    """A parameter in the form the vendor's statements expect."""
    if isinstance(value, datetime):
        adapted = connection.ops.adapt_datetimefield_value(value)
        # Text timestamps (SQLite) compare as strings: str() drops a zero fraction, which
        # would sort the instant before the same one stored with its fraction.
        if isinstance(adapted, str) and "." not in adapted:
            adapted += ".000000"
        return adapted
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=functools.partial(_json_default, connection))
    return value


def _json_default(connection: BaseDatabaseWrapper, value: object) -> str:
    if isinstance(value, datetime):
        return str(adapt(connection, value))
    raise TypeError(f"{type(value).__name__} is not a SQL parameter")


def to_datetime(value: object) -> datetime:
    """A timestamp read from a raw row, aware when ``USE_TZ`` (as the ORM returns it)."""
    if isinstance(value, datetime) and value.utcoffset() is not None:
        return value  # PostgreSQL's, every time: aware already (claims read two a job)
    parsed = value if isinstance(value, datetime) else parse_datetime(str(value))
    if parsed is None:
        raise ValueError(f"{value!r} is not a timestamp")
    if settings.USE_TZ and timezone.is_naive(parsed):
        return parsed.replace(tzinfo=dt_timezone.utc)
    return parsed


#: JSON texts so common in job rows (no args, no kwargs) that decoding them is worth skipping.
_EMPTY_JSON = {"[]": list, "{}": dict}


def to_json(value: object) -> Any:
    """A JSON column read from a raw row, decoded (a new object each time)."""
    if not isinstance(value, (str, bytes)):
        return value
    empty = _EMPTY_JSON.get(value) if isinstance(value, str) else None
    return empty() if empty is not None else json.loads(value)


def run_alone(connection: BaseDatabaseWrapper, name: str, params: Mapping[str, Any]) -> list[Row]:
    """Run block ``name`` as one short transaction of its own (or within the caller's).

    A one-statement block on PostgreSQL or MySQL needs no BEGIN/COMMIT: the
    statement is its own transaction, which saves two round trips. SQLite
    still takes its write lock up front, and multi-statement blocks share one
    transaction.
    """
    single = STATEMENT_END not in statements(connection.vendor)[name]
    if connection.vendor != "sqlite" and (single or connection.in_atomic_block):
        return run(connection, name, params)
    with write_transaction(connection):
        return run(connection, name, params)


@contextmanager
def write_transaction(connection: BaseDatabaseWrapper) -> Iterator[None]:
    """One short write transaction, with the vendor's lock taken up front.

    PostgreSQL: an ordinary ``atomic`` block; row locks come from the
    statements. SQLite: ``BEGIN IMMEDIATE``, so the database write lock is
    held before anything is read; a database that stays locked is retried a
    bounded number of times with growing pauses, then the error is raised.
    Inside a caller's ``atomic`` block it joins that transaction.
    """
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        with transaction.atomic(using=connection.alias):
            yield
        return
    # The thread's wrapper itself, also when given django.db.connection (a proxy to it).
    wrapper = connections[connection.alias]
    callbacks: list[Callable[[], object]] = []
    _after_commit[wrapper] = callbacks
    try:
        _begin_immediate(connection)
        try:
            yield
        except BaseException:
            with connection.cursor() as cursor:
                cursor.execute("ROLLBACK")
            raise
        with connection.cursor() as cursor:
            cursor.execute("COMMIT")
    finally:
        del _after_commit[wrapper]
    for callback in callbacks:
        callback()


#: The callbacks ``on_commit`` keeps for each SQLite connection inside ``write_transaction``'s
#: own ``BEGIN IMMEDIATE``, which Django does not know as a transaction.
_after_commit: WeakKeyDictionary[BaseDatabaseWrapper, list[Callable[[], object]]] = (
    WeakKeyDictionary()
)


def on_commit(connection: BaseDatabaseWrapper, callback: Callable[[], object]) -> None:
    """Run ``callback`` once the current transaction commits, also ``write_transaction``'s.

    Django's ``transaction.on_commit``, but for the ``BEGIN IMMEDIATE`` that
    ``write_transaction`` opens on SQLite outside an ``atomic`` block (where
    Django would run it at once, inside the transaction): it runs after that
    ``COMMIT``, and never after a rollback.
    """
    wrapper = connections[connection.alias]
    pending = None if connection.in_atomic_block else _after_commit.get(wrapper)
    if pending is None:
        transaction.on_commit(callback, using=connection.alias)
    else:
        pending.append(callback)


def _begin_immediate(connection: BaseDatabaseWrapper) -> None:
    pause = SQLITE_BEGIN_BACKOFF
    for attempt in range(1, SQLITE_BEGIN_TRIES + 1):
        try:
            with connection.cursor() as cursor:
                cursor.execute("BEGIN IMMEDIATE")
            return
        except OperationalError as exc:
            if "locked" not in str(exc) or attempt == SQLITE_BEGIN_TRIES:
                raise
            time.sleep(pause)
            pause *= 2
