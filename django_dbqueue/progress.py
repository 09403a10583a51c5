"""Progress a running attempt reports (``context.set_progress``): checked, paced, fenced.

A report is checked where the task makes it (``Progress.checked``), so a bad
value is an ``InvalidProgress`` at the call, never a database error in the
task's transaction. ``write`` stores reports in ``Job.progress`` as
``{"done", "total", "message", "attempt", "at"}`` (``at``: the database clock,
ISO 8601 UTC), one statement for many jobs, fenced like ``leases.renew``: a
report applies only while its lease is the caller's and live by the database
clock; a row another transaction holds locked is skipped, never awaited.

``Pacer`` keeps a tight loop's reports to one write a ``INTERVAL`` per job:
the newest report waits for its turn, the ones it replaced are dropped. In a
worker the heartbeat thread writes the waiting report once its turn comes
(``worker.progress``); outside one (``run_jobs``, eager mode) ``Inline``
writes on the calling thread's connection, when a call comes at its turn.
Either is a ``Poster``. When the attempt ends, the newest report not known to
be written is taken from its poster (``Poster.unwritten``) and written before
the outcome, so the pacing never loses a task's last word.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from django_dbqueue import jsontext, leases, sql
from django_dbqueue.exceptions import InvalidProgress

#: Seconds between two writes of one job's progress, at the least.
INTERVAL = 1.0
#: The largest ``done`` or ``total``: the last integer every JSON reader holds exactly.
MAX_COUNT = 2**53
#: Characters of a message kept; a longer one is cut to this, ending in "…".
MAX_MESSAGE_CHARS = 200


@dataclass(frozen=True)
class Progress:
    """One report: ``done`` of ``total`` (``None``: unknown), with a short ``message``."""

    done: int | float
    total: int | float | None
    message: str

    @classmethod
    def checked(cls, done: object, total: object = None, message: object = "") -> Progress:
        """The report, once every value is one every database stores; else ``InvalidProgress``.

        ``done`` and ``total`` are finite numbers (not bools) from 0 to
        ``MAX_COUNT``, with ``done <= total``. ``message`` is text without NUL
        or surrogate code points; past ``MAX_MESSAGE_CHARS`` it is cut, not refused.
        """
        count = _count("done", done)
        of = None if total is None else _count("total", total)
        if of is not None and count > of:
            raise InvalidProgress(
                f"set_progress: done ({done!r}) is more than total ({total!r}). "
                "Raise total, or pass total=None while the total is unknown."
            )
        if not isinstance(message, str):
            raise InvalidProgress(
                f"set_progress: message must be text, not {type(message).__name__}."
            )
        problem = jsontext.unstorable(message)
        if problem:
            raise InvalidProgress(
                f"set_progress: message {message!r} holds {problem}. Leave it out of the message."
            )
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[: MAX_MESSAGE_CHARS - 1] + "…"
        return cls(count, of, message)

    def stored(self, attempt: int) -> dict[str, Any]:
        """What ``Job.progress`` holds for this report of ``attempt`` (``at`` aside)."""
        return {"done": self.done, "total": self.total, "message": self.message, "attempt": attempt}


def summary(report: dict[str, Any]) -> str:
    """``report`` (a ``Job.progress``) as people read it: ``45/100 (45%)``, or ``1234``."""
    done, total = report.get("done"), report.get("total")
    if total is None:
        return _number(done)
    if total:
        return f"{_number(done)}/{_number(total)} ({done / total:.0%})"
    return f"{_number(done)}/{_number(total)}"


def _number(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)


def _count(name: str, value: object) -> int | float:
    """``value`` if it is a finite number (not a bool) from 0 to ``MAX_COUNT``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidProgress(
            f"set_progress: {name} must be a number, not {type(value).__name__} ({value!r})."
        )
    if not (math.isfinite(value) and 0 <= value <= MAX_COUNT):
        raise InvalidProgress(
            f"set_progress: {name} must be a finite number from 0 to 2**53, not {value!r}."
        )
    return value


@dataclass(frozen=True)
class ProgressWrite:
    """What one ``write`` did, by job id: ``written``; ``skipped`` (the row was locked
    elsewhere: nothing written, the lease not lost; write the newest report later); and
    ``missed``, the rest: no longer running under that lease (lost, or settled meanwhile)."""

    written: set[int]
    skipped: set[int]
    missed: set[int]


