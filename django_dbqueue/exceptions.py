"""The exceptions django_dbqueue raises, and the ones task code raises to steer retries."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import ClassVar


class DbQueueError(Exception):
    """Base class of every exception django_dbqueue defines."""


class InvalidJob(DbQueueError, ValueError):
    """An enqueue call was rejected before anything was written.

    The message names the culprit (argument, option or task). The caller's
    transaction stays usable: nothing reached the database.
    """


class InvalidProgress(DbQueueError, ValueError):
    """``context.set_progress`` was given a value the job cannot store; nothing was written.

    Raised at the call, before any statement runs, so the task's transaction stays usable.
    """


class ArgumentNotJSON(InvalidJob, TypeError):
    """An enqueue call passed an argument of a type JSON cannot hold (a ``datetime``, say).

    Both an ``InvalidJob`` and a ``TypeError``: the ``TypeError`` is what Django's
    task framework documents for ``enqueue()`` with such an argument. A value JSON
    cannot hold although its type is JSON (NaN, a NUL character) is a plain
    ``InvalidJob``, a ``ValueError``.
    """


class TaskNotFound(DbQueueError, LookupError):
    """No task can be loaded from a job's import path (or its ``django.tasks`` backend).

    The worker makes such a job ``dead`` with code ``TASK_NOT_FOUND``.
    """


class UnstorableResult(DbQueueError, ValueError):
    """``leases.complete()`` was given a result the job cannot store; nothing was written.

    The worker makes the job ``dead`` with the subclass's ``code`` after that one attempt.
    """

    code: ClassVar[str]


class ResultNotSerializable(UnstorableResult):
    """The result is not JSON every database stores (``jsontext.dumps`` refused it)."""

    code = "RESULT_NOT_SERIALIZABLE"


class ResultTooLarge(UnstorableResult):
    """The result takes more than ``MAX_RESULT_BYTES`` as JSON."""

    code = "RESULT_TOO_LARGE"


class TransactionLeftOpen(DbQueueError, RuntimeError):
    """Task code returned with a transaction still open on a database connection.

    An ``atomic`` block entered and never exited, a raw ``BEGIN``, autocommit
    switched off: whatever the task wrote there was never committed. The
    worker rolls it back, gives the next job a clean connection, and records
    the attempt as failed with this code (retried like any other exception),
    never as ``succeeded``.
    """

    code = "TRANSACTION_LEFT_OPEN"


class UnsupportedDatabase(DbQueueError, LookupError):
    """The connection's database vendor has no statement file: the queue cannot run there."""


class LeaseLost(DbQueueError):
    """The worker no longer owns the job's lease.

    Raised by ``JobContext.heartbeat()``. Whatever the task does next cannot be
    recorded: another attempt may already own the job. Stop and let it go.
    """


class JobCancelled(DbQueueError):
    """An operator asked the running job to stop (``leases.request_cancel``).

    Raised by ``JobContext.raise_if_cancelled()``. Let it propagate out of the
    task: the job then ends ``cancelled``, with the request in its history,
    and is not retried.
    """

    code = "CANCELLED"


class Retry(DbQueueError):
    """Raised by task code to ask for another attempt after ``delay``.

    The failed attempt counts against the job's budget and is recorded in its
    history with the code ``RETRY``. ``delay=None`` uses the task's backoff; a
    delay past ``durations.MAX_DELAY`` (100 years) waits that long. A delay
    that is not a finite number of seconds, 0 or more, is a ``ValueError`` here.
    When the budget is spent the job becomes ``dead`` instead.
    """

    code = "RETRY"

    def __init__(self, delay: float | timedelta | None = None, message: str = "") -> None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if seconds is not None and (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise ValueError(
                f"Retry(delay={delay!r}): the delay must be a finite number of seconds, 0 or "
                "more (or a timedelta), or None for the task's backoff."
            )
        self.delay = seconds
        super().__init__(message or "retry requested")


class PermanentError(DbQueueError):
    """Raised by task code when retrying cannot help: the job becomes ``dead`` now."""

    code = "PERMANENT_ERROR"
