"""``async def`` tasks under our own ``@task`` (``tests/integration/test_serial.py``).

They reach the database only through Django's async ORM methods, which run
each query on the thread that runs the job, so on that thread's connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

from django_dbqueue import JobContext, task
from django_dbqueue.models import Job
from tests.jobs.gates import gate_opens
from tests.testapp.models import Gate


@task
async def add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task
async def naps(seconds: float) -> float:
    """Sleep on the event loop; return how long the loop says it slept."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.sleep(seconds)
    return loop.time() - started


@task(takes_context=True)
async def reports_context(context: JobContext, label: str) -> dict[str, Any]:
    return {"label": label, "job_id": context.job_id, "attempt": context.attempt}


@task
async def counts_jobs_of_queue(queue: str) -> int:
    count: int = await Job.objects.filter(queue=queue).acount()
    return count


@task(max_attempts=2)
async def uses_the_sync_orm() -> None:
    """Wrong on purpose: a blocking query inside the event loop."""
    Job.objects.count()


@task(max_attempts=2)
async def fails(message: str) -> None:
    await asyncio.sleep(0)
    raise ValueError(message)


@task(max_attempts=1)
async def rendezvous(mine: str, theirs: str, wait: float) -> str:
    """Open gate ``mine``, then wait up to ``wait`` seconds for gate ``theirs``.

    Two of these naming each other's gates succeed only if both run at once;
    otherwise the first one raises ``TimeoutError``. The gates must exist:
    opening one is a single UPDATE, which SQLite lets wait for its lock (a
    read-then-write transaction there fails at once when another one reads).
    """
    await Gate.objects.filter(name=mine).aupdate(is_open=True)
    await gate_opens(theirs, wait, every=0.01)
    return mine
