"""Workflows (issue 27): a group's fan-in drained beside a plain drain, and a chain's hand-offs.

**Fan-in drain** (``run_fan_in``): each of ``sizes.rounds`` rounds drains, in
turn, ``sizes.fan_in_jobs`` seeded no-op jobs (``drain.seeded``, as the plain
drains) and a group of as many no-op jobs with one no-op callback
(``group(...).then(...)``, enqueued through the package), both by ``DRAIN``'s
workers with ``--burst``, so other work on the machine weighs on both alike.
Each rate is the jobs that succeeded over the database-clock span from the first
claim to the last success (for the group, its callback's); the figures are the
medians of the rounds. Every member's success settles the callback's edge, so
completions that queued behind the callback's row lock would show here as a
fan-in rate well below the plain one.

**Chain hand-off** (``run_chain``): a chain of ``sizes.chain_steps`` no-op steps,
committed at once, run by one idle ``runworkers`` (default options, woken by
NOTIFY and by its own completer). A step's hand-off is its ``started_at`` less
its predecessor's ``finished_at`` (both the database clock): the settling of
the edge, the commit, the wake-up and the claim. The first few hand-offs
(warm caches) are dropped, as for the pickup latency.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

from benchmarks import database, drain, workers
from benchmarks.database import Ids
from benchmarks.latency import WARM_UP, add_percentiles, latency_ms
from benchmarks.results import Result
from benchmarks.session import Session
from benchmarks.tasks import noop
from django_dbqueue.models import Job
from django_dbqueue.workflows import chain, group

#: The plain drain's headline configuration (``drain_2x32``): two processes, so two
#: completers settle the callback's edges side by side.
DRAIN = drain.Drain("workflow_drain_plain", 2, 32)
FAN_IN = dataclasses.replace(DRAIN, key="workflow_drain_fan_in")

#: Per step but the first: its start less its predecessor's finish, in milliseconds.
HAND_OFFS = """
SELECT extract(epoch FROM j.started_at - p.finished_at) * 1000
FROM dbqueue_dependency e
JOIN dbqueue_job j ON j.id = e.job_id
JOIN dbqueue_job p ON p.id = e.depends_on_id
WHERE e.job_id BETWEEN %(first)s AND %(last)s
  AND j.state = 'succeeded' AND p.state = 'succeeded'
ORDER BY e.job_id
"""

#: Whether a job has succeeded (to wait for a chain's last step).
SUCCEEDED = "SELECT 1 FROM dbqueue_job WHERE id = %s AND state = 'succeeded'"
POLL = 0.05


def run_fan_in(session: Session) -> None:
    """Plain drain and fan-in drain in turn, ``sizes.rounds`` times; the medians and ratio."""
    count = session.sizes.fan_in_jobs
    rounds: dict[drain.Drain, list[Result]] = {DRAIN: [], FAN_IN: []}
    for _ in range(session.sizes.rounds):
        rounds[DRAIN].append(measure(session, DRAIN, drain.seeded(session, count)))
        rounds[FAN_IN].append(measure(session, FAN_IN, fanned_in(session, count)))
    labels = {
        DRAIN: f"workflow: {DRAIN.label}, {count:,} no-op jobs",
        FAN_IN: f"workflow: {DRAIN.label}, group of {count:,} no-op jobs then a callback",
    }
    medians = {how: median_result(results, labels[how]) for how, results in rounds.items()}
    for result in medians.values():
        session.results.add(result)
    ratio = medians[FAN_IN].value / medians[DRAIN].value if medians[DRAIN].value else 0.0
    session.results.add(
        Result("workflow_fan_in_ratio", "workflow: fan-in / plain drain rate", ratio, "x")
    )


def measure(session: Session, how: drain.Drain, ids: Ids) -> Result:
    """``drain.measure`` with the long drains' deadline (a fan-in may run slower)."""
    return drain.measure(session, how, ids, session.sizes.long_drain_deadline)


def fanned_in(session: Session, count: int) -> Ids:
    """An emptied table with a group of ``count`` no-op jobs and its callback, vacuumed.

    Enqueued as a project would (``group(...).then(...).enqueue()``); the
    callback, written last, closes the run of ids.
    """
    database.reset(session.harness)
    workflow = group(noop.step() for _ in range(count)).then(noop.step()).enqueue()
    ids = contiguous(workflow.jobs)
    (callback,) = workflow.last
    if callback.pk != ids.last:
        raise RuntimeError(f"the callback {callback.pk} is not the last of {ids}")
    database.vacuum(session.harness)
    database.vacuum(session.harness, "dbqueue_dependency")
    return ids


def contiguous(jobs: list[Job]) -> Ids:
    """The ids of ``jobs``, which must be one run with nothing in between."""
    ids = Ids(min(job.pk for job in jobs), max(job.pk for job in jobs))
    if ids.count != len(jobs):
        raise RuntimeError(f"{len(jobs)} jobs enqueued, but ids {ids.first}-{ids.last}")
    return ids


def median_result(results: list[Result], label: str) -> Result:
    """The round of median rate (the lower middle one), labelled, with every round's rate."""
    figures = [result.value for result in results]
    middle = sorted(results, key=lambda result: result.value)[(len(results) - 1) // 2]
    details = {**middle.details, "rounds": figures}
    return dataclasses.replace(
        middle, label=label, value=statistics.median(figures), raw=None, details=details
    )


def run_chain(session: Session) -> None:
    """A chain of ``sizes.chain_steps`` no-op steps on one idle worker; hand-off percentiles."""
    count = session.sizes.chain_steps
    database.reset(session.harness)
    env = workers.environment(session.url, "0")
    with workers.started(1, [], env, session.logs / "chain") as running:
        latency_ms(session.harness, noop.enqueue().pk)  # warm-up: the worker is up and idle
        ids = contiguous(chain(*(noop.step() for _ in range(count))).enqueue().jobs)
        cut_short = not finished(session, ids.last, session.sizes.drain_deadline)
        workers.stop_all(running)
    hand_offs = [float(ms) for (ms,) in session.harness.execute(HAND_OFFS, ids.params())]
    if len(hand_offs) <= WARM_UP + 1:
        raise RuntimeError(f"only {len(hand_offs)} hand-offs of a chain of {count} steps ran")
    label = f"workflow: chain of {count:,} no-op steps, idle runworkers, hand-off"
    if cut_short:
        label += " [cut short]"
    add_percentiles(session, "workflow_chain_handoff", label, hand_offs[WARM_UP:], None)


def finished(session: Session, job_id: int, timeout: float) -> bool:
    """Whether job ``job_id`` succeeded within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while session.harness.execute(SUCCEEDED, (job_id,)).fetchone() is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL)
    return True
