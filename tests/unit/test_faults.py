"""The error classification table: one row each, with the drivers' own exception classes."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import psycopg
import pytest
from django.db import utils as django_errors
from psycopg import errors as pg_errors

from django_dbqueue.worker.faults import RULES, Fault, classify


def wrapped(driver_error: BaseException, django_class: type[Exception]) -> Exception:
    """``driver_error`` as Django raises it: its own class, caused by the driver's."""
    error = django_class(*driver_error.args)
    error.__cause__ = driver_error
    return error


def postgresql(sqlstate: str, django_class: type[Exception]) -> Callable[[], Exception]:
    return lambda: wrapped(pg_errors.lookup(sqlstate)(f"sqlstate {sqlstate}"), django_class)


def mysql(code: int, django_class: type[Exception]) -> Callable[[], Exception]:
    def make() -> Exception:
        mysqldb = pytest.importorskip("MySQLdb")
        return wrapped(mysqldb.OperationalError(code, f"error {code}"), django_class)

    return make


def sqlite(message: str) -> Callable[[], Exception]:
    return lambda: wrapped(sqlite3.OperationalError(message), django_errors.OperationalError)


ROWS: list[tuple[str, Callable[[], BaseException], Fault]] = [
    ("pg read-only transaction", postgresql("25006", django_errors.InternalError), Fault.READ_ONLY),
    (
        "pg prepared statement missing",
        postgresql("26000", django_errors.ProgrammingError),
        Fault.STATEMENT_GONE,
    ),
    (
        "pg prepared statement duplicate",
        postgresql("42P05", django_errors.ProgrammingError),
        Fault.STATEMENT_GONE,
    ),
    (
        "pg serialization failure",
        postgresql("40001", django_errors.OperationalError),
        Fault.CONFLICT,
    ),
    ("pg deadlock", postgresql("40P01", django_errors.OperationalError), Fault.CONFLICT),
    ("pg lock timeout", postgresql("55P03", django_errors.OperationalError), Fault.CONFLICT),
    (
        "pg statement timeout",
        lambda: wrapped(
            pg_errors.QueryCanceled("canceling statement due to statement timeout"),
            django_errors.OperationalError,
        ),
        Fault.TIMEOUT,
    ),
    (
        "pg statement cancelled (pg_cancel_backend)",
        lambda: wrapped(
            pg_errors.QueryCanceled("canceling statement due to user request"),
            django_errors.OperationalError,
        ),
        Fault.CANCELLED,
    ),
    (
        "mysql max_execution_time",
        mysql(3024, django_errors.OperationalError),
        Fault.TIMEOUT,
    ),
    (
        "mysql KILL QUERY",
        lambda: wrapped(
            pytest.importorskip("MySQLdb").OperationalError(
                1317, "Query execution was interrupted"
            ),
            django_errors.OperationalError,
        ),
        Fault.CANCELLED,
    ),
    (
        "pg admin shutdown",
        postgresql("57P01", django_errors.OperationalError),
        Fault.SERVER_UNAVAILABLE,
    ),
    (
        "pg cannot connect now",
        postgresql("57P03", django_errors.OperationalError),
        Fault.SERVER_UNAVAILABLE,
    ),
    ("pg disk full", postgresql("53100", django_errors.OperationalError), Fault.SERVER_UNAVAILABLE),
    (
        "pg idle session timeout",
        postgresql("57P05", django_errors.OperationalError),
        Fault.IDLE_CLOSED,
    ),
    ("mysql inactivity disconnect", mysql(4031, django_errors.OperationalError), Fault.IDLE_CLOSED),
    (
        "pg too many connections",
        postgresql("53300", django_errors.OperationalError),
        Fault.SERVER_UNAVAILABLE,
    ),
    (
        "pg connection failure",
        postgresql("08006", django_errors.OperationalError),
        Fault.CONNECTION_LOST,
    ),
    (
        "pg connection closed by the server (no code)",
        lambda: wrapped(
            psycopg.OperationalError("server closed the connection unexpectedly"),
            django_errors.OperationalError,
        ),
        Fault.CONNECTION_LOST,
    ),
    (
        "django connection already closed",
        lambda: django_errors.InterfaceError("connection already closed"),
        Fault.CONNECTION_LOST,
    ),
    (
        "psycopg's own error on the listener connection",
        lambda: psycopg.OperationalError("consuming input failed"),
        Fault.CONNECTION_LOST,
    ),
    ("pg division by zero", postgresql("22012", django_errors.DataError), Fault.REFUSED),
    (
        "pg unique violation",
        postgresql("23505", django_errors.IntegrityError),
        Fault.REFUSED,
    ),
    ("pg undefined table", postgresql("42P01", django_errors.ProgrammingError), Fault.REFUSED),
    ("mysql server gone away", mysql(2006, django_errors.OperationalError), Fault.CONNECTION_LOST),
    ("mysql lost connection", mysql(2013, django_errors.OperationalError), Fault.CONNECTION_LOST),
    ("mysql read-only server", mysql(1290, django_errors.OperationalError), Fault.READ_ONLY),
    ("mysql deadlock", mysql(1213, django_errors.OperationalError), Fault.CONFLICT),
    ("mysql lock wait timeout", mysql(1205, django_errors.OperationalError), Fault.CONFLICT),
    (
        "mysql too many connections",
        mysql(1040, django_errors.OperationalError),
        Fault.SERVER_UNAVAILABLE,
    ),
    ("mysql unknown column", mysql(1054, django_errors.OperationalError), Fault.REFUSED),
    ("sqlite database locked", sqlite("database is locked"), Fault.CONFLICT),
    ("sqlite read-only file", sqlite("attempt to write a readonly database"), Fault.READ_ONLY),
    ("sqlite disk i/o error", sqlite("disk I/O error"), Fault.CONNECTION_LOST),
    ("sqlite no such table", sqlite("no such table: nope"), Fault.REFUSED),
    (
        "driver cannot encode a surrogate",
        lambda: UnicodeEncodeError("utf-8", "a\ud800", 1, 2, "surrogates not allowed"),
        Fault.REFUSED,
    ),
    ("a bug", lambda: KeyError("job_id"), Fault.BUG),
    ("task-like exit", lambda: SystemExit(3), Fault.BUG),
]


@pytest.mark.parametrize(("make", "fault"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_each_error_is_classified_as_its_fault(
    make: Callable[[], BaseException], fault: Fault
) -> None:
    assert classify(make()) is fault


def test_every_fault_has_a_row() -> None:
    assert {row[2] for row in ROWS} == set(Fault)


def test_every_rule_names_a_distinct_fault() -> None:
    assert len({rule.fault for rule in RULES}) == len(RULES)


@pytest.mark.parametrize(
    ("fault", "transient", "reconnect", "unprepare"),
    [
        (Fault.CONNECTION_LOST, True, True, False),
        (Fault.SERVER_UNAVAILABLE, True, True, False),
        (Fault.IDLE_CLOSED, True, True, False),
        (Fault.READ_ONLY, True, True, False),
        (Fault.CONFLICT, True, False, False),
        (Fault.TIMEOUT, True, False, False),
        (Fault.CANCELLED, True, False, False),
        (Fault.STATEMENT_GONE, True, True, True),
        (Fault.REFUSED, False, True, False),
        (Fault.BUG, False, False, False),
    ],
)
def test_what_each_fault_calls_for(
    fault: Fault, transient: bool, reconnect: bool, unprepare: bool
) -> None:
    assert (fault.transient, fault.reconnect, fault.unprepare) == (transient, reconnect, unprepare)
