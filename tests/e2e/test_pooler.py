"""Through PgBouncer in transaction mode: enqueue, workers and what they leave behind.

Each test starts Debian's ``pgbouncer`` (``tests.e2e.servers.PgBouncer``) in
front of the test database; enqueue runs in a subprocess whose only database
is the pool, and workers reach the queue through it too.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.db.models import Count

from django_dbqueue.models import Job, JobState
from tests.e2e.conftest import ROOT, WorkerProcess, listening, pooled_url
from tests.e2e.servers import PgBouncer
from tests.jobs.e2e_tasks import recorded
from tests.testapp.models import Execution
from tests.waiting import wait_until

logger = logging.getLogger(__name__)

StartWorker = Callable[..., WorkerProcess]
POOLED = {"POOLER": "transaction"}

e2e_db = pytest.mark.django_db(transaction=True)


def run_through(url: str, code: str, settings: str = "{}") -> str:
    """Run ``code`` in a fresh Django process whose database is ``url``; its stdout."""
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "tests.e2e.settings",
        "DBQUEUE_OVERRIDES": settings,
        "PYTHONPATH": str(ROOT),
    }
    script = f"import django\ndjango.setup()\n{code}"
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


ENQUEUE_COMMITTED_AND_ROLLED_BACK = """
from django.db import transaction
from tests.jobs.e2e_tasks import recorded

with transaction.atomic():
    kept = recorded.enqueue(label="committed")
try:
    with transaction.atomic():
        lost = recorded.enqueue(label="rolled-back")
        print(lost.pk)
        raise RuntimeError("roll back")
except RuntimeError:
    pass
print(kept.pk)
"""


@e2e_db
def test_enqueue_inside_atomic_through_pgbouncer_commits_and_rolls_back_as_direct(
    pgbouncer: PgBouncer,
) -> None:
    lost, kept = map(
        int, run_through(pooled_url(pgbouncer), ENQUEUE_COMMITTED_AND_ROLLED_BACK).split()
    )

    assert "login attempt" in pgbouncer.log()  # The subprocess did come through the pool.
    assert Job.objects.filter(pk=kept, kwargs={"label": "committed"}).exists()
    assert not Job.objects.filter(pk=lost).exists()


def server_sessions(bouncer: PgBouncer) -> list[tuple[int, str, str]]:
    """``(backend pid, jit, synchronous_commit)`` of every server connection in the pool.

    As many fresh clients as the pool has server connections each hold a
    transaction open at once, so each sits on a server connection of its own.
    """
    with ExitStack() as stack:
        clients = [
            stack.enter_context(psycopg.connect(pooled_url(bouncer), sslmode="disable"))
            for _ in range(bouncer.pool_size)
        ]
        return [
            client.execute(
                "SELECT pg_backend_pid(), current_setting('jit'), "
                "current_setting('synchronous_commit')"
            ).fetchone()
            for client in clients
        ]


def direct_setting(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting(%s)", [name])
        return str(cursor.fetchone()[0])


@e2e_db
def test_workers_behind_a_transaction_pool_leave_no_session_settings_on_its_connections(
    pgbouncer: PgBouncer, start_worker: StartWorker
) -> None:
    recorded.enqueue_many([((), {"label": "pooled"}) for _ in range(200)])
    env = {"DATABASE_URL": pooled_url(pgbouncer)}
    workers = [
        start_worker("--concurrency", "4", "--burst", settings=POOLED, env=env) for _ in range(2)
    ]
    for worker in workers:
        assert worker.wait(90) == 0, worker.log()
    assert Execution.objects.filter(label="pooled", finished_at__isnull=False).count() == 200

    sessions = server_sessions(pgbouncer)

    assert len({pid for pid, _, _ in sessions}) == pgbouncer.pool_size
    server_jit = direct_setting("jit")
    assert [(jit, commit) for _, jit, commit in sessions] == [(server_jit, "on")] * len(sessions)
    assert "pooler=transaction: no session settings" in workers[0].log()


@e2e_db
def test_a_worker_asked_for_asynchronous_commit_behind_a_transaction_pool_does_not_start(
    pgbouncer: PgBouncer, start_worker: StartWorker
) -> None:
    worker = start_worker(
        "--burst",
        settings={**POOLED, "WORKER_SYNCHRONOUS_COMMIT": False},
        env={"DATABASE_URL": pooled_url(pgbouncer)},
    )

    assert worker.wait() != 0
    assert "dbqueue.E016" in worker.log()


def drain(start_worker: StartWorker, label: str, **options: Any) -> float:
    """Two burst workers drain the ``label`` jobs; the seconds they took."""
    started = time.monotonic()
    workers = [
        start_worker("--concurrency", "4", "--burst", "--worker-id", f"{label}-{n}", **options)
        for n in range(2)
    ]
    for worker in workers:
        assert worker.wait(300) == 0, worker.log()
    return time.monotonic() - started


def assert_each_ran_once(jobs: list[Job], label: str) -> None:
    ran = Execution.objects.filter(label=label)
    assert ran.count() == len(jobs)
    assert set(ran.values_list("job_id", flat=True)) == {job.pk for job in jobs}
    assert set(ran.values_list("attempt", flat=True)) == {1}
    assert not ran.filter(finished_at__isnull=True).exists()
    settled = Job.objects.filter(pk__in=[job.pk for job in jobs])
    assert settled.filter(state=JobState.SUCCEEDED, attempts=1, errors=[]).count() == len(jobs)


@pytest.mark.parametrize(
    ("max_prepared_statements", "dbqueue", "jobs"),
    [
        pytest.param(None, POOLED, 5000, id="max_prepared_statements-unset"),
        pytest.param(
            100, {**POOLED, "PREPARED_STATEMENTS": True}, 5000, id="max_prepared_statements-set"
        ),
        pytest.param(
            None,
            {**POOLED, "PREPARED_STATEMENTS": True},
            1000,
            id="unset-but-prepared-asked-for",
        ),
    ],
)
@e2e_db
def test_two_workers_through_pgbouncer_drain_their_jobs_each_once(
    start_pgbouncer: Callable[..., PgBouncer],
    start_worker: StartWorker,
    max_prepared_statements: int | None,
    dbqueue: dict[str, Any],
    jobs: int,
) -> None:
    """Each job runs once and no prepared-statement error reaches one, whatever PgBouncer keeps.

    Where statements are prepared but PgBouncer keeps none, 1,000 jobs across
    eight threads sharing ten server connections give them many chances to
    land where their statements are not. The rate through the pool against
    direct is a benchmark's (``python -m benchmarks --pooler``), not this test's.
    """
    bouncer = start_pgbouncer(pool_size=10, max_prepared_statements=max_prepared_statements)
    pooled_jobs = recorded.enqueue_many([((), {"label": "pooled"}) for _ in range(jobs)])
    pooled = drain(
        start_worker, "pooled", settings=dbqueue, env={"DATABASE_URL": pooled_url(bouncer)}
    )

    assert_each_ran_once(pooled_jobs, "pooled")
    assert not Job.objects.filter(state=JobState.RUNNING).exists()
    shares = dict(
        Execution.objects.filter(label="pooled")
        .values_list("worker_id")
        .annotate(n=Count("id"))
        .order_by("worker_id")
    )
    logger.info(f"through PgBouncer: {jobs} jobs in {pooled:.1f}s, shares {shares}")


ENQUEUE_ONE = """
from tests.jobs.e2e_tasks import recorded
print(recorded.enqueue(label="wake").pk)
"""


def pickup_seconds(job_id: int) -> float:
    """From the job's commit (``created_at``) to its task starting."""
    wait_until(
        lambda: Execution.objects.filter(job_id=job_id, finished_at__isnull=False).exists(),
        what=f"job {job_id} to run",
    )
    job = Job.objects.get(pk=job_id)
    return (Execution.objects.get(job_id=job_id).started_at - job.created_at).total_seconds()


