"""The worker's progress board: task reports wait here for the heartbeat thread to write.

A task's ``context.set_progress`` only posts its report (``post``) and
returns: no statement on the task's connection, no wait. The heartbeat
thread writes what is due (``write_due``) on its own connection, every job's
report in one statement, each job at most once per ``progress.INTERVAL``, and
sleeps no longer than the next report's turn (``next_turn``). A report whose
row another transaction holds locked waits for the next turn (a newer report
replaces it); one whose lease the write found lost sets the job's
``lease_lost``, so the task's next ``set_progress`` raises ``LeaseLost``.
When an attempt ends, its job thread takes the newest report not known to be
written (``unwritten``) and writes it before the outcome; the board forgets
the job then, and drops whatever else of jobs that left the worker. The job
thread first waits for a write of that job already taken by the heartbeat:
that write may carry an older report, and landing after the last one it
would leave the finished job showing it (949 of 1000).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from django_dbqueue import leases, progress
from django_dbqueue.worker.counters import WorkerCounters
from django_dbqueue.worker.live import AttemptKey, LiveJobs, attempt_key


class ProgressBoard:
    """Reports waiting for the heartbeat, paced per job (``progress.Pacer``); a
    ``progress.Poster``. Thread-safe."""

    def __init__(self, live: LiveJobs, counters: WorkerCounters, wake: Callable[[], None]) -> None:
        self.live = live
        self.counters = counters
        self._wake = wake
        self._pacers: dict[AttemptKey, tuple[leases.Lease, progress.Pacer]] = {}
        self._lock = threading.Lock()
        #: The jobs whose reports the heartbeat has taken and not finished writing.
        self._writing: set[AttemptKey] = set()
        #: Notified when a write of the heartbeat has finished.
        self._written = threading.Condition(self._lock)

    def post(self, lease: leases.Lease, report: progress.Progress) -> bool:
        """Keep ``report`` as the job's newest; the heartbeat writes it at its turn.

        Wakes the heartbeat when nothing of this job was waiting, so it can
        shorten its sleep to the report's turn. Always ``True``: a lost lease
        is learned from the write, later (``lease_lost``).
        """
        key = attempt_key(lease)
        with self._lock:
            _, pacer = self._pacers.setdefault(key, (lease, progress.Pacer()))
            was_waiting = pacer.waiting is not None
            pacer.post(report)
        if not was_waiting:
            self._wake()
        return True

    def unwritten(self, lease: leases.Lease) -> progress.Progress | None:
        """The attempt is over: its newest report not known to be written, and the job
        forgotten, so the heartbeat writes nothing more of it.

        Waits first for the heartbeat's write of this job in flight, if any (one
        short statement that never waits for a row lock): a report it took
        before the task's last ones must land before them, never after. Waits
        at most the lease's length; a heartbeat stuck that long has cost the
        lease, and the outcome's fenced write says so.
        """
        key = attempt_key(lease)
        with self._written:
            self._written.wait_for(lambda: key not in self._writing, lease.lease_seconds)
            entry = self._pacers.pop(key, None)
            return None if entry is None else entry[1].unwritten()

    def next_turn(self) -> float:
        """When (``time.monotonic``) the earliest waiting report may be written; inf: none."""
        with self._lock:
            return min(
                (pacer.turn() for _, pacer in self._pacers.values() if pacer.waiting is not None),
                default=math.inf,
            )

    def write_due(self) -> None:
        """Write every report whose turn has come, in one statement, on this thread's connection.

        A report whose write raised is dropped, not retried: the task's next
        report takes its place, and renewals never wait behind a report the
        database refuses.
        """
        due = self._taken(time.monotonic())
        if not due:
            return
        try:
            written = progress.write(due)
        finally:
            with self._written:
                self._writing.difference_update(attempt_key(lease) for lease, _ in due)
                self._written.notify_all()
        lost = self._unsettled([lease for lease, _ in due if lease.job_id in written.missed])
        with self._lock:
            for lease, report in due:
                entry = self._pacers.get(attempt_key(lease))
                if entry is None:
                    continue
                if lease.job_id in written.written:
                    entry[1].written = report
                elif lease.job_id in written.skipped and entry[1].waiting is None:
                    entry[1].waiting = report
        for lease in lost:
            job = self.live.get(lease)
            if job is None:
                continue  # The attempt ended meanwhile: its outcome's write speaks for it.
            if not job.context.lease_lost.is_set():
                leases.log_lost_lease("set_progress", lease)
                job.context.lease_lost.set()
                self.counters.add("leases_lost")

    def _taken(self, now: float) -> list[tuple[leases.Lease, progress.Progress]]:
        """The reports due now, taken out and marked being written; the pacers of jobs no
        longer live are dropped."""
        live = {attempt_key(job.lease) for job in self.live.all()}
        due = []
        with self._lock:
            for key in self._pacers.keys() - live:
                del self._pacers[key]
            for lease, pacer in self._pacers.values():
                report = pacer.take(now)
                if report is not None:
                    due.append((lease, report))
            self._writing.update(attempt_key(lease) for lease, _ in due)
        return due

    @staticmethod
    def _unsettled(missed: list[leases.Lease]) -> list[leases.Lease]:
        """The leases among ``missed`` really lost: not settled by their own outcome meanwhile."""
        if not missed:
            return []
        settled = leases.settled_by(missed)
        return [lease for lease in missed if lease.job_id not in settled]
