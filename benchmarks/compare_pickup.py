"""Idle pickup side by side with pgqueuer (``--compare pgqueuer``): interleaved rounds.

Each round takes ``sizes.latency_samples / sizes.rounds`` samples from each of
three idle workers in turn: the raw LISTEN-and-claim loop, ``runworkers``
(default options) and a pgqueuer worker (``python -m benchmarks.pgq --pickup``:
its defaults, asyncpg). One job at a time is enqueued autocommit through each
one's own API; the latency is by the database clock from the insert to the
claim (ours and raw: ``started_at - created_at``; pgqueuer: ``updated -
created``). Each worker's first samples of a round (start-up) are dropped.
The percentiles are over every round's samples, so other work on the machine
weighs on all three alike.
"""

from __future__ import annotations

import selectors
import subprocess
import sys
from collections import defaultdict
from typing import Any

from benchmarks import latency, workers
from benchmarks.session import Session

LABELS = {
    "raw": "compare: raw LISTEN + claim SQL, pickup",
    "ours": "compare: idle runworkers, pickup",
    "pgqueuer": "compare: idle pgqueuer worker (defaults), pickup",
}


def run(session: Session) -> None:
    """Sample raw, ours and pgqueuer in turn for ``sizes.rounds`` rounds; add the percentiles."""
    from benchmarks import pgq  # the bench extra: imported only when comparing

    pgq.setup(session.url)
    per_round = max(2, session.sizes.latency_samples // session.sizes.rounds)
    found: dict[str, list[float]] = defaultdict(list)
    for _ in range(session.sizes.rounds):
        found["raw"] += latency.raw_samples(session, per_round)
        found["ours"] += latency.worker_samples(session, per_round)
        found["pgqueuer"] += pgqueuer_samples(session, per_round)
    for who, latencies in found.items():
        raw = None if who == "raw" else "compare_pickup_raw"
        latency.add_percentiles(session, f"compare_pickup_{who}", LABELS[who], latencies, raw)


def pgqueuer_samples(session: Session, count: int) -> list[float]:
    """Pickup latencies of an idle pgqueuer worker, jobs enqueued with ``SyncQueries``."""
    from pgqueuer.adapters.drivers.psycopg import SyncPsycopgDriver
    from pgqueuer.queries import SyncQueries

    from benchmarks import pgq

    pgq.seed(session.url, 0)
    queries = SyncQueries(SyncPsycopgDriver(session.harness))
    command = [sys.executable, "-m", "benchmarks.pgq", session.url, "--pickup"]
    process = subprocess.Popen(command, cwd=workers.ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)

            def one() -> float:
                queries.enqueue(pgq.ENTRYPOINT, None, 0)
                return float(next_line(selector, process))

            return latency.samples(session, count, one)
    finally:
        process.kill()
        process.wait()


def next_line(selector: selectors.BaseSelector, process: subprocess.Popen[Any]) -> str:
    """The worker's next line of output, waiting at most ``latency.SAMPLE_TIMEOUT``."""
    if not selector.select(latency.SAMPLE_TIMEOUT):
        raise TimeoutError(f"pgqueuer ran no job within {latency.SAMPLE_TIMEOUT}s")
    line = process.stdout.readline() if process.stdout else ""
    if not line:
        raise workers.WorkerFailed("the pgqueuer worker exited (its traceback is on stderr)")
    return line