@e2e_db
def test_behind_a_transaction_pool_without_listen_database_the_worker_polls_and_drains(
    pgbouncer: PgBouncer, start_worker: StartWorker
) -> None:
    channel = "pooled_wakeups"
    worker = start_worker(
        settings={**POOLED, "NOTIFY_CHANNEL": channel, "POLL_INTERVAL": 0.5},
        env={"DATABASE_URL": pooled_url(pgbouncer)},
    )
    worker.wait_for_log("no LISTEN through the transaction pool (no LISTEN_DATABASE): polling")

    jobs = recorded.enqueue_many([((), {"label": "polled"}) for _ in range(20)])
    wait_until(
        lambda: Execution.objects.filter(label="polled", finished_at__isnull=False).count() == 20,
        what="the 20 jobs to run by polling",
    )

    # A task's own row is written before the completer records its success: wait for that.
    ids = [job.pk for job in jobs]
    wait_until(
        lambda: (
            set(Job.objects.filter(pk__in=ids).values_list("state", flat=True))
            == {JobState.SUCCEEDED}
        ),
        what="the 20 jobs recorded succeeded",
    )
    assert not listening(channel)
    assert worker.log().count("polling every") == 1


@e2e_db
def test_with_listen_database_direct_a_job_enqueued_through_the_pool_is_picked_up_at_once(
    pgbouncer: PgBouncer, start_worker: StartWorker, worker_env: dict[str, str]
) -> None:
    channel = "direct_wakeups"
    # Polls 30 s apart: only a notification explains a pickup within a second.
    start_worker(
        settings={
            **POOLED,
            "LISTEN_DATABASE": "listen",
            "NOTIFY_CHANNEL": channel,
            "POLL_INTERVAL": 30,
        },
        env={
            "DATABASE_URL": pooled_url(pgbouncer),
            "LISTEN_DATABASE_URL": worker_env["DATABASE_URL"],
        },
    )
    wait_until(lambda: listening(channel), what="the worker listening directly")

    settings = json.dumps({"NOTIFY_CHANNEL": channel})
    pickups = [
        pickup_seconds(int(run_through(pooled_url(pgbouncer), ENQUEUE_ONE, settings)))
        for _ in range(5)
    ]
    logger.info(f"pickup through the pool, LISTEN direct: {[round(s, 3) for s in pickups]} s")

    assert statistics.median(pickups) < 1
