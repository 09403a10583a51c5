"""The claim stays on the ready index at any backlog size; batches reach rows by primary key."""

from __future__ import annotations

import json
import re

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
            SELECT (ARRAY['default', 'mail', 'reports'])[1 + n %% 3], 'tests.jobs.tasks.noop',
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
    return statement_plan("claim", {"queues": queues, "worker_id": "w1", "limit": 10, "turn": 0})


def statement_plan(name: str, params: dict[str, object]) -> str:
    statement = sql.statements("postgresql")[name]
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
@pytest.mark.parametrize("name", ["claim", "claim_plain", "complete", "renew"])
def test_prepared_batches_reach_their_rows_by_primary_key_at_any_table_size(name: str) -> None:
    # A few thousand rows: where a join guessed from the batch size hashes the whole table.
    # First in the file: the backlog tests below leave the table bloated (rolled back).
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at,
                attempts, max_attempts, lease_token, lease_seconds, created_at, finished_at,
                last_error_code, last_error, errors)
            SELECT 'default', 'tests.jobs.tasks.noop', '[]', '{}', 'succeeded', 0, now(), 1, 5, 1,
                60, now(), now(), '', '', '[]'
            FROM generate_series(1, 3000)
            """
        )
        cursor.execute("ANALYZE dbqueue_job")
    scans = scanned_relations(generic_plan(name))
    assert "Index Scan:dbqueue_job_pkey" in scans
    assert not any(scan.startswith(("Seq Scan", "Bitmap Heap Scan")) for scan in scans), scans


@pytest.mark.postgresql
@pytest.mark.django_db
@pytest.mark.parametrize("queues", [["mail"], ["default", "mail"], None])
def test_claim_reads_ready_jobs_through_the_ready_index(
    big_backlog: None, queues: list[str] | None
) -> None:
    scans = scanned_relations(claim_plan(queues))
    assert "Index Scan:dbqueue_job_ready" in scans or "Index Only Scan:dbqueue_job_ready" in scans
    assert not any(scan.startswith(("Seq Scan", "Bitmap Heap Scan")) for scan in scans), scans


@pytest.mark.postgresql
@pytest.mark.django_db
@pytest.mark.parametrize("prepared", [False, True])
@pytest.mark.parametrize("queue", ["mail", None])
def test_plain_claim_reads_the_ready_index_and_probes_serial_keys_by_their_index(
    big_backlog: None, queue: str | None, prepared: bool
) -> None:
    params = {"queue": queue, "worker_id": "w1", "limit": 10}
    explain = generic_plan if prepared else statement_plan
    plan = explain("claim_plain", params)
    scans = scanned_relations(plan)
    assert "Index Scan:dbqueue_job_ready" in scans, scans
    assert any(scan.endswith(":dbqueue_job_serial_active") for scan in scans), scans
    assert not any(scan.startswith(("Seq Scan", "Bitmap Heap Scan")) for scan in scans), scans
    assert '"Sort"' not in plan, "the ready index gives the claim order: nothing to sort"


#: Parameter types of the worker's batched statements, for PREPARE.
PARAMETER_TYPES = {
    "queues": "text",
    "queue": "text",
    "worker_id": "text",
    "limit": "int",
    "turn": "int",
    "rows": "text",
    "leases": "text",
}
EXAMPLES = {
    "claim": {"queues": None, "worker_id": "w1", "limit": 10, "turn": 0},
    "claim_plain": {"queue": None, "worker_id": "w1", "limit": 10},
    "complete": {"rows": '[{"job_id": 1, "lease_token": 1, "worker_id": "w1", "result": null}]'},
    "renew": {"leases": '[{"job_id": 1, "lease_token": 1, "worker_id": "w1"}]'},
}


def generic_plan(name: str, example: dict[str, object] | None = None) -> str:
    """The plan a prepared statement settles on after five runs, whatever the values."""
    names: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    statement = re.sub(r"%\((\w+)\)s", placeholder, sql.statements("postgresql")[name])
    types = ", ".join(PARAMETER_TYPES[n] for n in names)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE generic_{name} ({types}) AS {statement}".replace("%", "%%"))
        values = [(example or EXAMPLES[name])[n] for n in names]
        cursor.execute(
            f"EXPLAIN (FORMAT JSON) EXECUTE generic_{name} ({', '.join(['%s'] * len(values))})",
            values,
        )
        (plan,) = cursor.fetchone()
        cursor.execute(f"DEALLOCATE generic_{name}")
    return json.dumps(plan)


# Last in the file: its backlog, rolled back, leaves the table bloated for the plans above.
@pytest.mark.postgresql
@pytest.mark.django_db
def test_next_due_reads_ready_jobs_through_the_ready_index(big_backlog: None) -> None:
    for queues in (["mail"], ["default", "mail"], None):
        scans = scanned_relations(statement_plan("next_due", {"queues": queues}))
        assert scans, f"next_due reads no job rows for {queues}"
        assert all(scan.endswith(":dbqueue_job_ready") for scan in scans), (queues, scans)
