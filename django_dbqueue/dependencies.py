"""Workflow edges: what a finished job does to the jobs that wait for it.

A job enqueued with ``after=[...]`` is ``waiting`` with one ``Dependency``
edge per job it waits for and ``pending_dependencies`` counting the edges not
yet settled. Whatever finishes a job (a fenced completion, a failure or expiry
that ends it ``dead``, a cancel) calls ``settle`` in its own transaction,
under the row locks it took, so a dependent changes in the same commit as the
job it waits for, and a write that lost its lease settles nothing (it never
reaches ``settle``). The cost is proportional to the edges of the jobs that
finished: each edge is read through the ``(depends_on, job)`` index, and each
dependent is locked once per settling, in id order, so two settlings cannot
deadlock on them.

Why a counter and an edge table both: the edge says which dependency failed
(and a requeue of it finds the jobs its failure cancelled); the counter makes
"was that the last one?" one locked row, never a count over a fan-in of
10,000 edges, and the lock on that row is what stops two completions that
each settle one of its last two edges from both deciding it still waits.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from django_dbqueue import clock, conf, history, signals, sql
from django_dbqueue.errors import ErrorInfo, appended, history_entry
from django_dbqueue.models import UNFINISHED_STATES, Dependency, Job, JobState

#: Error code of a job cancelled because a job it depends on ended dead or cancelled.
DEPENDENCY_FAILED = "DEPENDENCY_FAILED"
#: History code of a job returned to waiting because the dependency that failed was requeued.
DEPENDENCY_REQUEUED = "DEPENDENCY_REQUEUED"


@dataclass
class Settled:
    """What one ``settle`` or ``reopen`` changed, by job id."""

    #: Waiting jobs made ready (their last dependency settled).
    released: list[int] = field(default_factory=list)
    #: Waiting jobs cancelled because a dependency failed, cascading down the graph.
    cancelled: list[int] = field(default_factory=list)
    #: Cancelled jobs returned to waiting (``reopen``).
    revived: list[int] = field(default_factory=list)


def settle(connection: BaseDatabaseWrapper, finished: Mapping[int, str]) -> Settled:
    """Settle the dependents of the jobs in ``finished`` (``{id: terminal state}``).

    Call in the transaction that made them terminal. An edge from a job that
    succeeded, or that failed under ``on_failure="run"``, is resolved and
    counted down; a waiting job whose count reaches 0 is ``ready`` (listeners
    are notified at commit). An edge from a job ``dead`` or ``cancelled``
    under ``on_failure="cancel"`` fails: its waiting dependent is
    ``cancelled`` with code ``DEPENDENCY_FAILED`` naming the job, and settles
    its own dependents in turn, down the graph, in this transaction.
    """
    done = Settled()
    outcome = dict(finished)
    while outcome:
        edges = sql.run(
            connection,
            "settle_edges",
            {
                "finished": [
                    {"id": job_id, "failed": state != JobState.SUCCEEDED}
                    for job_id, state in outcome.items()
                ]
            },
        )
        if not edges:
            break
        resolved = {row["job_id"]: row["resolved"] for row in edges}
        failed_by = {row["job_id"]: row["failed_by"] for row in edges if row["failed_by"]}
        updates = []
        cascade: dict[int, str] = {}
        for row in _locked(connection, resolved):
            job_id, state = row["id"], row["state"]
            new_state, info = state, None
            if state == JobState.WAITING and job_id in failed_by:
                new_state = JobState.CANCELLED
                culprit = failed_by[job_id]
                info = ErrorInfo(
                    DEPENDENCY_FAILED,
                    f"job {culprit}, which it depends on, ended {outcome[culprit]}",
                )
                cascade[job_id] = JobState.CANCELLED
                done.cancelled.append(job_id)
            elif state == JobState.WAITING and row["pending_dependencies"] == resolved[job_id]:
                new_state = JobState.READY
                done.released.append(job_id)
            updates.append(_update(row, resolved[job_id], new_state, info))
        _write(connection, updates)
        outcome = cascade
    return done


def reopen(connection: BaseDatabaseWrapper, requeued: Iterable[int]) -> Settled:
    """Return to ``waiting`` the jobs that the failure of the ``requeued`` jobs cancelled.

    Call in the transaction of the operator's requeue. Each failed edge from a
    requeued job is pending again; a dependent ``cancelled`` with code
    ``DEPENDENCY_FAILED`` and no other failed edge waits again, with a history
    entry saying which requeue revived it, and so do the jobs its own
    cancellation cancelled, down the graph. One whose dedupe key another
    unfinished job took meanwhile stays cancelled (its edges pending).
    """
    done = Settled()
    ids = list(requeued)
    while ids:
        rows = sql.run(connection, "reopen_edges", {"job_ids": ids})
        if not rows:
            break
        holders = {row["job_id"] for row in rows}
        # A history table holds finished jobs only: the cancelled ones come back to wait.
        history.restore(connection, holders, [JobState.CANCELLED])
        updates, ids = [], []
        for row in _locked(connection, holders):
            if (
                row["state"] != JobState.CANCELLED
                or row["failed_edges"]
                or row["last_error_code"] != DEPENDENCY_FAILED
                or _key_taken(connection, row)
            ):
                continue
            info = ErrorInfo(DEPENDENCY_REQUEUED, "waiting again: a failed dependency was requeued")
            updates.append(_update(row, 0, JobState.WAITING, info, keep_last_error=True))
            ids.append(row["id"])
            done.revived.append(row["id"])
        _write(connection, updates)
    return done


def results(job_id: int) -> list[Any]:
    """The results of the jobs job ``job_id`` depends on, in the order of its ``after``.

    ``None`` for a dependency that did not succeed (one it runs after anyway,
    ``on_failure="run"``). Two reads by index, on the queue's database.
    Retention never deletes a job an unfinished job depends on.
    """
    database = conf.get().database
    order = list(
        Dependency.objects.using(database)
        .filter(job_id=job_id)
        .order_by("position")
        .values_list("depends_on_id", flat=True)
    )
    found = dict(
        Job.objects.using(database)
        .filter(pk__in=order, state=JobState.SUCCEEDED)
        .values_list("pk", "result")
    )
    return [found.get(depends_on) for depends_on in order]


def _locked(connection: BaseDatabaseWrapper, job_ids: Iterable[int]) -> list[sql.Row]:
    """``lock_dependents`` of ``job_ids``. A finished dependent (cancelled, say) may be
    moving to its history table at this instant: ``history.locked_wherever`` finds it
    there, so its count of pending edges is kept right."""
    return history.locked_wherever(connection, "lock_dependents", job_ids)


def _update(
    row: sql.Row,
    resolved: int,
    state: str,
    info: ErrorInfo | None,
    *,
    keep_last_error: bool = False,
) -> dict[str, object]:
    """One row of ``update_dependents``: ``info``, if any, is added to the job's history."""
    update: dict[str, object] = {"id": row["id"], "resolved": resolved, "state": state}
    if info is not None:
        stamp = clock.stamp(sql.to_datetime(row["clock"]))
        entry = history_entry(0, None, info, stamp)
        update["errors"] = appended(sql.to_json(row["errors"]), entry)
        if not keep_last_error:
            update["code"], update["last_error"] = info.code, info.last_error
    return update


def _write(connection: BaseDatabaseWrapper, updates: list[dict[str, object]]) -> None:
    """Run ``update_dependents``; the workers of this process hear of the jobs made ready
    at commit (``signals.jobs_committed``; other processes by ``NOTIFY``, or their next poll)."""
    if not updates:
        return
    rows = sql.run(
        connection, "update_dependents", {"rows": updates, "channel": conf.get().notify_channel}
    )
    ready: dict[str, list[int]] = {}
    for row in rows:
        if row["state"] == JobState.READY:
            ready.setdefault(row["queue"], []).append(row["id"])
    for queue, job_ids in ready.items():
        sql.on_commit(
            connection,
            functools.partial(
                signals.jobs_committed.send, sender=Job, queue=queue, job_ids=job_ids
            ),
        )


def _key_taken(connection: BaseDatabaseWrapper, row: sql.Row) -> bool:
    """Whether an unfinished job holds the dedupe key ``row``'s job would take back."""
    if row["dedupe_key"] is None:
        return False
    holders = Job.objects.using(connection.alias).filter(
        state__in=UNFINISHED_STATES, task=row["task"], dedupe_key=row["dedupe_key"]
    )
    return bool(holders.exists())
