"""Signals for in-process listeners."""

from __future__ import annotations

from django.dispatch import Signal

#: Sent once a transaction that enqueued jobs has committed (at once outside a
#: transaction), with ``queue`` and ``job_ids``. Workers in the same process
#: use it to wake up without polling; on PostgreSQL other processes hear a
#: NOTIFY at the same moment.
jobs_committed = Signal()

#: Sent by the worker once the outcome of an attempt is written to the job,
#: with ``lease`` (the attempt's ``Lease``) and ``outcome`` (``"succeeded"``,
#: ``"retried"`` or ``"dead"``). Not sent when the write was refused (lease
#: lost) or never happened (database unreachable). A receiver that raises is
#: logged and does not disturb the worker.
job_finished = Signal()
