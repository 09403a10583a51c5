"""Batched completions: many job successes written in one statement.

Job threads hand their result to the completer and wait for it. The completer
writes everything that queued up while it wrote the previous batch (up to
``MAX_BATCH``) with one ``complete`` statement, in which every row keeps its
own fencing check, then tells each thread whether its lease still held. Under
load this turns a commit per job into a commit per batch; a lone job is
written at once (group commit: nobody waits for a window).
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

from django.db import OperationalError

from django_dbqueue import leases
from django_dbqueue.worker.connections import DATABASE_ERRORS, close_queue_connection

#: The most results written in one statement.
MAX_BATCH = 200


@dataclass
class _Pending:
    lease: leases.Lease
    encoded: str | None
    done: threading.Event = field(default_factory=threading.Event)
    applied: bool = False
    error: Exception | None = None


class Completer(threading.Thread):
    """Background writer of job successes until ``stop`` is set and nothing is pending."""

    def __init__(self, stop: threading.Event) -> None:
        super().__init__(name="dbqueue-completer", daemon=True)
        self.stop = stop
        self._inbox: queue.SimpleQueue[_Pending] = queue.SimpleQueue()

    def complete(self, lease: leases.Lease, result: object) -> bool:
        """Like ``leases.complete``, batched with other threads' results.

        Raises ``ResultNotSerializable`` at once (nothing written), and the
        database error of the batch if its write failed, so the caller's
        retry applies. Waits at most the lease's length for the write.
        """
        pending = _Pending(lease, leases.encode_result(lease, result))
        self._inbox.put(pending)
        if not pending.done.wait(lease.lease_seconds):
            raise OperationalError(f"job {lease.job_id}: the completer did not write in time")
        if pending.error is not None:
            raise pending.error
        return pending.applied

    def run(self) -> None:
        try:
            while not (self.stop.is_set() and self._inbox.empty()):
                batch = self._gather()
                if batch:
                    self._write(batch)
        finally:
            close_queue_connection()

    def _gather(self) -> list[_Pending]:
        try:
            batch = [self._inbox.get(timeout=0.1)]
        except queue.Empty:
            return []
        # Group commit: take what queued up while the last batch was written, never wait.
        while len(batch) < MAX_BATCH:
            try:
                batch.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        return batch

    def _write(self, batch: list[_Pending]) -> None:
        try:
            completed = leases.complete_many([(p.lease, p.encoded) for p in batch])
        except DATABASE_ERRORS as exc:
            close_queue_connection()
            for pending in batch:
                pending.error = exc
        else:
            for pending in batch:
                pending.applied = pending.lease.job_id in completed
        finally:
            for pending in batch:
                pending.done.set()
