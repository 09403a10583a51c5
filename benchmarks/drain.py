"""(b) and (d): ``runworkers --burst`` draining no-op jobs, (e) the raw claim/complete ceiling,
and (f) a drain of jobs that take a while.

A drain's rate is the jobs that succeeded over the database-clock span from
the first claim to the last completion, so process start-up is not counted.
Jobs are seeded before the workers start; ``VACUUM (ANALYZE)`` settles the
table first. A drain past its deadline is stopped (SIGTERM) and measured over
what it finished (``cut_short`` in the details).
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks import database, raw, workers
from benchmarks.database import Ids
from benchmarks.results import Result
from benchmarks.session import Session
from benchmarks.timing import timed

RAW_BATCHES = (1, 8, 50)


@dataclass(frozen=True)
class Drain:
    """Who drains: ``processes`` workers of ``concurrency`` threads, with ``CONN_MAX_AGE``."""

    key: str
    processes: int
    concurrency: int
    raw: str = "raw_claim_complete_b50"
    conn_max_age: str = "0"
    #: ``WORKER_SYNCHRONOUS_COMMIT``: False commits the workers' transitions asynchronously.
    synchronous_commit: bool = True
    #: Run ``sizes.rounds`` times (interleaved with the other repeated ones), keep the best.
    repeated: bool = False
    #: One ``runworkers --processes N`` command instead of ``processes`` separate commands.
    one_command: bool = False
    #: Through a transaction-mode pool (``POOLER = "transaction"``; ``benchmarks.pooler``).
    pooled: bool = False
    #: ``DBQUEUE["MIDDLEWARE"]`` of the workers (``benchmarks.tracing``).
    middleware: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        setting = "" if self.conn_max_age == "0" else f", CONN_MAX_AGE={self.conn_max_age}"
        if not self.synchronous_commit:
            setting += ", WORKER_SYNCHRONOUS_COMMIT=False"
        processes = f"{self.processes} process{'es' if self.processes > 1 else ''}"
        threads = f"{self.concurrency} thread{'s' if self.concurrency > 1 else ''}"
        command = f", one command (--processes {self.processes})" if self.one_command else ""
        return f"drain: {processes} x {threads}{setting}{command}"

    @property
    def settings(self) -> dict[str, object]:
        """The ``DBQUEUE`` entries this drain sets for its workers."""
        settings: dict[str, object] = {"POOLER": "transaction"} if self.pooled else {}
        if not self.synchronous_commit:
            settings["WORKER_SYNCHRONOUS_COMMIT"] = False
        if self.middleware:
            settings["MIDDLEWARE"] = list(self.middleware)
        return settings


#: The 1x8 drains with and without persistent connections alternate, best of several
#: rounds each, so a 5 % difference between them is not just other work on the machine.
DRAINS = (
    Drain("drain_1x1", 1, 1, raw="raw_claim_complete_b1"),
    Drain("drain_1x8", 1, 8, raw="raw_claim_complete_b8", repeated=True),
    Drain(
        "drain_1x8_persistent",
        1,
        8,
        raw="raw_claim_complete_b8",
        conn_max_age="None",
        repeated=True,
    ),
    Drain("drain_1x32", 1, 32, repeated=True),
    Drain("drain_2x8", 2, 8, raw="raw_claim_complete_b8"),
    Drain("drain_2x32", 2, 32, repeated=True),
    Drain("drain_2x32_one_command", 2, 32, repeated=True, one_command=True),
    Drain("drain_1x32_async_commit", 1, 32, synchronous_commit=False, repeated=True),
)


def measure(
    session: Session, drain: Drain, ids: Ids, deadline: float, url: str | None = None
) -> Result:
    """Run ``drain``'s workers with ``--burst`` over the seeded ``ids``; their rate.

    The workers reach the database at ``url`` (a pool in front of it, say), or the session's.
    """
    env = workers.environment(url or session.url, drain.conn_max_age, drain.settings)
    args = ["--burst", "--concurrency", str(drain.concurrency)]
    commands = drain.processes
    if drain.one_command:
        args, commands = [*args, "--processes", str(drain.processes)], 1
    started = time.monotonic()
    with workers.started(commands, args, env, session.logs / drain.key) as running:
        cut_short = not workers.wait_all(running, started + deadline)
        if cut_short:
            workers.stop_all(running)
    wall = time.monotonic() - started
    span = database.span(session.harness, ids)
    details = {
        "jobs": ids.count,
        "succeeded": span.succeeded,
        "seconds_in_database": span.seconds,
        "wall_seconds_with_startup": wall,
        "first_claim_skew_seconds": span.start_skew,
        "cut_short": cut_short,
    }
    figure = span.succeeded / span.seconds if span.seconds else 0.0
    return Result(drain.key, drain.label, figure, "jobs/s", drain.raw, ids.count, details)


def seeded(session: Session, count: int) -> Ids:
    """An emptied table with ``count`` ready no-op jobs, vacuumed and analysed."""
    database.reset(session.harness)
    ids = database.seed(session.harness, count)
    database.vacuum(session.harness)
    return ids


def run_raw(session: Session) -> None:
    """(e) The claim/complete ceiling at batch 1, 8 and 50, and at 50 with the server's JIT.

    A drain's ceiling is the batch its claims can reach: one job at concurrency
    1, eight at concurrency 8, and batch 50 for concurrency 32.
    """
    count = session.sizes.raw_jobs
    runs = [(f"raw_claim_complete_b{batch}", batch, False) for batch in RAW_BATCHES]
    runs.append(("raw_claim_complete_b50_server_jit", 50, True))
    for key, batch, jit in runs:
        seeded(session, count)
        with raw.connect(session.url, jit=jit) as conn:
            done, seconds = timed(functools.partial(raw.claim_and_complete, conn, batch))
        if done != count:
            raise RuntimeError(f"the raw drain ran {done} of {count} jobs")
        label = f"raw: claim+complete SQL, batch {batch}{', server JIT' if jit else ''}"
        session.results.add(Result(key, label, done / seconds, "jobs/s", n=count))


def run(session: Session) -> None:
    """(b) Every drain configuration on an otherwise empty table."""
    rounds: dict[str, list[Result]] = defaultdict(list)
    for number in range(session.sizes.rounds):
        for drain in DRAINS:
            if number == 0 or drain.repeated:
                ids = seeded(session, session.sizes.drain_jobs)
                rounds[drain.key].append(measure(session, drain, ids, session.sizes.drain_deadline))
    for results in rounds.values():
        best = max(results, key=lambda result: result.value)
        figures = [result.value for result in results]
        session.results.add(dataclasses.replace(best, details={**best.details, "rounds": figures}))


def run_backlog(session: Session) -> None:
    """(d) The 1x8 drain of ready jobs among many finished ones (the table of a busy site)."""
    sizes = session.sizes
    drain = Drain("drain_backlog", 1, 8, raw="raw_claim_complete_b8")
    deadline = sizes.long_drain_deadline
    result = among_finished(session, drain, sizes.backlog_finished, sizes.backlog_ready, deadline)
    session.results.add(result)


def among_finished(
    session: Session,
    drain: Drain,
    finished: int,
    ready: int,
    deadline: float,
    after_seeding: Callable[[], None] | None = None,
) -> Result:
    """``drain`` of ``ready`` jobs seeded after ``finished`` succeeded ones, on an emptied
    table, stopped past ``deadline`` seconds; ``after_seeding`` runs once both are seeded
    and the table vacuumed and analyzed.

    Every drained job leaves a dead entry in the ready index until a vacuum removes
    it, so whether the server's autovacuum runs shapes the figure (migration 0008):
    the label says the server's vacuum settings, the details how often autovacuum ran
    and how the rate moved over the drain.
    """
    database.reset(session.harness)
    if finished:
        database.seed(session.harness, finished, succeeded=True)
    ids = database.seed(session.harness, ready)
    database.vacuum(session.harness)
    if after_seeding is not None:
        after_seeding()
    vacuumed_before = database.autovacuums(session.harness)
    result = measure(session, drain, ids, deadline)
    (autovacuum,) = database.one(session.harness, "SHOW autovacuum")
    (naptime,) = database.one(session.harness, "SHOW autovacuum_naptime")
    vacuuming = f"autovacuum {autovacuum}" + (f" (naptime {naptime})" if autovacuum == "on" else "")
    among = f"among {finished:,} finished rows" if finished else "on an emptied table"
    label = f"{drain.label}, {ready:,} jobs {among}, {vacuuming}"
    details = {
        **result.details,
        "finished_rows": finished,
        "autovacuum": autovacuum,
        "autovacuum_naptime": naptime,
        "autovacuums_during_drain": database.autovacuums(session.harness) - vacuumed_before,
        "jobs_per_second_by_quarter": database.rate_by_quarter(session.harness, ids),
    }
    return dataclasses.replace(result, label=label, details=details)


def run_beside_running(session: Session) -> None:
    """(g) The 1 x 32 drain while other jobs run on another worker, read against the drain alone.

    The other worker's jobs (``sizes.running_elsewhere``) start running after the table was
    analysed with every job ready, as on a quiet table whose workers then get busy: the
    statistics say few jobs run. The drain's completions name their jobs by id, so what
    runs elsewhere should cost them nothing.
    """
    count = session.sizes.running_elsewhere
    database.reset(session.harness)
    elsewhere = database.seed(session.harness, count)
    ids = database.seed(session.harness, session.sizes.drain_jobs)
    database.vacuum(session.harness)
    database.run_elsewhere(session.harness, elsewhere)
    drain = Drain("drain_beside_running", 1, 32)
    result = measure(session, drain, ids, session.sizes.drain_deadline)
    label = f"{drain.label}, beside {count:,} jobs running on another worker"
    details = {**result.details, "running_elsewhere": count}
    session.results.add(dataclasses.replace(result, label=label, details=details))


#: The run time of each slow job, seconds: evenly spread, 100 ms on average.
SLOW_JOB_SECONDS = (0.05, 0.15)


def run_slow_jobs(session: Session) -> None:
    """(f) 1 x 32 threads on jobs of 50-150 ms: how near the rate comes to every slot busy.

    The ideal is 32 jobs per mean run time (320 jobs/s). What falls short is
    slots left free: waiting for the claimer, or for a claim's round trip.
    """
    count = session.sizes.slow_jobs
    database.reset(session.harness)
    ids = database.seed(session.harness, count)
    database.slow_down(session.harness, ids, *SLOW_JOB_SECONDS)
    database.vacuum(session.harness)
    drain = Drain("drain_slow_jobs", 1, 32)
    ideal = drain.concurrency / statistics.mean(SLOW_JOB_SECONDS)
    result = measure(session, drain, ids, session.sizes.long_drain_deadline)
    label = f"{drain.label}, {count:,} jobs of 50-150 ms (every slot busy: {ideal:.0f} jobs/s)"
    details = {**result.details, "ideal_jobs_per_second": ideal, "of_ideal": result.value / ideal}
    session.results.add(dataclasses.replace(result, label=label, raw=None, details=details))
