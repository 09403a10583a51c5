"""PostgreSQL's autovacuum clears the ready index of drained jobs on a table that keeps them.

Migration 0008 has the job table vacuumed once 1,000 rows and 0.5% of it are dead.
Here a worker drains 1,000 jobs from a table that also holds 40,000 finished
ones: 2,000 dead rows, a quarter of what PostgreSQL's defaults wait for (50 and
20% of the table, about 8,200 rows). The test runs its own cluster (``servers.PrivatePostgres``)
with autovacuum on and looking every second, whatever the suite's server does.
Autovacuum is held off the job table while the worker drains and let go once the
drain is done: on a loaded machine a slow drain let it vacuum halfway, after
which the rest of the drained jobs stayed below the threshold and their entries
in the index.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.conftest import WorkerProcess
from tests.e2e.servers import PrivatePostgres
from tests.e2e.test_server_faults import manage
from tests.waiting import WAIT, wait_until

pytestmark = pytest.mark.postgresql

FINISHED = 40_000
DRAINED = 1_000
#: Left ready after the drain, for the ordered read of the ready index.
LEFT = 8

SEED_FINISHED = f"""
INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at, attempts,
    max_attempts, lease_token, lease_seconds, created_at, started_at, finished_at,
    last_worker_id, last_error_code, last_error, errors)
SELECT 'default', 'tests.jobs.tasks.noop', '[]', '{{}}', 'succeeded', 0, now(), 1, 5, 1, 60,
    now(), now(), now(), 'w0', '', '', '[]'
FROM generate_series(1, {FINISHED})
"""
SEED_READY = f"""
INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at, attempts,
    max_attempts, lease_token, lease_seconds, created_at, last_worker_id, last_error_code,
    last_error, errors)
SELECT 'default', 'tests.jobs.tasks.noop', '[]', '{{}}', 'ready', 0, now(), 0, 5, 0, 60,
    now(), '', '', '', '[]'
FROM generate_series(1, {DRAINED + LEFT})
"""
#: The claim's order over the ready index, read alone (an index-only scan).
FIRST_READY = f"""
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT id FROM dbqueue_job WHERE state = 'ready' AND queue = 'default'
ORDER BY priority DESC, run_at, id LIMIT {LEFT}
"""
AUTOVACUUMS = "SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'dbqueue_job'"


@pytest.fixture
def autovacuuming_postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres.create(autovacuum="on", autovacuum_naptime="1")
    try:
        yield server
    finally:
        server.destroy()


def ready_index_pages(server: PrivatePostgres) -> int:
    """Pages of the ready index (and of the table, unless all-visible) the ``LEFT`` cost."""
    (plan,) = json.loads(server.psql("dbqueue", FIRST_READY))
    node: dict[str, Any] = plan["Plan"]
    while node.get("Index Name") != "dbqueue_job_ready":
        (node,) = node["Plans"]
    assert node["Actual Rows"] == LEFT, plan
    return int(node["Shared Hit Blocks"]) + int(node["Shared Read Blocks"])


@pytest.mark.timeout(WAIT * 4)
def test_autovacuum_clears_the_drained_head_of_the_ready_index(
    start_worker: Callable[..., WorkerProcess],
    worker_env: dict[str, str],
    autovacuuming_postgres: PrivatePostgres,
) -> None:
    server = autovacuuming_postgres
    server.psql("postgres", "CREATE DATABASE dbqueue")
    env = {**worker_env, "DATABASE_URL": server.url("dbqueue")}
    migrated = manage(env, "migrate", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr
    server.psql("dbqueue", SEED_FINISHED)
    server.psql("dbqueue", SEED_READY)
    server.psql("dbqueue", "VACUUM ANALYZE dbqueue_job")
    server.psql("dbqueue", "ALTER TABLE dbqueue_job SET (autovacuum_enabled = off)")
    before = int(server.psql("dbqueue", AUTOVACUUMS))

    worker = start_worker(
        "--concurrency", "8", "--max-jobs", str(DRAINED), env={"DATABASE_URL": env["DATABASE_URL"]}
    )
    assert worker.wait() == 0, worker.log()
    left = server.psql("dbqueue", "SELECT count(*) FROM dbqueue_job WHERE state = 'ready'")
    assert int(left) == LEFT
    # Let autovacuum go: migration 0008's thresholds (still set) decide when it runs.
    server.psql("dbqueue", "ALTER TABLE dbqueue_job RESET (autovacuum_enabled)")

    # The drained jobs' 1,000 entries take several index pages until a vacuum removes them;
    # then the ``LEFT`` ready jobs are read from the one or two pages left.
    wait_until(
        lambda: (
            int(server.psql("dbqueue", AUTOVACUUMS)) > before and ready_index_pages(server) <= 2
        ),
        timeout=WAIT * 2,
        what="an autovacuum of the job table that clears its ready index",
    )
