"""PostgreSQL vacuums the job table as a queue table: the ready index's dead head goes.

Every claimed job leaves a dead entry at the head of the ready index, which each
claim walks before it reaches a ready job. Migration 0008 has the table vacuumed
often and always with its indexes, also when the dead rows sit on under 2% of the
table's pages (where PostgreSQL 14+ skips the indexes by default).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction

from django_dbqueue import leases, sql
from tests import plans
from tests.integration.test_claim_plan import READY_INDEXES

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

#: Finished jobs of about 1.9 kB each (a long last_error kept in the row), four to a page:
#: a table of many pages, so the dead rows of ``DRAINED`` jobs sit on under 2% of them.
FINISHED = 40_000
DRAINED = 500
#: What the claim below asks for, as a worker of 8 threads would.
LIMIT = 8


def storage_parameters() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'dbqueue_job'")
        (options,) = cursor.fetchone()
    return dict(option.split("=", 1) for option in options or [])


def test_the_job_table_is_vacuumed_as_a_queue_table() -> None:
    assert storage_parameters() == {
        "autovacuum_vacuum_threshold": "1000",
        "autovacuum_vacuum_scale_factor": "0.005",
        "vacuum_index_cleanup": "on",
    }


@pytest.fixture
def no_autovacuum() -> Iterator[None]:
    """Autovacuum off for the job table while the test vacuums it itself."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE dbqueue_job SET (autovacuum_enabled = false)")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE dbqueue_job RESET (autovacuum_enabled)")


def seed_finished(count: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at,
                attempts, max_attempts, lease_token, lease_seconds, created_at, started_at,
                finished_at, last_worker_id, last_error_code, last_error, errors)
            SELECT 'default', 'tests.jobs.tasks.noop', '[]', '{}', 'succeeded', 0,
                now() - interval '1 hour', 2, 5, 2, 60, now() - interval '1 hour',
                now() - interval '1 hour', now() - interval '1 hour', 'w0', 'RETRY',
                repeat(md5(n::text), 50), '[]'
            FROM generate_series(1, %s) AS n
            """,
            [count],
        )


def seed_ready(count: int) -> None:
    from tests.jobs.tasks import noop

    noop.enqueue_many([((), {})] * count)


def drain(count: int) -> None:
    """Claim and complete ``count`` jobs through the protocol, as workers do."""
    done = 0
    while done < count:
        claimed = leases.claim(None, "w1", min(500, count - done))
        assert claimed
        assert leases.complete_many([(lease, None) for lease in claimed]).completed == {
            lease.job_id for lease in claimed
        }
        done += len(claimed)


def ready_index_pages_a_claim_reads() -> int:
    """Pages the claim reads through the ready index for ``LIMIT`` jobs, claiming none.

    From ``EXPLAIN (ANALYZE, BUFFERS)`` of the claim, rolled back; index-only
    scans count the table pages they visit too.
    """
    statement = sql.statements("postgresql")["claim"]
    params = leases.claim_params(None, "w2", LIMIT)
    adapted = {key: sql.adapt(connection, value) for key, value in params.items()}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, adapted)
        (plan,) = cursor.fetchone()
        transaction.set_rollback(True)
    scans: list[dict[str, Any]] = [
        node
        for node in plans.nodes(plan)
        if node.get("Index Name") in READY_INDEXES and node.get("Actual Loops", 0) > 0
    ]
    assert scans, plan
    return sum(node["Shared Hit Blocks"] + node["Shared Read Blocks"] for node in scans)


def run(statement: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement)


@pytest.mark.timeout(120)
def test_a_vacuum_clears_the_ready_index_of_drained_jobs_when_few_rows_are_dead(
    no_autovacuum: None,
) -> None:
    seed_finished(FINISHED)
    seed_ready(DRAINED + LIMIT)
    drain(DRAINED)
    drained = ready_index_pages_a_claim_reads()

    run("VACUUM dbqueue_job")
    vacuumed = ready_index_pages_a_claim_reads()
    for index in READY_INDEXES:
        run(f"REINDEX INDEX {index}")
    rebuilt = ready_index_pages_a_claim_reads()

    # The drained jobs' entries cost the claim pages (the scenario holds); after the vacuum
    # it reads what it reads on an index built afresh from the same rows.
    assert drained > rebuilt + 5, (drained, rebuilt)
    assert vacuumed <= rebuilt + 1, (drained, vacuumed, rebuilt)
