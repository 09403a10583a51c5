"""(f) Worker memory: VmRSS of one ``runworkers --concurrency 8`` over a long drain.

The worker runs without ``--burst`` so it can be sampled once it is idle
again. "before" is read as soon as its first job is claimed, "after" once
every seeded job succeeded (or the deadline passed: then it covers what ran),
before SIGTERM. The details keep the whole curve and the peak (VmHWM).
"""

from __future__ import annotations

import time

from benchmarks import workers
from benchmarks.database import Ids, one
from benchmarks.drain import seeded
from benchmarks.results import Result
from benchmarks.session import Session
from benchmarks.workers import WorkerProcess

CONCURRENCY = 8
SAMPLE_EVERY = 0.5
FIRST_CLAIM_POLL = 0.005
FIRST_CLAIM_TIMEOUT = 30.0

CLAIMED_ANY = """
SELECT EXISTS (SELECT 1 FROM dbqueue_job WHERE state = 'running')
    OR EXISTS (SELECT 1 FROM dbqueue_job WHERE finished_at IS NOT NULL)
"""

SUCCEEDED = """
SELECT count(*) FROM dbqueue_job
WHERE finished_at IS NOT NULL AND state = 'succeeded' AND id BETWEEN %(first)s AND %(last)s
"""


def wait_for_first_claim(session: Session) -> None:
    deadline = time.monotonic() + FIRST_CLAIM_TIMEOUT
    while not one(session.harness, CLAIMED_ANY)[0]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no job claimed within {FIRST_CLAIM_TIMEOUT}s of start")
        time.sleep(FIRST_CLAIM_POLL)


Sample = tuple[float, int, int]


def follow(session: Session, worker: WorkerProcess, ids: Ids) -> tuple[list[Sample], bool]:
    """Sample ``(seconds, jobs succeeded, RSS KiB)`` until all ``ids`` succeeded or time is up.

    Returns the samples and whether the deadline cut the drain short.
    """
    started = time.monotonic()
    curve: list[Sample] = []
    while True:
        (succeeded,) = one(session.harness, SUCCEEDED, ids.params())
        elapsed = time.monotonic() - started
        curve.append((round(elapsed, 2), succeeded, worker.memory_kib()))
        if succeeded >= ids.count:
            return curve, False
        if elapsed > session.sizes.long_drain_deadline:
            return curve, True
        time.sleep(SAMPLE_EVERY)


def run(session: Session) -> None:
    """RSS before and after draining ``sizes.rss_jobs`` no-op jobs."""
    ids = seeded(session, session.sizes.rss_jobs)
    env = workers.environment(session.url, "0")
    args = ["--concurrency", str(CONCURRENCY)]
    with workers.started(1, args, env, session.logs / "memory") as (worker,):
        wait_for_first_claim(session)
        before = worker.memory_kib()
        curve, cut_short = follow(session, worker, ids)
        after = worker.memory_kib()
        peak = worker.memory_kib("VmHWM")
        workers.stop_all([worker])
    drained = curve[-1][1]
    details = {
        "jobs": ids.count,
        "succeeded": drained,
        "cut_short": cut_short,
        "peak_mib": peak / 1024,
        "curve_seconds_succeeded_rss_kib": curve,
    }
    label = f"worker RSS, 1 process x {CONCURRENCY} threads"
    session.results.add(Result("rss_before", f"{label}, first claim", before / 1024, "MiB"))
    session.results.add(
        Result("rss_after", f"{label}, after n jobs", after / 1024, "MiB", None, drained, details)
    )
