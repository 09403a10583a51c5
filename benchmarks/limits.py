"""Limits (issue 28): a drain under a concurrency limit of 32 beside unlimited drains.

Each of ``sizes.rounds`` rounds drains, in turn, ``sizes.fan_in_jobs`` seeded no-op
jobs (``drain.seeded``) on ``DRAIN``'s 2 x 32 threads, as many on ``HALF``'s 2 x 16
(32 jobs at once, as under the limit), and as many counted against one limit of 32
(``task:benchmarks.tasks.noop``, ``limit_size`` 32: what ``@task(concurrency=32)``
writes) on 2 x 32 threads, all with ``--burst``, so other work on the machine weighs
on each alike. The figures are the medians; the ratios are the limited rate over
each plain one (issue 28's target: at least 0.8 of the 2 x 32 drain).

A limit's slot stays taken from the claim's commit to the commit of the job's outcome
(the admin never shows more than the limit running), while an unlimited thread takes
its next job once its task returns: on no-op jobs, whose time is the queue's own, the
2 x 32 drain keeps 64 jobs under way and the limited one 32.
"""

from __future__ import annotations

import dataclasses

from benchmarks import database, drain
from benchmarks.database import Ids
from benchmarks.results import Result
from benchmarks.session import Session
from benchmarks.workflows import median_result

DRAIN = drain.Drain("limits_drain_plain", 2, 32)
HALF = drain.Drain("limits_drain_plain_2x16", 2, 16)
LIMITED = dataclasses.replace(DRAIN, key="limits_drain_concurrency_32")
SIZE = 32

LIMITED_JOBS = """
UPDATE dbqueue_job SET limit_key = 'task:benchmarks.tasks.noop', limit_size = %(size)s
WHERE id BETWEEN %(first)s AND %(last)s
"""


def run(session: Session) -> None:
    """Plain and limited drains in turn, ``sizes.rounds`` times; the medians and ratio."""
    count = session.sizes.fan_in_jobs
    rounds: dict[drain.Drain, list[Result]] = {DRAIN: [], HALF: [], LIMITED: []}
    for _ in range(session.sizes.rounds):
        rounds[DRAIN].append(measure(session, DRAIN, drain.seeded(session, count)))
        rounds[HALF].append(measure(session, HALF, drain.seeded(session, count)))
        rounds[LIMITED].append(measure(session, LIMITED, limited(session, count)))
    labels = {
        DRAIN: f"limits: {DRAIN.label}, {count:,} no-op jobs",
        HALF: f"limits: {HALF.label}, {count:,} no-op jobs",
        LIMITED: f"limits: {DRAIN.label}, {count:,} no-op jobs under concurrency={SIZE}",
    }
    medians = {how: median_result(results, labels[how]) for how, results in rounds.items()}
    for result in medians.values():
        session.results.add(result)
    ratios = {DRAIN: "limits_concurrency_ratio", HALF: "limits_concurrency_ratio_2x16"}
    for plain, key in ratios.items():
        ratio = medians[LIMITED].value / medians[plain].value if medians[plain].value else 0.0
        label = f"limits: concurrency={SIZE} on 2 x 32 / plain drain on {plain.label[7:]}"
        session.results.add(Result(key, label, ratio, "x"))


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
