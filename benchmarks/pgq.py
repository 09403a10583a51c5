"""pgqueuer, the queue the side-by-side benchmarks compare with (``--compare pgqueuer``).

Needs the ``bench`` extra (``pgqueuer`` and ``asyncpg``, its fastest driver).
The harness installs pgqueuer's schema and seeds its no-op jobs with
``setup`` and ``seed``, and times its enqueue with ``enqueue_each`` and
``enqueue_bulk``. ``python -m benchmarks.pgq URL`` is one worker process: it
drains the ``noop`` entrypoint in pgqueuer's ``drain`` mode (exit once the
queue is empty) over one asyncpg connection, then prints one JSON line: how
many jobs it ran, when (``time.time()``) it started the first, and when
``QueueManager.run`` returned, after its buffered completions were written.
With ``--pickup`` it runs pgqueuer's default continuous mode instead and
prints one line per job as it starts it: its pickup latency by the database
clock (``updated``, set by the claim, minus ``created``, set by the insert).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import asyncpg
from pgqueuer import Job, Queries, QueueManager
from pgqueuer.types import QueueExecutionMode

ENTRYPOINT = "noop"
#: Enqueues before an enqueue figure is timed (connection warm, statements prepared).
WARM_UP = 50
#: pgqueuer's best drain on 2 cores in the issue's measurements: batch 50, 2 processes.
BATCH_SIZE = 50


def setup(url: str) -> None:
    """Install pgqueuer's tables and functions in the database at ``url``, unless there."""

    async def install(queries: Queries) -> None:
        if not await queries.has_table(queries.qbe.settings.queue_table):
            await queries.install()

    asyncio.run(_with_queries(url, install))


def seed(url: str, count: int) -> None:
    """Empty pgqueuer's queue and log, then enqueue ``count`` no-op jobs in one bulk call."""

    async def refill(queries: Queries) -> None:
        await queries.clear_queue()
        await queries.clear_queue_log()
        if count:
            await queries.enqueue([ENTRYPOINT] * count, [None] * count, [0] * count)

    asyncio.run(_with_queries(url, refill))


async def _with_queries(url: str, action: Any) -> Any:
    connection = await asyncpg.connect(url)
    try:
        return await action(Queries.from_asyncpg_connection(connection))
    finally:
        await connection.close()


def enqueue_each(url: str, count: int) -> float:
    """Seconds ``count`` single-job ``Queries.enqueue`` calls take, each its own transaction.

    Over one asyncpg connection, after a warm-up of ``WARM_UP`` calls (its
    statements prepared), as a pgqueuer producer would run them.
    """

    async def each(queries: Queries) -> float:
        for _ in range(WARM_UP):
            await queries.enqueue(ENTRYPOINT, None, 0)
        started = time.perf_counter()
        for _ in range(count):
            await queries.enqueue(ENTRYPOINT, None, 0)
        return time.perf_counter() - started

    return float(asyncio.run(_with_queries(url, each)))


def enqueue_bulk(url: str, count: int, per_call: int) -> float:
    """Seconds ``count`` jobs take as batch ``Queries.enqueue`` calls of ``per_call`` jobs."""
    batch = ([ENTRYPOINT] * per_call, [None] * per_call, [0] * per_call)

    async def bulk(queries: Queries) -> float:
        await queries.enqueue(*batch)
        started = time.perf_counter()
        for _ in range(count // per_call):
            await queries.enqueue(*batch)
        return time.perf_counter() - started

    return float(asyncio.run(_with_queries(url, bulk)))


async def drain(url: str, batch_size: int) -> dict[str, float | int | None]:
    """Run every due ``noop`` job, then return what this process ran and when."""
    connection = await asyncpg.connect(url)
    manager = QueueManager(Queries.from_asyncpg_connection(connection))
    ran: dict[str, float | int | None] = {"jobs": 0, "first": None, "end": None}

    @manager.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        if ran["first"] is None:
            ran["first"] = time.time()
        ran["jobs"] = int(ran["jobs"] or 0) + 1

    try:
        await manager.run(batch_size=batch_size, mode=QueueExecutionMode.drain)
    finally:
        ran["end"] = time.time()
        await connection.close()
    return ran


async def pickup(url: str) -> None:
    """Run ``noop`` jobs as they come, with pgqueuer's defaults, until killed.

    Prints each job's pickup latency in milliseconds, one line per job as it
    starts it; a job enqueued before the worker listens is found by its first dequeue.
    """
    connection = await asyncpg.connect(url)
    manager = QueueManager(Queries.from_asyncpg_connection(connection))

    @manager.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        print(f"{(job.updated - job.created).total_seconds() * 1000}", flush=True)

    await manager.run()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pgq")
    parser.add_argument("url")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument("--pickup", action="store_true", help="Run jobs as they come, forever.")
    args = parser.parse_args()
    if args.pickup:
        asyncio.run(pickup(args.url))
        return
    print(json.dumps(asyncio.run(drain(args.url, args.batch_size))), flush=True)


if __name__ == "__main__":
    main()
