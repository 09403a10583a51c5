"""Waking workers for enqueued jobs: once per queue and transaction, however many jobs.

The first job a transaction enqueues on a queue carries that queue's NOTIFY
(PostgreSQL delivers it at commit); later jobs on the queue only add their
ids, and once the transaction commits one ``jobs_committed`` per queue is
sent with all of them. Outside a transaction every enqueue is its own commit:
it notifies and is announced at once.

A transaction's pending wake-ups are its ``on_commit`` callback, looked up on
the connection at the current savepoint level. A rollback of the transaction,
or of the savepoint that registered the callback, discards the callback and
the NOTIFY with it, so the next enqueue notifies again; an enqueue inside a
savepoint gets a callback of its own, so rolled-back ids are never announced.
"""

from __future__ import annotations

import threading
from weakref import WeakKeyDictionary

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_dbqueue import signals
from django_dbqueue.models import Job


class PendingWakeUps:
    """Job ids by queue, enqueued at one savepoint level; called at commit to announce them."""

    def __init__(self) -> None:
        self.job_ids: dict[str, list[int]] = {}

    def __call__(self) -> None:
        for queue, job_ids in self.job_ids.items():
            signals.jobs_committed.send(sender=Job, queue=queue, job_ids=job_ids)


def needs_notify(connection: BaseDatabaseWrapper, queue: str) -> bool:
    """Whether an enqueue on ``queue`` must send the NOTIFY: none is pending for it yet."""
    return notifies(pending(connection), queue)


def notifies(found: PendingWakeUps | None, queue: str) -> bool:
    """``needs_notify`` given the wake-ups ``pending`` found (once for a whole enqueue)."""
    return found is None or queue not in found.job_ids


def announce(
    connection: BaseDatabaseWrapper,
    queue: str,
    job_ids: list[int],
    found: PendingWakeUps | None,
) -> None:
    """Send ``jobs_committed`` for ``job_ids`` at commit (at once outside a transaction).

    ``found`` is what ``pending(connection)`` returned before the jobs were
    inserted, at the same savepoint level.
    """
    if found is None:
        found = PendingWakeUps()
        found.job_ids[queue] = list(job_ids)
        transaction.on_commit(found, using=connection.alias)
        if connection.in_atomic_block:
            _remember(connection, len(connection.run_on_commit) - 1, found)
    else:
        found.job_ids.setdefault(queue, []).extend(job_ids)


#: Where each connection's latest wake-ups sit in its on_commit list, so finding
#: them again costs one look, not a scan past every callback registered since.
_positions: WeakKeyDictionary[BaseDatabaseWrapper, tuple[int, PendingWakeUps]] = WeakKeyDictionary()
_positions_lock = threading.Lock()


def _remember(connection: BaseDatabaseWrapper, index: int, pending: PendingWakeUps) -> None:
    with _positions_lock:
        _positions[connections[connection.alias]] = (index, pending)


def pending(connection: BaseDatabaseWrapper) -> PendingWakeUps | None:
    """The wake-ups of the connection's current savepoint level; None when there are none yet."""
    if not connection.in_atomic_block:
        return None
    # Django keeps each on_commit callback with the savepoints open when it was registered,
    # and drops it when the transaction or one of those savepoints rolls back.
    level = set(connection.savepoint_ids)
    callbacks = connection.run_on_commit
    with _positions_lock:
        # The wrapper itself, also when given django.db.connection (a proxy to it).
        remembered = _positions.get(connections[connection.alias])
    if remembered is not None:
        index, pending = remembered
        entry = callbacks[index] if index < len(callbacks) else None
        if entry is not None and entry[1] is pending and entry[0] == level:
            return pending
    for index in range(len(callbacks) - 1, -1, -1):
        savepoints, callback = callbacks[index][0], callbacks[index][1]
        if isinstance(callback, PendingWakeUps) and savepoints == level:
            _remember(connection, index, callback)
            return callback
    return None
