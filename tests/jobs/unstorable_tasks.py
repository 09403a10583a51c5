"""Tasks whose outcome carries text no database stores (``tests/e2e/test_unstorable_outcomes.py``).

Each records every attempt as an ``Execution`` row, so a test can tell that
the job ran exactly once (or as often as its retries allow), never again for
want of a record.
"""

from __future__ import annotations

from collections.abc import Callable

from django_dbqueue import JobContext, PermanentError, task
from tests.jobs.crash_tasks import QUICK_RETRY
from tests.jobs.e2e_tasks import record

#: Seconds: a job whose outcome went unrecorded is reaped and run again within a few.
LEASE = 3

#: The text the refusing trigger of the e2e test turns away.
REFUSED_TEXT = "refuse-me"

#: What ``returns`` returns, by kind.
RESULTS: dict[str, object] = {
    "surrogate": "a\ud800b",
    "surrogate-key": {"k\udc00": 1},
    "nul": "before\x00after",
    "refused": REFUSED_TEXT,
}


class Unprintable(PermanentError):
    """A permanent failure whose ``__str__`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ of the task's own exception failed")


#: What ``raises`` raises, by kind: a new exception each attempt.
ERRORS: dict[str, Callable[[], BaseException]] = {
    "permanent-surrogate": lambda: PermanentError("perm \ud800"),
    "permanent-nul": lambda: PermanentError("perm \x00"),
    "unprintable": Unprintable,
    "retried-surrogate": lambda: RuntimeError("retry \udfff"),
    "refused": lambda: PermanentError(REFUSED_TEXT),
}


@task(takes_context=True, max_attempts=3, lease=LEASE, retry=QUICK_RETRY)
def returns(context: JobContext, kind: str) -> object:
    record(context, kind)
    return RESULTS[kind]


@task(takes_context=True, max_attempts=2, lease=LEASE, retry=QUICK_RETRY)
def raises(context: JobContext, kind: str) -> None:
    record(context, kind)
    raise ERRORS[kind]()


@task(takes_context=True, max_attempts=3, lease=LEASE, retry=QUICK_RETRY)
def returns_text(context: JobContext, length: int) -> str:
    """A result ``length + 2`` bytes long as JSON."""
    record(context, str(length))
    return "x" * length
