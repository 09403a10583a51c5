"""Many hosts, one PgBouncer: four workers drain 20,000 jobs, each exactly once, fairly.

Each "host" is a ``runworkers`` process of its own, with a distinct
``--worker-id`` and a distinct ``application_name`` on its connections (in its
``DATABASE_URL``); network namespaces would show the database nothing more.
All four reach PostgreSQL through one PgBouncer in transaction mode
(``POOLER = "transaction"``). The task appends its job id to a file of its
worker's, so recording the executions costs the database nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Count

from django_dbqueue.models import Job, JobState
from tests.e2e.conftest import WorkerProcess, pooled_url
from tests.e2e.servers import PgBouncer
from tests.jobs.e2e_tasks import appended
from tests.waiting import wait_until

StartWorker = Callable[..., WorkerProcess]
e2e_db = pytest.mark.django_db(transaction=True)

HOSTS = 4
JOBS = 20_000
#: Threads per host: 4 x 8 slots keep two shared cores busy without thrashing them.
CONCURRENCY = 8
#: Server connections PgBouncer may open for all four hosts together.
POOL_SIZE = 10
#: Bound on the whole drain (it takes 10-25 s on a shared 2-core machine).
DRAIN_WAIT = 150


def application_names() -> set[str]:
    """The ``application_name`` of every other session on the test database now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT application_name FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return {name for (name,) in cursor.fetchall()}


def executions(ran: Path, host: str) -> list[tuple[int, int]]:
    """``(job id, attempt)`` of every execution ``host`` recorded, in its order."""
    path = ran / f"{host}.ran"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(int(job_id), int(attempt)) for job_id, attempt in map(str.split, lines)]


@pytest.mark.timeout(DRAIN_WAIT + 60)
@e2e_db
def test_four_hosts_through_one_pgbouncer_drain_20000_jobs_each_exactly_once_and_fairly(
    start_pgbouncer: Callable[..., PgBouncer], start_worker: StartWorker, tmp_path: Path
) -> None:
    bouncer = start_pgbouncer(pool_size=POOL_SIZE)
    ran = tmp_path / "ran"
    ran.mkdir()
    jobs = appended.enqueue_many([((), {"directory": str(ran)}) for _ in range(JOBS)])
    names = [f"host-{n}" for n in range(HOSTS)]
    wanted = {f"dbqueue-{name}" for name in names}

    started = time.monotonic()
    hosts = [
        start_worker(
            "--concurrency",
            str(CONCURRENCY),
            "--burst",
            "--worker-id",
            name,
            settings={"POOLER": "transaction"},
            env={"DATABASE_URL": pooled_url(bouncer, application_name=f"dbqueue-{name}")},
        )
        for name in names
    ]
    # PgBouncer gives each server connection the name of the client it serves at the moment.
    seen: set[str] = set()
    wait_until(
        lambda: seen.update(application_names()) or seen >= wanted, what=f"sessions named {wanted}"
    )
    for host in hosts:
        assert host.wait(DRAIN_WAIT) == 0, host.log()
    seconds = time.monotonic() - started

    ran_by = {name: executions(ran, name) for name in names}
    shares = {name: len(ran_by[name]) for name in names}
    summary = (
        f"{JOBS} jobs, {HOSTS} hosts x {CONCURRENCY} threads through one PgBouncer "
        f"(pool {POOL_SIZE}) in {seconds:.1f} s; shares {shares}"
    )
    print(summary)
    assert "login attempt" in bouncer.log()  # the hosts did come through the pool
    job_ids = [job_id for name in names for job_id, _ in ran_by[name]]
    assert sorted(job_ids) == [job.pk for job in jobs], summary  # each once, none lost
    assert {attempt for name in names for _, attempt in ran_by[name]} == {1}, summary
    settled = Job.objects.values_list("state", "attempts").annotate(n=Count("id"))
    assert {(state, attempts): n for state, attempts, n in settled} == {
        (JobState.SUCCEEDED, 1): JOBS
    }, summary
    # Fair: no host starved. A quarter each is the ideal; a quarter of that cannot flake.
    assert min(shares.values()) >= JOBS // (HOSTS * HOSTS), summary
