"""What a database error means to a worker loop: the one table every loop consults.

Each error a worker thread meets is classified into a ``Fault``, which says
whether the failed write is worth trying again (``transient``), whether the
thread's connection must be dropped first (``reconnect``), and whether the
thread must stop preparing its statements (``unprepare``). The rules match
the server's SQLSTATE (PostgreSQL), the driver's error number (MySQL and
MariaDB) or the message (SQLite, which has neither); a database error no rule
names is ``REFUSED`` (the statement or its data is wrong: retrying cannot
help), and so is a ``UnicodeEncodeError``, raised by a driver that cannot
encode the data for the server (a surrogate code point in a text value);
anything else that is not a database error is a ``BUG``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass

from django.db import Error as DjangoDatabaseError


class Fault(enum.Enum):
    """A kind of failure, and how a worker loop reacts to it."""

    #: The connection broke (server gone, network cut, backend terminated).
    CONNECTION_LOST = ("connection lost", True, True, False)
    #: The server closed the connection for sitting idle (PostgreSQL ``idle_session_timeout``,
    #: MySQL's ``wait_timeout``): nothing is wrong, the next statement reconnects.
    IDLE_CLOSED = ("idle connection closed", True, True, False)
    #: The server is shutting down, starting, recovering or out of resources.
    SERVER_UNAVAILABLE = ("server unavailable", True, True, False)
    #: The database accepts no writes: a demoted primary during failover, a read-only switch.
    READ_ONLY = ("database read-only", True, True, False)
    #: A serialization failure, deadlock, lock timeout or a row lock ``NOWAIT`` found taken:
    #: another transaction won this time.
    CONFLICT = ("transaction conflict", True, False, False)
    #: The statement ran past ``statement_timeout`` (MySQL: ``max_execution_time``).
    TIMEOUT = ("statement timeout", True, False, False)
    #: Someone cancelled the statement (``pg_cancel_backend``, MySQL's ``KILL QUERY``).
    CANCELLED = ("statement cancelled", True, False, False)
    #: A prepared statement vanished (a pooler switched server connections, DEALLOCATE).
    STATEMENT_GONE = ("prepared statement gone", True, True, True)
    #: Any other database error: the database refused this statement or its data.
    REFUSED = ("statement refused", False, True, False)
    #: Not a database error at all: a bug, logged with its traceback.
    BUG = ("unexpected error", False, False, False)

    def __init__(self, label: str, transient: bool, reconnect: bool, unprepare: bool) -> None:
        self.label = label
        #: Trying the same write again later may succeed.
        self.transient = transient
        #: Drop the thread's connection before the next try.
        self.reconnect = reconnect
        #: The thread's connection stops preparing statements (falls back to plain ones).
        self.unprepare = unprepare


@dataclass(frozen=True)
class Rule:
    """Errors that mean ``fault``: SQLSTATE codes or two-letter classes, MySQL error
    numbers, or words of a SQLite message. With ``message_words``, a code matches only
    when the message holds one of them (PostgreSQL's 57014 is a timeout or a cancel;
    only the message tells, in the server's ``lc_messages`` language: English by default).
    """

    fault: Fault
    sqlstates: tuple[str, ...] = ()
    mysql_codes: tuple[int, ...] = ()
    sqlite_words: tuple[str, ...] = ()
    message_words: tuple[str, ...] = ()

    def says(self, message: str) -> bool:
        """Whether ``message`` (lower case) holds one of ``message_words``, if any are required."""
        return not self.message_words or any(word in message for word in self.message_words)


#: The table, most specific first. PostgreSQL codes: Appendix A of its manual;
#: MySQL/MariaDB numbers: the server's and the client library's error lists.
RULES = (
    Rule(Fault.READ_ONLY, ("25006",), (1290, 1792, 1836), ("readonly",)),
    Rule(Fault.STATEMENT_GONE, ("26000", "42P05"), (1243,)),
    Rule(Fault.CONFLICT, ("40001", "40P01", "55P03"), (1205, 1213, 3572), ("locked", "busy")),
    Rule(Fault.CANCELLED, ("57014",), (1317,), message_words=("user request", "interrupted")),
    Rule(Fault.TIMEOUT, ("57014",), (1969, 3024)),
    Rule(Fault.IDLE_CLOSED, ("57P05",), (4031,)),
    Rule(Fault.SERVER_UNAVAILABLE, ("57P01", "57P02", "57P03", "53"), (1040, 1053)),
    Rule(Fault.CONNECTION_LOST, ("08",), (2002, 2003, 2006, 2013, 2055), ("disk i/o",)),
)


def classify(exc: BaseException) -> Fault:
    """The fault ``exc`` (or the driver error it wraps) stands for."""
    if isinstance(exc, UnicodeEncodeError):
        return Fault.REFUSED
    if not isinstance(exc, DjangoDatabaseError) and not _is_driver_error(exc):
        return Fault.BUG
    causes = list(_chain(exc))
    sqlstate = next(filter(None, map(_sqlstate, causes)), None)
    code = next((c for c in map(_mysql_code, causes) if c is not None), None)
    sqlite = any(type(cause).__module__ == "sqlite3" for cause in causes)
    message = str(exc).lower()
    for rule in RULES:
        by_sqlstate = sqlstate is not None and sqlstate.startswith(rule.sqlstates or ("-",))
        by_code = code is not None and code in rule.mysql_codes
        if (by_sqlstate or by_code) and rule.says(message):
            return rule.fault
        if sqlite and any(word in message for word in rule.sqlite_words):
            return rule.fault
    unexplained = sqlstate is None and code is None and not sqlite
    if unexplained and _named(exc, "InterfaceError", "OperationalError"):
        # No server code: the client's own error, a connection that broke or was closed.
        return Fault.CONNECTION_LOST
    return Fault.REFUSED


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from (Django wraps the driver's)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__


def _sqlstate(exc: BaseException) -> str | None:
    """PostgreSQL's code: ``sqlstate`` (psycopg 3, also on ``diag``) or ``pgcode`` (psycopg2)."""
    code = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    if code is None:
        code = getattr(getattr(exc, "diag", None), "sqlstate", None)
    return code if isinstance(code, str) else None


def _mysql_code(exc: BaseException) -> int | None:
    """mysqlclient's error number: the first argument of its exceptions."""
    if type(exc).__module__.split(".")[0] != "MySQLdb":
        return None
    first = exc.args[0] if exc.args else None
    return first if isinstance(first, int) else None


def _is_driver_error(exc: BaseException) -> bool:
    """A driver's own DB-API error (psycopg's listener connection raises those unwrapped)."""
    return type(exc).__module__.split(".")[0] in ("psycopg", "psycopg2") and _named(exc, "Error")


def _named(exc: BaseException, *names: str) -> bool:
    """Whether ``exc`` is an instance of a DB-API class of one of ``names`` (any driver's)."""
    return any(cls.__name__ in names for cls in type(exc).__mro__)
