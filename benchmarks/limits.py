"""Limits (issue 28): a drain under a concurrency limit of 32 beside the unlimited drain.

Each of ``sizes.rounds`` rounds drains, in turn, ``sizes.fan_in_jobs`` seeded no-op
jobs (``drain.seeded``) and as many counted against one limit of 32
(``task:benchmarks.tasks.noop``, ``limit_size`` 32: what ``@task(concurrency=32)``
writes), both on ``DRAIN``'s 2 x 32 threads with ``--burst``, so other work on the
machine weighs on both alike. 64 threads share 32 slots: the limited drain's claims
admit at most the free slots, one claim at a time per limit (its advisory lock),
while the plain one's batches take what the threads ask. The figures are the medians;
the ratio is the limited rate over the plain one (issue 28's target: at least 0.8).
"""

from __future__ import annotations

import dataclasses

from benchmarks import database, drain
from benchmarks.database import Ids
from benchmarks.results import Result
from benchmarks.session import Session
from benchmarks.workflows import median_result

DRAIN = drain.Drain("limits_drain_plain", 2, 32)
LIMITED = dataclasses.replace(DRAIN, key="limits_drain_concurrency_32")
SIZE = 32

LIMITED_JOBS = """
UPDATE dbqueue_job SET limit_key = 'task:benchmarks.tasks.noop', limit_size = %(size)s
WHERE id BETWEEN %(first)s AND %(last)s
"""


def run(session: Session) -> None:
    """Plain and limited drains in turn, ``sizes.rounds`` times; the medians and ratio."""
    count = session.sizes.fan_in_jobs
    rounds: dict[drain.Drain, list[Result]] = {DRAIN: [], LIMITED: []}
    for _ in range(session.sizes.rounds):
        rounds[DRAIN].append(measure(session, DRAIN, drain.seeded(session, count)))
        rounds[LIMITED].append(measure(session, LIMITED, limited(session, count)))
    labels = {
        DRAIN: f"limits: {DRAIN.label}, {count:,} no-op jobs",
        LIMITED: f"limits: {DRAIN.label}, {count:,} no-op jobs under concurrency={SIZE}",
    }
    medians = {how: median_result(results, labels[how]) for how, results in rounds.items()}
    for result in medians.values():
        session.results.add(result)
    ratio = medians[LIMITED].value / medians[DRAIN].value if medians[DRAIN].value else 0.0
    session.results.add(
        Result("limits_concurrency_ratio", f"limits: concurrency={SIZE} / plain drain", ratio, "x")
    )


def limited(session: Session, count: int) -> Ids:
    """``count`` seeded no-op jobs, each counted against one limit of ``SIZE``."""
    database.reset(session.harness)
    ids = database.seed(session.harness, count)
    session.harness.execute(LIMITED_JOBS, {"size": SIZE, "first": ids.first, "last": ids.last})
    database.vacuum(session.harness)
    return ids


def measure(session: Session, how: drain.Drain, ids: Ids) -> Result:
    """``drain.measure`` with the long drains' deadline (a limited drain may run slower)."""
    return drain.measure(session, how, ids, session.sizes.long_drain_deadline)
