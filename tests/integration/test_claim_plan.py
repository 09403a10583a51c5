"""The claim stays on the ready index at any backlog size (PostgreSQL EXPLAIN)."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from django_dbqueue import sql

BACKLOG = 100_000


@pytest.fixture
def big_backlog() -> None:
    """100k ready jobs over three queues and 100k finished ones, with fresh statistics."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at,
                attempts, max_attempts, lease_token, lease_seconds, created_at, finished_at,
                last_error_code, last_error, errors)
            SELECT (ARRAY['default', 'mail', 'reports'])[1 + n %% 3], 'tests.tasks.noop',
                '[]', '{}', CASE WHEN n %% 2 = 0 THEN 'ready' ELSE 'succeeded' END, n %% 5,
                now() - interval '1 minute', CASE WHEN n %% 2 = 0 THEN 0 ELSE 1 END, 5,
                CASE WHEN n %% 2 = 0 THEN 0 ELSE 1 END, 60, now(),
                CASE WHEN n %% 2 = 0 THEN NULL ELSE now() END, '', '', '[]'
            FROM generate_series(1, %s) AS n
            """,
            [2 * BACKLOG],
        )
        cursor.execute("ANALYZE dbqueue_job")


def claim_plan(queues: list[str] | None) -> str:
    statement = sql.statements("postgresql")["claim"]
    params = {"queues": queues, "worker_id": "w1", "limit": 10, "turn": 0}
    adapted = {key: sql.adapt(connection, value) for key, value in params.items()}
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement, adapted)
        (plan,) = cursor.fetchone()
    return json.dumps(plan)


def scanned_relations(plan: str) -> set[str]:
    """Every relation the plan reads from the job table, index or table."""
    nodes: list[dict[str, object]] = []

    def walk(node: dict[str, object]) -> None:
        nodes.append(node)
        for child in node.get("Plans", []):  # type: ignore[attr-defined]  # JSON plan nodes.
            walk(child)

    walk(json.loads(plan)[0]["Plan"])
    return {
        f"{node['Node Type']}:{node.get('Index Name', node.get('Relation Name'))}"
        for node in nodes
        if node.get("Relation Name") == "dbqueue_job"
    }


@pytest.mark.postgresql
@pytest.mark.django_db
@pytest.mark.parametrize("queues", [["mail"], ["default", "mail"], None])
def test_claim_reads_ready_jobs_through_the_ready_index(
    big_backlog: None, queues: list[str] | None
) -> None:
    scans = scanned_relations(claim_plan(queues))
    assert "Index Scan:dbqueue_job_ready" in scans or "Index Only Scan:dbqueue_job_ready" in scans
    assert not any(scan.startswith(("Seq Scan", "Bitmap Heap Scan")) for scan in scans), scans
