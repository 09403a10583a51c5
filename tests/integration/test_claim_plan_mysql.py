"""On MySQL/MariaDB the claim reads ready jobs through the state-led index, in order, and an
enqueue reads its rows back through the primary key, however many jobs the table holds."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from django_dbqueue import sql
from tests.jobs.tasks import noop

logger = logging.getLogger(__name__)

BACKLOG = 100_000
#: 10**5 numbers from five crossed digit tables (no recursion-depth limit to raise).
NUMBERS = """
    WITH RECURSIVE digit(d) AS (SELECT 0 UNION ALL SELECT d + 1 FROM digit WHERE d < 9)
    SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS n
    FROM digit a, digit b, digit c, digit e, digit f
"""


@pytest.fixture
def big_backlog() -> None:
    """100k ready jobs over three queues and 100k finished ones, with fresh statistics."""
    with connection.cursor() as cursor:
        for state, finished in (("ready", "NULL"), ("succeeded", "UTC_TIMESTAMP(6)")):
            cursor.execute(
                "INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at,"
                " attempts, max_attempts, lease_token, lease_seconds, created_at, finished_at,"
                " last_worker_id, last_error_code, last_error, errors)"
                " SELECT ELT(1 + n %% 3, 'default', 'mail', 'reports'), 'tests.jobs.tasks.noop',"
                " '[]', '{}', %s, n %% 5, UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE,"
                f" 0, 5, 0, 60, UTC_TIMESTAMP(6), {finished}, '', '', '', '[]'"
                f" FROM ({NUMBERS}) AS numbers",
                [state],
            )
        cursor.execute("ANALYZE TABLE dbqueue_job")
        cursor.fetchall()


@pytest.mark.mysql
# ANALYZE TABLE commits implicitly on MySQL: flush the rows after the test instead.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("queues", [["mail"], None])
def test_claim_reads_ready_jobs_in_index_order(big_backlog: None, queues: list[str] | None) -> None:
    select = sql.statements("mysql")["claim"].split(sql.STATEMENT_END)[0]
    params = {"queues": queues, "worker_id": "w1", "limit": 10, "turn": 0}
    adapted = {key: sql.adapt(connection, value) for key, value in params.items()}
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE FORMAT=JSON " + select, adapted)
        (plan,) = cursor.fetchone()
    outer = json.loads(plan)["query_block"]
    table = outer.get("table") or outer["nested_loop"][0]["table"]
    assert table["key"] == "dbqueue_job_ready_my"
    assert "filesort" not in json.dumps(outer), "the claim sorts instead of reading in order"
    # Executed (ANALYZE): reading in index order, it stops after the batch it needs.
    assert table["r_rows"] <= 50, f"read {table['r_rows']} rows to claim 10"
    logger.info(
        f"claim over {2 * BACKLOG} rows, queues={queues}: {outer['r_total_time_ms']:.2f} ms"
    )


@pytest.mark.mysql
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("calls", [1, 3])
def test_an_enqueue_reads_its_rows_back_by_primary_key(big_backlog: None, calls: int) -> None:
    """200,000 jobs of the same task in the table; the read-back reads this insert's rows only."""
    plans: list[str] = []

    def analyze_the_read_back(
        execute: Callable[..., Any], sql_text: str, params: Any, many: bool, context: Any
    ) -> Any:
        result = execute(sql_text, params, many, context)
        if sql_text.lstrip().startswith("SELECT id, created_at, run_at FROM dbqueue_job"):
            # The driver's own cursor: no execute wrapper sees the ANALYZE.
            with context["connection"].connection.cursor() as cursor:
                cursor.execute("ANALYZE FORMAT=JSON " + sql_text, params)
                plans.append(cursor.fetchone()[0])
        return result

    with connection.execute_wrapper(analyze_the_read_back):
        jobs = noop.enqueue_many([((), {})] * calls)

    assert len(jobs) == calls
    (plan,) = plans
    outer = json.loads(plan)["query_block"]
    table = outer.get("table") or outer["nested_loop"][0]["table"]
    assert table["key"] == "PRIMARY"
    assert table["r_rows"] == calls, f"read {table['r_rows']} rows to read back {calls}"
