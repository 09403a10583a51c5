"""(d) Lateness of jobs scheduled 1 s ahead and of retries with a 1 s backoff.

One job at a time, while an idle worker (default options, so a 5 s poll
interval) waits: a job enqueued with ``delay=1``, or one whose first attempt
raises ``Retry(delay=1)``. Lateness is ``started_at - run_at`` by the database
clock; a retry's ``run_at`` is the end of its backoff, and ``started_at`` that
of the attempt that succeeded. A worker that only polled would be late by up
to its poll interval.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks import database, workers
from benchmarks.latency import add_percentiles, latency_ms
from benchmarks.session import Session
from benchmarks.tasks import noop, retry_once
from django_dbqueue.models import Job

DELAY = 1.0

LATENESS = """
SELECT extract(epoch FROM started_at - run_at) * 1000 FROM dbqueue_job
WHERE id = %s AND state = 'succeeded'
"""


def samples(session: Session, enqueue: Callable[[], Job]) -> list[float]:
    """Lateness of ``lateness_samples`` jobs, each enqueued once the previous one succeeded."""
    count = session.sizes.lateness_samples
    return [latency_ms(session.harness, enqueue().pk, LATENESS) for _ in range(count)]


def run(session: Session) -> None:
    """Scheduled jobs first, then retries, against one idle ``runworkers``."""
    database.reset(session.harness)
    env = workers.environment(session.url, "0")
    with workers.started(1, [], env, session.logs / "lateness") as running:
        latency_ms(session.harness, noop.enqueue().pk)  # warm-up: the worker is up and idle
        scheduled = samples(session, lambda: noop.using(delay=DELAY).enqueue())
        retried = samples(session, lambda: retry_once.enqueue(DELAY))
        workers.stop_all(running)
    add_percentiles(
        session, "scheduled_lateness", "job due in 1 s, start after run_at", scheduled, None
    )
    add_percentiles(session, "retry_lateness", "Retry(delay=1), rerun after run_at", retried, None)
