"""Signals for in-process listeners.

``job_started`` and ``job_finished`` are sent for every attempt, so they keep
their receivers per sender (``use_caching``, as Django's model signals do):
a send looks them up once, not on every attempt.
"""

from __future__ import annotations

from django.dispatch import Signal

#: Sent once a transaction that enqueued jobs has committed (at once outside a
#: transaction), once per queue, with ``queue`` and ``job_ids`` (every job the
#: transaction enqueued on that queue). Workers in the same process use it to
#: wake up without polling; on PostgreSQL other processes hear a NOTIFY at the
#: same moment.
jobs_committed = Signal()

#: Sent on the worker when an attempt begins (on the thread that runs it, before the
#: task is imported or called), with ``lease`` (the attempt's ``Lease``), ``job_id``,
#: ``attempt`` (1-based) and ``leased_at``: when the claim granted the lease, by the
#: database clock, so ``leased_at - job.run_at`` is the pickup latency. For integrations
#: (APM spans, pickup metrics) that need no code in each task; ``job_finished`` follows
#: when the outcome is written. A receiver that raises is logged and does not disturb
#: the worker. ``testing.run_jobs`` and eager mode send it too.
job_started = Signal(use_caching=True)

#: Sent by the worker once the outcome of an attempt is written to the job (a
#: success from the worker's reporter thread, other outcomes from the job's),
#: with ``lease`` (the attempt's ``Lease``), ``outcome`` (``"succeeded"``,
#: ``"retried"``, ``"dead"``, or ``"cancelled"`` when the task stopped on a cancel
#: request by raising ``JobCancelled``) and ``error_code`` (the code the failure was
#: recorded with, ``last_error_code``: ``"ValueError"``, ``"TASK_NOT_FOUND"``...; ``""``
#: for a success): once per attempt, the hook for attempts (error trackers:
#: ``django_dbqueue.contrib.sentry``). A
#: failed attempt is reported inside the handler of its exception, so
#: ``sys.exc_info()`` holds it. Not sent when the write was refused (lease
#: lost) or never happened (database unreachable), nor for a job the reaper
#: retries or makes dead. A receiver that raises is logged and does not
#: disturb the worker.
job_finished = Signal(use_caching=True)
