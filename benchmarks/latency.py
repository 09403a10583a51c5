"""(c) Pickup latency of an idle worker, and of a raw LISTEN-and-claim loop.

One job at a time is enqueued (autocommit, through the package) while the
worker idles; the latency is ``started_at - created_at`` by the database
clock: the insert, its commit, the notification, the wake-up and the claim.
The next job follows 10-30 ms after the last one finished. The first few
samples (worker start-up, warm caches) are dropped.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from psycopg import sql

from benchmarks import database, raw, workers
from benchmarks.database import Connection
from benchmarks.results import Result
from benchmarks.session import Session
from benchmarks.tasks import noop
from benchmarks.timing import percentiles
from django_dbqueue import conf

WARM_UP = 5
#: The longest one sample may take (the first includes the worker's start-up).
SAMPLE_TIMEOUT = 30.0
POLL = 0.005

#: Pickup latency: from the insert to the claim.
LATENCY = """
SELECT extract(epoch FROM started_at - created_at) * 1000 FROM dbqueue_job
WHERE id = %s AND state = 'succeeded'
"""


class RawWorker(threading.Thread):
    """LISTEN; on each notification claim and complete whatever is due, one job at a time."""

    def __init__(self, url: str) -> None:
        super().__init__(name="raw-worker", daemon=True)
        self.url = url
        self.listening = threading.Event()
        self.stopping = threading.Event()

    def run(self) -> None:
        channel = sql.Identifier(conf.get().notify_channel)
        with raw.connect(self.url) as listening, raw.connect(self.url) as working:
            listening.execute(sql.SQL("LISTEN {}").format(channel))
            self.listening.set()
            while not self.stopping.is_set():
                for _ in listening.notifies(timeout=0.1):
                    while claimed := raw.claim(working, 1):
                        raw.complete(working, claimed)


def latency_ms(harness: Connection, job_id: int, query: str = LATENCY) -> float:
    """Wait for job ``job_id`` to succeed; its latency in milliseconds as ``query`` reads it."""
    deadline = time.monotonic() + SAMPLE_TIMEOUT
    while (row := harness.execute(query, (job_id,)).fetchone()) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} did not succeed within {SAMPLE_TIMEOUT}s")
        time.sleep(POLL)
    return float(row[0])


def samples(
    session: Session, count: int, enqueue: Callable[[], float] | None = None
) -> list[float]:
    """Pickup latencies of ``count`` jobs enqueued one at a time, after the warm-up.

    ``enqueue`` enqueues one job and returns its latency once it ran
    (default: ``noop.enqueue()`` through the package, read back from the table).
    """
    one = enqueue or (lambda: latency_ms(session.harness, noop.enqueue().pk))
    pause = random.Random(7)
    latencies = []
    for _ in range(WARM_UP + count):
        latencies.append(one())
        time.sleep(pause.uniform(0.01, 0.03))
    return latencies[WARM_UP:]


def raw_samples(session: Session, count: int) -> list[float]:
    """Pickup latencies of the raw LISTEN-and-claim loop (``RawWorker``) on an emptied table."""
    database.reset(session.harness)
    raw_worker = RawWorker(session.url)
    raw_worker.start()
    try:
        if not raw_worker.listening.wait(SAMPLE_TIMEOUT):
            raise TimeoutError(f"the raw worker was not listening within {SAMPLE_TIMEOUT}s")
        return samples(session, count)
    finally:
        raw_worker.stopping.set()
        raw_worker.join()


def worker_samples(session: Session, count: int) -> list[float]:
    """Pickup latencies of an idle ``runworkers`` (default options) on an emptied table."""
    database.reset(session.harness)
    env = workers.environment(session.url, "0")
    with workers.started(1, [], env, session.logs / "pickup") as running:
        latencies = samples(session, count)
        workers.stop_all(running)
    return latencies


def add_percentiles(
    session: Session, prefix: str, label: str, latencies: list[float], raw_prefix: str | None
) -> None:
    for name, value in percentiles(latencies).items():
        session.results.add(
            Result(
                f"{prefix}_{name}",
                f"{label}, {name}",
                value,
                "ms",
                f"{raw_prefix}_{name}" if raw_prefix else None,
                len(latencies),
            )
        )


def run(session: Session) -> None:
    """Raw LISTEN-and-claim pickup first, then an idle ``runworkers`` (default options)."""
    count = session.sizes.latency_samples
    raw_latencies = raw_samples(session, count)
    add_percentiles(session, "raw_pickup", "raw: LISTEN + claim SQL, pickup", raw_latencies, None)
    latencies = worker_samples(session, count)
    add_percentiles(session, "pickup", "idle runworkers, pickup", latencies, "raw_pickup")
