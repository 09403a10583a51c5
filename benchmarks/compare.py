"""Side by side with pgqueuer (``--compare pgqueuer``): the same drain, interleaved rounds, medians.

Each round drains ``sizes.compare_jobs`` no-op jobs seven ways, one after the
other: ``runworkers --burst`` and pgqueuer each at two sizes, and the raw
claim/complete SQL at three: batch 50 on one connection, and at each of ours'
sizes (as many processes, the thread count as the batch: ``benchmarks.raw_drain``).
The sizes: ours at 2 processes x 32 threads (the issue's configuration) and x 256
threads; pgqueuer (asyncpg) at 2 processes with batch 50 (the issue's) and
batch 500. A claim fills free slots only, so our batch is the thread count, as
pgqueuer's is its ``batch_size``; on 2 cores both drain fastest with large
batches, so each is also measured there. Raw at ours' sizes is the ceiling of
any worker over the same statements at that size: the SQL with no job runner
around it. The figures are the medians of the rounds, so other work on the
machine weighs on all alike.

Rates are jobs over the span from the first job started to the last one done:
for ``runworkers`` by the database clock (as every drain here), for pgqueuer
from its workers' own clocks (first job run, ``run`` returned), for raw's
processes from theirs (first claim sent, last completion back). Each drain's
CPU is split into the worker processes' and the PostgreSQL backends' (see
``benchmarks.cpu``), per job; the CPU the same workers spend starting up and
exiting on an empty queue is measured in every round, next to the drain, and
its least value is subtracted (a start-up measured high would otherwise be
taken off a drain that started up cheaper, leaving less than its jobs cost).
"""

from __future__ import annotations

import functools
import importlib
import json
import selectors
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from importlib.metadata import version
from typing import Any, TypedDict, TypeVar

from benchmarks import cpu, database, drain, raw, workers
from benchmarks.cpu import Split
from benchmarks.results import Result
from benchmarks.session import Session
from benchmarks.timing import timed

T = TypeVar("T")

#: Ours at the issue's configuration, and with large batches (``_wide``).
OURS = {
    "ours": drain.Drain("compare_drain_ours", 2, 32, raw="compare_drain_raw"),
    "ours_wide": drain.Drain("compare_drain_ours_wide", 2, 256, raw="compare_drain_raw"),
}
PGQUEUER_PROCESSES = 2
#: pgqueuer's ``batch_size``: the issue's best (50), and large batches (``_wide``).
PGQUEUER_BATCHES = {"pgqueuer": 50, "pgqueuer_wide": 500}
RAW_BATCH = 50
#: Raw at each of ours' sizes (``raw_ours``, ``raw_ours_wide``): its processes, its threads
#: as the batch.
RAW_AS_OURS = {f"raw_{who}": drainer for who, drainer in OURS.items()}


def missing() -> str | None:
    """Why the comparison cannot run here (a module of the ``bench`` extra absent), or None."""
    for module in ("pgqueuer", "asyncpg"):
        try:
            importlib.import_module(module)
        except ImportError:
            return (
                f"--compare pgqueuer: {module} is not installed, so the comparison is skipped. "
                "Install the bench extra (pip install -e '.[bench]') to run it."
            )
    return None


def run(session: Session) -> None:
    """Drain with ours, pgqueuer and raw in turn, ``sizes.rounds`` times; add the medians."""
    from benchmarks import pgq  # the bench extra: imported only when comparing

    pgq.setup(session.url)
    on_empty_queue: dict[str, Callable[[], None]] = {
        **{who: functools.partial(ours_on_empty_queue, session, d) for who, d in OURS.items()},
        **{
            who: functools.partial(pgqueuer_on_empty_queue, session, b)
            for who, b in PGQUEUER_BATCHES.items()
        },
        **{
            who: functools.partial(raw_on_empty_queue, session, d) for who, d in RAW_AS_OURS.items()
        },
    }
    sides: dict[str, Callable[[], tuple[float, Split]]] = {
        **{who: functools.partial(ours, session, drainer) for who, drainer in OURS.items()},
        **{who: functools.partial(pgqueuer, session, b) for who, b in PGQUEUER_BATCHES.items()},
        **{who: functools.partial(raw_as, session, d) for who, d in RAW_AS_OURS.items()},
    }
    startups: dict[str, list[Split]] = defaultdict(list)
    drained: dict[str, list[tuple[float, Split]]] = defaultdict(list)
    for _ in range(session.sizes.rounds):
        for who, side in sides.items():
            startups[who].append(measured(session, on_empty_queue[who])[1])
            drained[who].append(side())
        drained["raw"].append(raw_drain(session))
    rounds = {
        who: [
            (rate, split - least(startups[who])) if who in startups else (rate, split)
            for rate, split in measured_rounds
        ]
        for who, measured_rounds in drained.items()
    }
    pgqueuer_name = f"compare: pgqueuer {version('pgqueuer')}, {PGQUEUER_PROCESSES} processes"
    labels = {
        **{
            who: f"compare: django_dbqueue, {drainer.label.removeprefix('drain: ')}"
            for who, drainer in OURS.items()
        },
        **{who: f"{pgqueuer_name}, batch {b}" for who, b in PGQUEUER_BATCHES.items()},
        "raw": f"compare: raw claim+complete SQL, batch {RAW_BATCH}, 1 connection",
        **{
            who: f"compare: raw claim+complete SQL, {d.processes} processes, batch "
            f"{d.concurrency} (ours' size, no job runner)"
            for who, d in RAW_AS_OURS.items()
        },
    }
    for who, measured_rounds in rounds.items():
        add(session, who, labels[who], measured_rounds)


