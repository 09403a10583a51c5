"""Error codes and the bounded form in which failures are stored on a job."""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from django_dbqueue.exceptions import JobCancelled, Retry

TASK_NOT_FOUND = "TASK_NOT_FOUND"
BAD_ARGUMENTS = "BAD_ARGUMENTS"
RESULT_NOT_SERIALIZABLE = "RESULT_NOT_SERIALIZABLE"
LEASE_EXPIRED = "LEASE_EXPIRED"
#: Task code raised a ``BaseException`` that is not an ``Exception`` (``SystemExit``,
#: ``asyncio.CancelledError``, ``KeyboardInterrupt``): a failed attempt like any other.
TASK_ABORTED = "TASK_ABORTED"
RETRY = Retry.code
CANCELLED = JobCancelled.code

#: ``last_error`` keeps at most this many characters: the end of the traceback.
LAST_ERROR_LIMIT = 4000
#: A history entry's message keeps at most this many characters.
MESSAGE_LIMIT = 1000
#: The error history keeps the last this many entries.
HISTORY_LIMIT = 10
#: ``last_error_code`` is a column of this width.
CODE_LIMIT = 100


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
        """Describe ``exc``; the code defaults to its ``code`` attribute or class name."""
        chosen = code or getattr(exc, "code", None) or type(exc).__name__
        kind = type(exc)
        text = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
        return cls(
            code=str(chosen),
            message=f"{kind.__name__}: {exc}",
            traceback=text,
            exception=f"{kind.__module__}.{kind.__qualname__}",
        )

    def bounded(self) -> ErrorInfo:
        """The same error as stored: cut to size (tracebacks keep their end), NULs shown.

        A NUL character, which no database text column takes, becomes ``\x00``.
        """
        return ErrorInfo(
            code=storable(self.code)[:CODE_LIMIT],
            message=storable(self.message)[:MESSAGE_LIMIT],
            traceback=storable(self.traceback)[-LAST_ERROR_LIMIT:],
            exception=self.exception,
        )

    @property
    def last_error(self) -> str:
        """What ``Job.last_error`` stores: the traceback's end, else the message."""
        return (self.traceback or self.message)[-LAST_ERROR_LIMIT:]


def storable(text: str) -> str:
    """``text`` with each NUL character written out as ``\x00``."""
    return text.replace("\x00", "\\x00")


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
