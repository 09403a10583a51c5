"""Tasks of the crash e2e tests (``test_crashes.py``), run by real worker processes.

Each records its attempts through ``tests.jobs.e2e_tasks.record`` so the test can
see which worker ran which attempt, with which idempotency key.
"""

from __future__ import annotations

from typing import Any

from django_dbqueue import Backoff, JobContext, task
from tests.jobs.e2e_tasks import finish, record, wait_for_gate
from tests.testapp.models import Effect

#: Retry almost at once, so recovered jobs run again without a visible pause.
QUICK_RETRY = Backoff(base=0.1, factor=1, cap=0.1)


@task(takes_context=True, lease=2, retry=QUICK_RETRY)
def gated_reporting_worker(context: JobContext, gate: str) -> dict[str, Any]:
    """Wait for the gate (no heartbeat of its own), then return who ran this attempt."""
    execution = record(context, gate)
    wait_for_gate(gate)
    finish(execution)
    return {"worker_id": context.worker_id, "attempt": context.attempt}


@task(takes_context=True, lease=2, retry=QUICK_RETRY)
def applies_effect_once(context: JobContext, gate: str) -> dict[str, Any]:
    """Apply an effect keyed by the idempotency key (insert if absent), then finish.

    The first attempt waits for ``gate`` after the effect is applied, so a test
    can kill the worker between the effect and the completion. The attempt's
    label says whether it created the effect or found it already there.
    """
    _, created = Effect.objects.get_or_create(key=context.idempotency_key)
    execution = record(context, "created" if created else "existing")
    if context.attempt == 1:
        wait_for_gate(gate)
    finish(execution)
    return {"created": created}


@task(takes_context=True, lease=2, timeout=1, retry=QUICK_RETRY)
def stuck_past_timeout(context: JobContext, gate: str) -> dict[str, Any]:
    """The first attempt hangs (ignoring ``lease_lost``) until the gate opens; later ones return.

    A stuck attempt like this is what the timeout exists for: the heartbeat
    stops renewing it, the lease lapses and another attempt runs meanwhile.
    """
    execution = record(context, gate)
    if context.attempt == 1:
        wait_for_gate(gate)
    finish(execution)
    return {"attempt": context.attempt}


@task(takes_context=True, lease=2, retry=QUICK_RETRY)
def each_attempt_gated(context: JobContext, gate: str) -> dict[str, Any]:
    """Each attempt waits for its own gate, ``{gate}-{attempt}`` (ignoring ``lease_lost``),
    then returns its attempt number; the worker's heartbeat renews it meanwhile."""
    execution = record(context, gate)
    wait_for_gate(f"{gate}-{context.attempt}")
    finish(execution)
    return {"attempt": context.attempt}


class AlwaysFails(RuntimeError):
    """What ``always_fails`` raises: its class name is the error code."""


@task(max_attempts=2, retry=QUICK_RETRY)
def always_fails(message: str) -> None:
    """Fail every attempt with ``AlwaysFails(message)``."""
    raise AlwaysFails(message)
