"""pgqueuer, the queue the side-by-side drain compares with (``--compare pgqueuer``).

Needs the ``bench`` extra (``pgqueuer`` and ``asyncpg``, its fastest driver).
The harness installs pgqueuer's schema and seeds its no-op jobs with
``setup`` and ``seed``; ``python -m benchmarks.pgq URL`` is one worker
process: it drains the ``noop`` entrypoint in pgqueuer's ``drain`` mode (exit
once the queue is empty) over one asyncpg connection, then prints one JSON
line: how many jobs it ran, when (``time.time()``) it started the first, and
when ``QueueManager.run`` returned, after its buffered completions were written.
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
#: pgqueuer's best drain on 2 cores in the issue's measurements: batch 50, 2 processes.
BATCH_SIZE = 50


def setup(url: str) -> None:
    """Install pgqueuer's tables and functions in the database at ``url``."""
    asyncio.run(_with_queries(url, lambda queries: queries.install()))


def seed(url: str, count: int) -> None:
    """Empty pgqueuer's queue and log, then enqueue ``count`` no-op jobs in one bulk call."""

    async def refill(queries: Queries) -> None:
        await queries.clear_queue()
        await queries.clear_queue_log()
        if count:
            await queries.enqueue([ENTRYPOINT] * count, [None] * count, [0] * count)

    asyncio.run(_with_queries(url, refill))


async def _with_queries(url: str, action: Any) -> None:
    connection = await asyncpg.connect(url)
    try:
        await action(Queries.from_asyncpg_connection(connection))
    finally:
        await connection.close()


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


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pgq")
    parser.add_argument("url")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(drain(args.url, args.batch_size))), flush=True)


if __name__ == "__main__":
    main()
