"""The connection budget a ``runworkers`` process prints is the most it holds (issue 14, test 5).

The worker's connections carry their own ``application_name`` (a query
parameter of its ``DATABASE_URL``), so ``pg_stat_activity`` counts exactly
them, listener included. Jobs block on files the test creates, not on the
database, so every job slot can be busy while no task code holds a connection.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection

from django_dbqueue.models import Job
from tests.e2e.conftest import WorkerProcess
from tests.jobs import e2e_tasks
from tests.waiting import wait_until

logger = logging.getLogger(__name__)

CONCURRENCY = 32
DATABASE_JOBS = 4
#: How long each count is watched: a few heartbeats (a third of the tasks' 3 s lease).
WATCH = 1.5


def connections_named(name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [name])
        (count,) = cursor.fetchone()
    return int(count)


def peak(name: str, seconds: float = WATCH) -> int:
    """The most connections named ``name`` seen over ``seconds``, sampled every 20 ms."""
    deadline = time.monotonic() + seconds
    most = 0
    while time.monotonic() < deadline:
        most = max(most, connections_named(name))
        time.sleep(0.02)
    return most


def printed_budget(worker: WorkerProcess) -> int:
    """The worker's own connections, as its start-up line says."""
    line = re.search(r"connection budget: (\d+) own .*", worker.log())
    assert line is not None, worker.log()
    logger.info("%s", line[0])
    return int(line[1])


def sockets_to(pid: int, port: int) -> int:
    """How many TCP connections process ``pid`` has open to ``port`` (Linux ``/proc``)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    count = 0
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            if int(fields[2].rpartition(":")[2], 16) == port and fields[9] in inodes:
                count += 1
    return count


def started(folder: Path) -> int:
    return len(list(folder.glob("started-*")))


@pytest.mark.django_db(transaction=True)
def test_a_worker_holds_no_more_connections_than_its_printed_budget(
    start_worker: Callable[..., WorkerProcess], worker_env: dict[str, str], tmp_path: Path
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("counts pg_stat_activity")
    name = f"dbqueue-budget-{uuid.uuid4().hex[:8]}"
    idle, busy = tmp_path / "idle", tmp_path / "busy"
    idle.mkdir()
    busy.mkdir()
    e2e_tasks.waits_without_the_database.enqueue_many([((str(idle),), {})] * CONCURRENCY)
    worker = start_worker(
        "--concurrency",
        str(CONCURRENCY),
        env={"DATABASE_URL": f"{worker_env['DATABASE_URL']}?application_name={name}"},
    )
    worker.wait_for_log("connection budget:")
    budget = printed_budget(worker)

    wait_until(lambda: started(idle) == CONCURRENCY, what=f"{CONCURRENCY} jobs running at once")
    without_database = peak(name)
    assert connections_named(name) >= 1  # the count sees the worker (its claimer at least)
    assert without_database <= budget

    (idle / "go").touch()
    wait_until(lambda: Job.objects.succeeded().count() == CONCURRENCY, what="the first jobs done")
    e2e_tasks.waits_holding_a_connection.enqueue_many([((str(busy),), {})] * DATABASE_JOBS)
    wait_until(lambda: started(busy) == DATABASE_JOBS, what="the database jobs running at once")
    with_database = peak(name)
    assert DATABASE_JOBS < with_database <= budget + DATABASE_JOBS

    (busy / "go").touch()
    wait_until(
        lambda: Job.objects.succeeded().count() == CONCURRENCY + DATABASE_JOBS,
        what="the database jobs done",
    )
    wait_until(
        lambda: connections_named(name) <= budget,
        timeout=10,
        what=f"the worker back within its budget of {budget}",
    )
    after = peak(name, 0.5)
    assert after <= budget
    logger.info(
        "budget=%s peak without database=%s with %s database jobs=%s after=%s",
        budget,
        without_database,
        DATABASE_JOBS,
        with_database,
        after,
    )
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.mark.django_db(transaction=True)
def test_with_processes_each_child_prints_its_budget_and_the_supervisor_holds_none(
    start_worker: Callable[..., WorkerProcess], worker_env: dict[str, str]
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("counts pg_stat_activity")
    name = f"dbqueue-budget-{uuid.uuid4().hex[:8]}"
    supervisor = start_worker(
        "--processes",
        "2",
        "--concurrency",
        "4",
        env={"DATABASE_URL": f"{worker_env['DATABASE_URL']}?application_name={name}"},
    )
    wait_until(
        lambda: supervisor.log().count("connection budget:") == 2, what="both children's budgets"
    )
    budget = printed_budget(supervisor)
    wait_until(lambda: connections_named(name) >= 2, what="both children connected")
    assert peak(name, 0.5) <= 2 * budget
    port = int(connection.settings_dict["PORT"] or 5432)
    assert sockets_to(os.getpid(), port) >= 1  # this test's own connection: the count sees one
    assert sockets_to(supervisor.pid, port) == 0
    supervisor.send(signal.SIGTERM)
    assert supervisor.wait() == 0
