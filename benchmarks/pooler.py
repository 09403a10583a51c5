"""Through PgBouncer (``--pooler``): the same drain directly and through a transaction pool.

Each of ``sizes.rounds`` rounds drains ``sizes.drain_jobs`` freshly seeded no-op
jobs twice, directly and then through one PgBouncer in ``pool_mode =
transaction`` (``POOLER = "transaction"``), so other work on the machine
weighs on both alike; the figures are the medians of the rounds. ``HOSTS``
``runworkers`` processes of ``CONCURRENCY`` threads stand for as many hosts, as
in ``tests/e2e/test_many_hosts.py``; each round's jobs per worker (its share)
are in the details. CPU per job is split as in ``benchmarks.compare``
(workers, PostgreSQL backends, less the least the same workers spent starting
and exiting on an empty queue, measured in every round next to the drain) plus
PgBouncer's own.

PgBouncer is the test suite's (``tests.e2e.servers.PgBouncer``: Debian's
``pgbouncer`` on a free local port, trust auth for ``postgres``, ``POOL_SIZE``
server connections) in front of the benchmark's server. Where it cannot run
(no binary, a server elsewhere, another user) the run says why and goes on
without these figures.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass
from urllib.parse import urlsplit

from benchmarks import cpu, database, drain, workers
from benchmarks.compare import least, measured
from benchmarks.cpu import Split
from benchmarks.results import Result
from benchmarks.session import Session
from tests.e2e.servers import PgBouncer, pgbouncer_version

HOSTS = 4
CONCURRENCY = 8
#: Server connections PgBouncer opens at most, for all the workers together.
POOL_SIZE = 10

DIRECT = drain.Drain("pooler_drain_direct", HOSTS, CONCURRENCY, raw="raw_claim_complete_b8")
POOLED = drain.Drain(
    "pooler_drain_pgbouncer", HOSTS, CONCURRENCY, raw="pooler_drain_direct", pooled=True
)


def missing(url: str) -> str | None:
    """Why ``--pooler`` cannot run against ``url`` here, or None."""
    parts = urlsplit(url)
    if parts.hostname not in (None, "127.0.0.1", "localhost") or parts.username != "postgres":
        return (
            "--pooler: the PgBouncer it starts pools 127.0.0.1 as the 'postgres' user, but the "
            f"database is {parts.username}@{parts.hostname}; the comparison is skipped"
        )
    if why := PgBouncer.missing():
        return f"--pooler: {why}; the comparison is skipped"
    return None


@dataclass(frozen=True)
class Round:
    """One drain: its result, the CPU of workers and backends, PgBouncer's, jobs per worker."""

    result: Result
    split: Split
    pgbouncer: float
    shares: dict[str, int]


def run(session: Session) -> None:
    """Drain directly and through PgBouncer in turn, ``sizes.rounds`` times; add the medians."""
    parts = urlsplit(session.url)
    bouncer = PgBouncer.start(upstream_port=parts.port or 5432, pool_size=POOL_SIZE)
    try:
        urls = {DIRECT: session.url, POOLED: bouncer.url(parts.path.lstrip("/"))}
        startups: dict[drain.Drain, list[Round]] = defaultdict(list)
        drained: dict[drain.Drain, list[Round]] = defaultdict(list)
        for _ in range(session.sizes.rounds):
            for how, url in urls.items():
                startups[how].append(on_empty_queue(session, how, url, bouncer))
                drained[how].append(drain_once(session, how, url, bouncer))
    finally:
        bouncer.stop()
    rounds: dict[drain.Drain, list[Round]] = {}
    for how, drains in drained.items():
        split = least([empty.split for empty in startups[how]])
        pgbouncer = min(empty.pgbouncer for empty in startups[how])
        rounds[how] = [
            dataclasses.replace(one, split=one.split - split, pgbouncer=one.pgbouncer - pgbouncer)
            for one in drains
        ]
    version = ".".join(map(str, pgbouncer_version()))
    labels = {
        DIRECT: f"pooler: {DIRECT.label.removeprefix('drain: ')}, direct",
        POOLED: f"pooler: {POOLED.label.removeprefix('drain: ')}, through PgBouncer "
        f"{version} (transaction pool of {POOL_SIZE})",
    }
    for how, measured_rounds in rounds.items():
        add(session, how, labels[how], measured_rounds)


def drain_once(session: Session, how: drain.Drain, url: str, bouncer: PgBouncer) -> Round:
    """One drain of freshly seeded jobs by ``how``'s workers through ``url``."""
    ids = drain.seeded(session, session.sizes.drain_jobs)
    deadline = session.sizes.drain_deadline
    before = pgbouncer_cpu(bouncer)
    result, split = measured(
        session, functools.partial(drain.measure, session, how, ids, deadline, url)
    )
    pgbouncer = pgbouncer_cpu(bouncer) - before
    if result.details["succeeded"] != ids.count:
        raise RuntimeError(f"runworkers ran {result.details['succeeded']} of {ids.count} jobs")
    return Round(result, split, pgbouncer, database.shares(session.harness, ids))


def on_empty_queue(session: Session, how: drain.Drain, url: str, bouncer: PgBouncer) -> Round:
    """What ``how``'s workers spend starting and exiting with nothing to do (its CPU)."""
    database.reset(session.harness)
    env = workers.environment(url, how.conn_max_age, how.settings)
    args = ["--burst", "--concurrency", str(how.concurrency)]
    logs = session.logs / f"{how.key}_empty"

    def start_and_exit() -> None:
        with workers.started(how.processes, args, env, logs) as running:
            if not workers.wait_all(running, time.monotonic() + session.sizes.drain_deadline):
                raise workers.WorkerFailed("runworkers --burst did not exit on an empty queue")

    before = pgbouncer_cpu(bouncer)
    _, split = measured(session, start_and_exit)
    empty = Result(f"{how.key}_empty", "", 0.0, "jobs/s")
    return Round(empty, split, pgbouncer_cpu(bouncer) - before, {})


def pgbouncer_cpu(bouncer: PgBouncer) -> float:
    """CPU seconds the PgBouncer process has spent so far."""
    found = cpu.process_cpu(bouncer.pid())
    if found is None:
        raise LookupError(f"PgBouncer (pid {bouncer.pid()}) is not running")
    return found[1]


def add(session: Session, how: drain.Drain, label: str, rounds: list[Round]) -> None:
    """The median rate of ``how``'s rounds and its median CPU per job, by who spent it."""
    count = session.sizes.drain_jobs
    rates = [drained.result.value for drained in rounds]
    details = {"rounds": rates, "shares_rounds": [drained.shares for drained in rounds]}
    session.results.add(
        Result(how.key, label, statistics.median(rates), "jobs/s", how.raw, count, details)
    )
    sides = {
        "worker": [drained.split.worker for drained in rounds],
        "postgres": [drained.split.postgres for drained in rounds],
    }
    if how.pooled:
        sides["pgbouncer"] = [drained.pgbouncer for drained in rounds]
    for side, seconds in sides.items():
        per_job = [value / count * 1e6 for value in seconds]
        session.results.add(
            Result(
                f"{how.key.replace('_drain_', '_cpu_')}_{side}",
                f"{label}: {side} CPU per job",
                statistics.median(per_job),
                "µs/job",
                n=count,
                details={"rounds": per_job},
            )
        )