def add(session: Session, who: str, label: str, rounds: list[tuple[float, Split]]) -> None:
    """The median rate and median CPU per job (worker, PostgreSQL) of ``who``'s rounds."""
    count = session.sizes.compare_jobs
    rates = [rate for rate, _ in rounds]
    per_job = [split.per_job_us(count) for _, split in rounds]
    raw_key = None if who.startswith("raw") else "compare_drain_raw"
    details = {"rounds": rates, "cpu_rounds_us": [[s.worker, s.postgres] for s in per_job]}
    session.results.add(
        Result(
            f"compare_drain_{who}",
            label,
            statistics.median(rates),
            "jobs/s",
            raw_key,
            count,
            details,
        )
    )
    for side in ("worker", "postgres", "total"):
        values = [getattr(split, side) for split in per_job]
        session.results.add(
            Result(
                f"compare_cpu_{who}_{side}",
                f"{label}: {side} CPU per job",
                statistics.median(values),
                "µs/job",
                None if who.startswith("raw") else f"compare_cpu_raw_{side}",
                count,
                {"rounds": values},
            )
        )


def measured(session: Session, action: Callable[[], T]) -> tuple[T, Split]:
    """What ``action`` returns, and the CPU its child processes and the backends spent."""
    with cpu.Backends(session.url, [session.harness.info.backend_pid]) as backends:
        before = cpu.children_cpu()
        value = action()
        worker = cpu.children_cpu() - before
    return value, Split(worker, backends.seconds)


def least(splits: list[Split]) -> Split:
    """The least worker and the least PostgreSQL CPU of ``splits``."""
    return Split(min(s.worker for s in splits), min(s.postgres for s in splits))


def ours(session: Session, drainer: drain.Drain) -> tuple[float, Split]:
    """One ``runworkers --burst`` drain of freshly seeded jobs: its rate and CPU."""
    ids = drain.seeded(session, session.sizes.compare_jobs)
    deadline = session.sizes.drain_deadline
    result, split = measured(
        session, functools.partial(drain.measure, session, drainer, ids, deadline)
    )
    if result.details["succeeded"] != ids.count:
        raise RuntimeError(f"runworkers ran {result.details['succeeded']} of {ids.count} jobs")
    return result.value, split


def ours_on_empty_queue(session: Session, drainer: drain.Drain) -> None:
    """Start and stop ``drainer``'s workers with nothing to do (their start-up CPU)."""
    database.reset(session.harness)
    env = workers.environment(session.url, drainer.conn_max_age, drainer.settings)
    args = ["--burst", "--concurrency", str(drainer.concurrency)]
    logs = session.logs / "compare_empty"
    with workers.started(drainer.processes, args, env, logs) as running:
        if not workers.wait_all(running, time.monotonic() + session.sizes.drain_deadline):
            raise workers.WorkerFailed("runworkers --burst did not exit on an empty queue")


def pgqueuer(session: Session, batch: int) -> tuple[float, Split]:
    """One pgqueuer drain of freshly seeded jobs in batches of ``batch``: its rate and CPU."""
    from benchmarks import pgq

    count = session.sizes.compare_jobs
    pgq.seed(session.url, count)
    session.harness.execute("VACUUM (ANALYZE) pgqueuer")
    reports, split = measured(session, functools.partial(pgqueuer_workers, session, batch))
    ran = sum(int(report["jobs"]) for report in reports)
    if ran != count:
        raise RuntimeError(f"pgqueuer ran {ran} of {count} jobs")
    started = min(float(report["first"]) for report in reports if report["first"] is not None)
    span = max(float(report["end"]) for report in reports) - started
    return count / span, split


def pgqueuer_on_empty_queue(session: Session, batch: int) -> None:
    """Start and stop pgqueuer's workers with nothing to do (their start-up CPU)."""
    from benchmarks import pgq

    pgq.seed(session.url, 0)
    pgqueuer_workers(session, batch)


