"""On MySQL/MariaDB the claim reads ready jobs through the state-led index, in order, and an
enqueue reads its rows back through the primary key, however many jobs the table holds."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection

from django_dbqueue import leases, sql
from django_dbqueue.models import Job
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


def claim_statements() -> list[str]:
    """The claim block's statements, in order: the keyed window, the first job of each key
    among them, the lock, then those of limited jobs (run only when one is ready), the
    update and its read-back."""
    return sql.statements("mysql")["claim"].split(sql.STATEMENT_END)


def query_blocks(node: Any) -> Iterator[dict[str, Any]]:
    """Every ``query_block`` of an ``ANALYZE FORMAT=JSON`` plan, nested ones included."""
    if isinstance(node, dict):
        if "query_block" in node:
            yield node["query_block"]
        for value in node.values():
            yield from query_blocks(value)
    elif isinstance(node, list):
        for value in node:
            yield from query_blocks(value)


def tables_of(block: dict[str, Any]) -> list[dict[str, Any]]:
    """The tables a query block reads directly (not those of its subqueries)."""
    if "table" in block:
        return [block["table"]]
    return [step["table"] for step in block.get("nested_loop", []) if "table" in step]


@pytest.mark.mysql
# ANALYZE TABLE commits implicitly on MySQL: flush the rows after the test instead.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("queues", [["mail"], None])
def test_claim_reads_keyless_jobs_through_the_keyed_ready_index_in_order(
    big_backlog: None, queues: list[str] | None
) -> None:
    lock = claim_statements()[2]
    params = {**leases.claim_params(queues, "w1", 10), "previous": []}
    adapted = {key: sql.adapt(connection, value) for key, value in params.items()}
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE FORMAT=JSON " + lock, adapted)
        (plan,) = cursor.fetchone()
    analyzed = json.loads(plan)
    keyless = next(
        block
        for block in query_blocks(analyzed)
        if "k" in {table.get("table_name") for table in tables_of(block)}
    )
    (table,) = [table for table in tables_of(keyless) if table["table_name"] == "k"]
    assert table["key"] == "dbqueue_job_ready_keyed_my"
    assert "filesort" not in json.dumps(keyless), "the claim sorts instead of reading in order"
    # Executed (ANALYZE): reading in index order, it stops after the batch it needs.
    assert table["r_rows"] <= 50, f"read {table['r_rows']} rows to claim 10"
    logger.info(
        f"claim's keyless part over {2 * BACKLOG} rows, queues={queues}: "
        f"{keyless['r_total_time_ms']:.2f} ms"
    )


#: Keyed ready jobs ahead of the keyless ones, and the most rows (handler reads, temporary
#: tables included) a claim of 10 may take to get past them: a claim that checked every
#: keyed job against the earlier ones of its key read about 200,000 and took 0.8-4 s.
DEEP_KEY = 100_000
DEEP_KEY_ROWS_READ = 2_000
#: How the ``DEEP_KEY`` keyed jobs share their keys: all on one, or each on its own.
KEYS_OF_DEEP_BACKLOG = {"one key": "'deep'", "a key each": "CONCAT('key:', n)"}
#: 0 to 19.
DIGITS_20 = """
    WITH RECURSIVE twenty(d) AS (SELECT 0 UNION ALL SELECT d + 1 FROM twenty WHERE d < 19)
    SELECT d FROM twenty
"""


@pytest.fixture(params=list(KEYS_OF_DEEP_BACKLOG))
def deep_serial_key(request: pytest.FixtureRequest) -> str:
    """``DEEP_KEY`` due keyed jobs of priority 5, then 20 keyless ones of priority 0."""
    key = KEYS_OF_DEEP_BACKLOG[request.param]
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at,"
            " attempts, max_attempts, lease_token, lease_seconds, created_at, serial_key,"
            " last_worker_id, last_error_code, last_error, errors)"
            " SELECT 'default', 'tests.jobs.tasks.noop', '[]', '{}', 'ready',"
            " CASE WHEN n < %s THEN 5 ELSE 0 END, UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE,"
            f" 0, 5, 0, 60, UTC_TIMESTAMP(6), CASE WHEN n < %s THEN {key} END, '', '', '', '[]'"
            f" FROM ({NUMBERS} UNION ALL SELECT 100000 + d FROM ({DIGITS_20}) AS twenty)"
            " AS numbers ORDER BY n",
            [DEEP_KEY, DEEP_KEY],
        )
        cursor.execute("ANALYZE TABLE dbqueue_job")
        cursor.fetchall()
    return str(request.param)


def rows_read() -> int:
    """Rows this session's handlers have read so far (indexes, tables, temporary tables)."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
        return sum(int(value) for _, value in cursor.fetchall())


@pytest.mark.mysql
@pytest.mark.django_db(transaction=True)
def test_a_claim_reads_a_bounded_number_of_rows_however_many_keyed_jobs_wait(
    deep_serial_key: str,
) -> None:
    # The first statements after ANALYZE TABLE reload the table's statistics: a claim of
    # another queue takes that cost, so the time logged is the claim's own.
    leases.claim(["elsewhere"], "w0", 1)
    before = rows_read()
    started = time.monotonic()
    claimed = leases.claim(None, "w1", 10)
    elapsed = time.monotonic() - started
    read = rows_read() - before
    logger.info(
        f"claim with {DEEP_KEY} keyed jobs ({deep_serial_key}): {1000 * elapsed:.1f} ms, "
        f"{read} rows read"
    )
    keys = [Job.objects.get(pk=lease.job_id).serial_key for lease in claimed]
    if deep_serial_key == "one key":
        first = Job.objects.filter(serial_key="deep").order_by("id").first()
        assert first is not None
        assert claimed[0].job_id == first.pk  # the key's first job, then keyless ones
        assert keys[1:] == [None] * 9
    else:
        assert None not in keys
        assert len(set(keys)) == 10  # ten keys' first jobs
    assert read < DEEP_KEY_ROWS_READ


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