def write(reports: Sequence[tuple[leases.Lease, Progress]]) -> ProgressWrite:
    """Store each lease's report on its job, in one short statement of its own.

    Fenced: applies only while the job runs under that ``(worker_id,
    lease_token)`` with ``lease_until`` ahead of the database clock; else
    changes nothing. Never waits for a row lock held by another transaction.
    Inside the caller's transaction (``run_jobs`` in a test's) it joins it.
    """
    if not reports:
        return ProgressWrite(written=set(), skipped=set(), missed=set())
    batch = [
        {
            "job_id": lease.job_id,
            "lease_token": lease.lease_token,
            "worker_id": lease.worker_id,
            "progress": jsontext.dumps(report.stored(lease.attempt)),
        }
        for lease, report in reports
    ]
    rows = sql.run_alone(leases.queue_connection(), "set_progress", {"reports": batch})
    skipped = {row["id"] for row in rows if row["skipped"]}
    written = {row["id"] for row in rows if not row["skipped"]}
    missed = {lease.job_id for lease, _ in reports} - written - skipped
    return ProgressWrite(written=written, skipped=skipped, missed=missed)


class Poster(Protocol):
    """Where a task's reports go (``context.set_progress``): ``Inline``, or in a worker
    its heartbeat's ``ProgressBoard``."""

    def post(self, lease: leases.Lease, report: Progress) -> bool:
        """Take ``report`` as the job's newest, to write now or at its turn; ``False`` when
        this learned that the lease is lost."""
        ...

    def unwritten(self, lease: leases.Lease) -> Progress | None:
        """The attempt is over: its newest report not known to be written (taken, so it is
        written once, by the caller, before the outcome), or ``None``."""
        ...


class Pacer:
    """One job's reports, at most one write per ``INTERVAL``: the newest waits its turn.

    Not thread-safe: its owner serializes calls (one task thread, or a lock).
    """

    __slots__ = ("_next_turn", "newest", "waiting", "written")

    def __init__(self) -> None:
        self._next_turn = 0.0
        #: The newest report not yet taken for a write, or ``None``.
        self.waiting: Progress | None = None
        #: The newest report posted, written or not.
        self.newest: Progress | None = None
        #: The newest report known written.
        self.written: Progress | None = None

    def post(self, report: Progress) -> None:
        """Keep ``report`` as the newest, waiting for its turn."""
        self.waiting = self.newest = report

    def unwritten(self) -> Progress | None:
        """The newest report unless it is known written: one waiting, or one taken whose
        write has not been confirmed (writing it again stores the same values)."""
        return None if self.newest is self.written else self.newest

    def turn(self) -> float:
        """When (``time.monotonic``) the waiting report may be written."""
        return self._next_turn

    def take(self, now: float) -> Progress | None:
        """The waiting report if its turn has come (the next turn is then ``INTERVAL`` on)."""
        report = self.waiting
        if report is None or now < self._next_turn:
            return None
        self.waiting = None
        self._next_turn = now + INTERVAL
        return report


class Inline:
    """Writes a task's reports on the calling thread's connection, paced (``run_jobs``).

    A report is written when it comes at its job's turn; one that comes
    sooner waits for a later call, or for the attempt's end (``unwritten``).
    ``post`` returns ``False`` when the write found the lease lost; a skipped
    write (row locked elsewhere) keeps the report waiting for the next turn.
    """

    __slots__ = ("_pacer",)

    def __init__(self) -> None:
        self._pacer = Pacer()

    def post(self, lease: leases.Lease, report: Progress) -> bool:
        self._pacer.post(report)
        due = self._pacer.take(time.monotonic())
        if due is None:
            return True
        found = write([(lease, due)])
        if lease.job_id in found.written:
            self._pacer.written = due
        elif lease.job_id in found.skipped:
            self._pacer.waiting = due
        return lease.job_id not in found.missed

    def unwritten(self, lease: leases.Lease) -> Progress | None:
        report = self._pacer.unwritten()
        self._pacer = Pacer()
        return report
