"""Faults of the server itself: restarts and crashes under load, a lost commit reply, and
renewals racing completions at thousands of jobs a second.

The restart test runs its own PostgreSQL cluster (``servers.PrivatePostgres``),
so crashing it never disturbs the rest of the suite; it skips, saying why,
where the suite cannot run one.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from django_dbqueue import Job, JobState
from tests.e2e.conftest import ROOT, WorkerProcess, open_gate
from tests.e2e.servers import LostReplyProxy, PrivatePostgres
from tests.jobs.faults_tasks import announced_after_gate, quick
from tests.testapp.models import Execution
from tests.waiting import WAIT, wait_until

StartWorker = Callable[..., WorkerProcess]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgresql]

#: Jobs drained across the restarts, and the workers and slots draining them.
JOBS = 2000
WORKERS = 2
SLOTS = 4
#: Short leases and retries, so jobs whose attempt a crash cut short come back quickly.
RESTART_SETTINGS = {
    "LEASE_SECONDS": 5,
    "RETRY_BASE": 0.2,
    "RETRY_FACTOR": 1,
    "RETRY_CAP": 0.2,
    "REAPER_INTERVAL": 0.5,
}


def with_port(url: str, port: int, query: str = "") -> str:
    parts = urlsplit(url)
    netloc = f"{parts.username}@{parts.hostname}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT * 2,
        check=False,
    )


def test_a_completion_whose_reply_was_lost_is_reported_succeeded_and_announced_once(
    start_worker: StartWorker, worker_env: dict[str, str]
) -> None:
    direct = urlsplit(worker_env["DATABASE_URL"])
    proxy = LostReplyProxy(direct.port or 5432)
    try:
        url = with_port(
            worker_env["DATABASE_URL"], proxy.port, "sslmode=disable&gssencmode=disable"
        )
        worker = start_worker("--concurrency", "1", env={"DATABASE_URL": url})
        job = announced_after_gate.enqueue("lost-reply")
        wait_until(lambda: Execution.objects.filter(job_id=job.pk).exists(), what="the job")
        proxy.arm(b"SET state = 'succeeded'")
        open_gate("lost-reply")
        assert proxy.cut.wait(WAIT), "the proxy never saw the completion commit"
        worker.wait_for_log(f"job id={job.pk} task=")
        worker.send(signal.SIGTERM)
        assert worker.wait() == 0
    finally:
        proxy.close()
    assert Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED
    announced = Execution.objects.filter(job_id=job.pk, label__startswith="job_finished")
    assert list(announced.values_list("label", flat=True)) == ["job_finished succeeded"]
    log = worker.log()
    assert re.search(rf"job id={job.pk} .* outcome=succeeded", log), log
    assert "job success writing failed (connection lost)" in log
    assert "lease lost" not in log
    assert "outcome=lease_lost" not in log


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres.create()
    try:
        yield server
    finally:
        server.destroy()


def succeeded(server: PrivatePostgres) -> int:
    return int(server.psql("dbqueue", "SELECT count(*) FROM dbqueue_job WHERE state = 'succeeded'"))


def test_server_restarts_and_crashes_lose_no_job_and_workers_reconnect(
    start_worker: StartWorker, worker_env: dict[str, str], private_postgres: PrivatePostgres
) -> None:
    server = private_postgres
    server.psql("postgres", "CREATE DATABASE dbqueue")
    env = {
        **worker_env,
        "DATABASE_URL": server.url("dbqueue"),
        "DBQUEUE_OVERRIDES": '{"LEASE_SECONDS": 5}',
    }
    assert manage(env, "migrate", "-v", "0").returncode == 0
    enqueue = (
        "from tests.jobs.faults_tasks import paced; "
        f"paced.enqueue_many([(('', 20), {{}})] * {JOBS})"
    )
    assert manage(env, "shell", "-c", enqueue).returncode == 0
    workers = [
        start_worker(
            "--concurrency",
            str(SLOTS),
            settings=RESTART_SETTINGS,
            env={"DATABASE_URL": env["DATABASE_URL"]},
        )
        for _ in range(WORKERS)
    ]

    wait_until(lambda: succeeded(server) >= JOBS // 4, what="a quarter drained")
    server.stop("fast")
    server.start()
    wait_until(lambda: succeeded(server) >= JOBS // 2, what="half drained after the restart")
    server.stop("immediate")  # a crash: no checkpoint, sessions cut mid-statement
    down = manage(
        env, "shell", "-c", "from tests.jobs.e2e_tasks import recorded; recorded.enqueue('x')"
    )
    server.start()
    # Both workers reconnect by themselves: the rest drains soon after the server is back.
    wait_until(lambda: succeeded(server) == JOBS, timeout=60, what="every job drained")

    assert down.returncode != 0
    assert "OperationalError" in down.stderr
    states = server.psql("dbqueue", "SELECT state, count(*) FROM dbqueue_job GROUP BY state")
    assert states.split() == [f"succeeded|{JOBS}"]
    runs = server.psql(
        "dbqueue",
        "SELECT count(*) FILTER (WHERE n > 1), count(*), max(n) FROM "
        "(SELECT job_id, count(*) AS n FROM testapp_execution GROUP BY job_id) per_job",
    )
    twice, ran, most = (int(value) for value in runs.split("|"))
    assert ran == JOBS
    # Only attempts a restart cut short run again: at most every slot of every worker, twice.
    assert twice <= 2 * WORKERS * SLOTS, f"{twice} jobs ran twice"
    assert most <= 3
    for worker in workers:
        assert worker.process.poll() is None, worker.log()
        assert "claim recovered after" in worker.log()
        assert "Exception in thread" not in worker.log()


def test_renewals_racing_completions_under_load_raise_no_false_alarm(
    start_worker: StartWorker,
) -> None:
    quick.enqueue_many([((), {})] * 10_000)
    # Two-second leases: the heartbeat renews every 0.7 s while thousands of successes land.
    workers = [start_worker("--concurrency", "32") for _ in range(2)]
    wait_until(
        lambda: Job.objects.filter(state=JobState.SUCCEEDED).count() == 10_000,
        what="10,000 jobs drained",
    )
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0
        log = worker.log()
        assert "lease lost" not in log
        assert re.search(r"worker stopped .* leases_lost=0", log), log
    assert not Job.objects.exclude(attempts=1).exists()
