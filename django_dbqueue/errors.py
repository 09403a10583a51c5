"""Error codes and the bounded form in which failures are stored on a job."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass

from django_dbqueue.exceptions import (
    JobCancelled,
    ResultNotSerializable,
    ResultTooLarge,
    Retry,
    TransactionLeftOpen,
)

TASK_NOT_FOUND = "TASK_NOT_FOUND"
BAD_ARGUMENTS = "BAD_ARGUMENTS"
RESULT_NOT_SERIALIZABLE = ResultNotSerializable.code
RESULT_TOO_LARGE = ResultTooLarge.code
LEASE_EXPIRED = "LEASE_EXPIRED"
#: Task code raised a ``BaseException`` that is not an ``Exception`` (``SystemExit``,
#: ``asyncio.CancelledError``, ``KeyboardInterrupt``): a failed attempt like any other.
TASK_ABORTED = "TASK_ABORTED"
RETRY = Retry.code
#: The worker shut down while the attempt's code ran: the attempt counts (``leases.release``).
SHUTDOWN = "SHUTDOWN"
CANCELLED = JobCancelled.code
#: Task code returned with a transaction open: its writes were rolled back (``worker.leftovers``).
TRANSACTION_LEFT_OPEN = TransactionLeftOpen.code
#: A middleware (``DBQUEUE["MIDDLEWARE"]``) raised: a failed attempt, retried like a task's.
MIDDLEWARE_FAILED = "MIDDLEWARE_FAILED"

#: ``last_error`` keeps at most this many characters: the end of the traceback.
LAST_ERROR_LIMIT = 4000
#: A history entry's message keeps at most this many characters.
MESSAGE_LIMIT = 1000
#: The error history keeps the last this many entries.
HISTORY_LIMIT = 10
#: ``last_error_code`` is a column of this width.
CODE_LIMIT = 100
#: The message of an exception whose ``__str__`` raised.
UNPRINTABLE = "<the exception's __str__ raised an exception>"


@dataclass(frozen=True)
class ErrorInfo:
    """A failure as stored on a job: a short code, a message and a traceback.

    ``exception`` is the raised exception's class path (``module.qualname``),
    empty when no exception was raised (an expired lease).
    """

    code: str
    message: str
    traceback: str = ""
    exception: str = ""

    @classmethod
    def from_exception(cls, exc: BaseException, code: str | None = None) -> ErrorInfo:
        """Describe ``exc``; the code defaults to its ``code`` attribute or class name.

        Never raises: the exception is task code's, and its ``__str__`` (or a
        ``code`` property) may raise anything: a stand-in is recorded for what raised.
        """
        kind = type(exc)
        name = kind.__name__
        return cls(
            code=code or _own_code(exc),
            message=f"{name}: {_text_of(lambda: exc, UNPRINTABLE)}",
            traceback=_text_of(
                lambda: "".join(traceback.format_exception(kind, exc, exc.__traceback__)), ""
            ),
            exception=f"{kind.__module__}.{kind.__qualname__}",
        )

    def bounded(self) -> ErrorInfo:
        """The same error as stored: cut to size (tracebacks keep their end), text made storable.

        A NUL character or a surrogate code point, which no database stores
        (``jsontext.unstorable``), is written out as its escape (``storable``).
        """
        return ErrorInfo(
            code=storable(self.code)[:CODE_LIMIT],
            message=storable(self.message)[:MESSAGE_LIMIT],
            traceback=storable(self.traceback)[-LAST_ERROR_LIMIT:],
            exception=storable(self.exception),
        )

    def minimal(self) -> ErrorInfo:
        """The error reduced to what any database stores: its code and exception class.

        What a failure is recorded as when the database refused the full error
        (``worker.execute``): no message or traceback, which carry the task's text.
        """
        return ErrorInfo(
            code=self.code, message=self.exception or self.code, exception=self.exception
        ).bounded()

    @property
    def last_error(self) -> str:
        """What ``Job.last_error`` stores: the traceback's end, else the message."""
        return (self.traceback or self.message)[-LAST_ERROR_LIMIT:]


def storable(text: str) -> str:
    """``text`` as every database stores it: each NUL character written out as ``\x00``,
    each surrogate code point as its escape (``\ud800``)."""
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")


def code_of(exc: BaseException) -> str:
    """The error code a failed attempt records for ``exc``, raised by task code.

    The exception's ``code`` attribute or class name; ``TASK_ABORTED`` for a
    ``BaseException`` that is not an ``Exception`` (a ``SystemExit``'s own
    ``code`` is its exit status, which names no error). Never raises.
    """
    return _own_code(exc) if isinstance(exc, Exception) else TASK_ABORTED


def _own_code(exc: BaseException) -> str:
    name = type(exc).__name__
    return _text_of(lambda: getattr(exc, "code", None) or name, name)


def _text_of(describe: Callable[[], object], fallback: str) -> str:
    """``str(describe())``, or ``fallback`` when that raises (task code's ``__str__`` may)."""
    try:
        return str(describe())
    except Exception:  # noqa: BLE001 - task code's __str__ may raise anything; recorded all the same.
        return fallback


def refused_result(refusal: BaseException) -> ErrorInfo:
    """The failure recorded for a success whose result the database refused (``refusal``).

    ``jsontext`` refuses what no database stores before any write, so this
    is for what it cannot foresee; the message names the refusal's class only.
    """
    kind = type(refusal)
    path = f"{kind.__module__}.{kind.__qualname__}"
    message = f"the database refused to store the result ({path})"
    return ErrorInfo(RESULT_NOT_SERIALIZABLE, message, exception=path).bounded()


def history_entry(
    attempt: int, worker_id: str | None, error: ErrorInfo, at: str
) -> dict[str, object]:
    """One element of ``Job.errors``: who failed which attempt, when, and how."""
    return {
        "attempt": attempt,
        "worker": worker_id,
        "at": at,
        "code": error.code,
        "message": error.message,
        "traceback": error.traceback,
        "exception": error.exception,
    }


def appended(history: list[dict[str, object]], entry: dict[str, object]) -> list[dict[str, object]]:
    """``history`` with ``entry`` added, keeping the last ``HISTORY_LIMIT`` entries."""
    return [*history, entry][-HISTORY_LIMIT:]