def pgqueuer_workers(session: Session, batch: int) -> list[dict[str, object]]:
    """Run pgqueuer's worker processes until the queue is empty; what each reports."""
    command = [sys.executable, "-m", "benchmarks.pgq", session.url, "--batch-size", str(batch)]
    processes = [
        subprocess.Popen(command, cwd=workers.ROOT, stdout=subprocess.PIPE, text=True)
        for _ in range(PGQUEUER_PROCESSES)
    ]
    return reports(processes, "a pgqueuer worker", session.sizes.drain_deadline)


def reports(
    processes: list[subprocess.Popen[str]], who: str, deadline: float, *, together: bool = False
) -> list[Any]:
    """The JSON line each of ``processes`` prints before it exits (``deadline`` seconds each).

    With ``together``, each first prints a line once ready and waits for one on its stdin:
    all are told to go once all are ready. Raises ``WorkerFailed`` naming ``who`` when one
    fails; whatever still runs on the way out is killed.
    """
    try:
        if together:
            ready(processes, who, deadline)
            for process in processes:
                if process.stdin:
                    process.stdin.write("go\n")
                    process.stdin.flush()
        outputs = [p.communicate(timeout=deadline)[0] for p in processes]
    finally:
        for process in processes:
            process.kill()
            with process:  # Popen's exit closes its pipes, then waits.
                pass
    if any(process.returncode != 0 for process in processes):
        raise workers.WorkerFailed(f"{who} failed (its traceback is on stderr)")
    return [json.loads(output) for output in outputs]


def ready(processes: list[subprocess.Popen[str]], who: str, deadline: float) -> None:
    """Read the first line of every one of ``processes``, ``deadline`` seconds at most in all.

    Raises ``WorkerFailed`` naming ``who`` when one exits before its line, or when
    the deadline passes first (one that hangs while connecting, say).
    """
    end = time.monotonic() + deadline
    with selectors.DefaultSelector() as selector:
        for process in processes:
            if process.stdout is None:
                raise ValueError(f"{who} was started without stdout=PIPE")
            selector.register(process.stdout, selectors.EVENT_READ, data=process.stdout)
        while selector.get_map():
            events = selector.select(timeout=max(0.0, end - time.monotonic()))
            if not events:
                raise workers.WorkerFailed(f"{who} was not ready within {deadline:g} s")
            for key, _ in events:
                if not key.data.readline():
                    raise workers.WorkerFailed(f"{who} exited before it was ready")
                selector.unregister(key.fileobj)


class RawReport(TypedDict):
    """What a ``benchmarks.raw_drain`` process prints: jobs run, first claim sent, done."""

    jobs: int
    first: float
    end: float


def raw_as(session: Session, drainer: drain.Drain) -> tuple[float, Split]:
    """One raw drain of freshly seeded jobs at ``drainer``'s size: its rate and CPU."""
    count = session.sizes.compare_jobs
    drain.seeded(session, count)
    printed, split = measured(session, functools.partial(raw_processes, session, drainer))
    ran = sum(report["jobs"] for report in printed)
    if ran != count:
        raise RuntimeError(f"the raw processes ran {ran} of {count} jobs")
    span = max(report["end"] for report in printed) - min(report["first"] for report in printed)
    return count / span, split


def raw_on_empty_queue(session: Session, drainer: drain.Drain) -> None:
    """Start and stop raw's processes with nothing to do (their start-up CPU)."""
    database.reset(session.harness)
    raw_processes(session, drainer)


def raw_processes(session: Session, drainer: drain.Drain) -> list[RawReport]:
    """``benchmarks.raw_drain`` in ``drainer.processes`` processes, started together once all
    are connected, until none is due; what each reports."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.raw_drain",
        session.url,
        "--batch",
        str(drainer.concurrency),
    ]
    env = workers.environment(session.url, drainer.conn_max_age)
    processes = [
        subprocess.Popen(
            command,
            cwd=workers.ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(drainer.processes)
    ]
    return reports(processes, "a raw drain process", session.sizes.drain_deadline, together=True)


def raw_drain(session: Session) -> tuple[float, Split]:
    """The raw claim/complete loop in this thread: its rate and CPU (this thread, its backend)."""
    count = session.sizes.compare_jobs
    drain.seeded(session, count)
    with raw.connect(session.url) as conn:
        backend = conn.info.backend_pid
        backend_before, worker_before = backend_cpu(backend), time.thread_time()
        done, seconds = timed(functools.partial(raw.claim_and_complete, conn, RAW_BATCH))
        split = Split(time.thread_time() - worker_before, backend_cpu(backend) - backend_before)
    if done != count:
        raise RuntimeError(f"the raw drain ran {done} of {count} jobs")
    return done / seconds, split


def backend_cpu(pid: int) -> float:
    found = cpu.process_cpu(pid)
    if found is None:
        raise LookupError(f"PostgreSQL backend {pid} is not a process on this machine")
    return found[1]
