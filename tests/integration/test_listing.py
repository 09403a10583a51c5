"""The admin's job list on a big table: every query through an index, counts estimated.

200,000 jobs, most of them succeeded (as on a busy production table), with
fresh statistics. Every query the list page, its filters and the health
summary send to the job table is EXPLAINed: none may read the table
sequentially, and none counts the whole table exactly.
"""

from __future__ import annotations

import json
import logging
from collections import Counter

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from django_dbqueue import dead_jobs, listing, registry
from django_dbqueue.models import Job, JobState
from tests import plans

logger = logging.getLogger(__name__)

ROWS = 200_000
CHANGELIST = "/admin/django_dbqueue/job/"

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db]


@pytest.fixture
def big_table() -> None:
    """ROWS jobs: 1% dead, 0.2% cancelled, 200 ready (queue "urgent"), 20 running.

    Queue "archive" holds only succeeded jobs.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at,
                attempts, max_attempts, lease_token, lease_seconds, worker_id, lease_until,
                created_at, finished_at, last_error_code, last_error, errors, last_worker_id)
            SELECT CASE WHEN s.state = 'ready' THEN 'urgent'
                        WHEN s.state = 'succeeded' AND n %% 1000 = 5 THEN 'archive'
                        ELSE (ARRAY['default', 'default', 'mail', 'reports', 'billing'])[1 + n %% 5]
                   END,
                'shop.tasks.task_' || (n %% 11), '[]', '{}', s.state, 0, now(),
                CASE WHEN s.state = 'dead' THEN 5 WHEN s.state = 'ready' THEN 0 ELSE 1 END, 5,
                CASE WHEN s.state = 'dead' THEN 5 WHEN s.state = 'ready' THEN 0 ELSE 1 END, 60,
                CASE WHEN s.state = 'running' THEN 'w1' END,
                CASE WHEN s.state = 'running' THEN now() + interval '1 hour' END,
                now() - make_interval(secs => %(rows)s - n),
                CASE WHEN s.state IN ('ready', 'running') THEN NULL
                     ELSE now() - make_interval(secs => %(rows)s - n) END,
                CASE WHEN s.state = 'dead' THEN (ARRAY['ValueError', 'KeyError'])[1 + n %% 2]
                     ELSE '' END,
                '', '[]', ''
            FROM generate_series(1, %(rows)s) AS n
            CROSS JOIN LATERAL (SELECT CASE
                WHEN n %% 101 = 0 THEN 'dead'
                WHEN n %% 500 = 1 THEN 'cancelled'
                WHEN n > %(rows)s - 2000 AND n %% 10 = 3 THEN 'ready'
                WHEN n > %(rows)s - 200 AND n %% 10 = 4 THEN 'running'
                ELSE 'succeeded' END AS state) AS s
            """,
            {"rows": ROWS},
        )
        cursor.execute("ANALYZE dbqueue_job")


def job_queries(queries: CaptureQueriesContext) -> list[str]:
    """The statements that read the job table (not the paginator's own EXPLAIN)."""
    return [
        query["sql"]
        for query in queries.captured_queries
        if "dbqueue_job" in query["sql"] and not query["sql"].startswith("EXPLAIN")
    ]


def explain(statement: str) -> str:
    """PostgreSQL's plan of ``statement``, as JSON text."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement)
        (plan,) = cursor.fetchone()
    return json.dumps(plan)


def scans(statement: str) -> set[str]:
    """``"<node type>:<index or table>"`` for every read of the job table in the plan."""
    return plans.scans(explain(statement))


#: The list pages an operator opens: default order, each filter, a deep page.
PAGES = (
    "",
    "state__exact=dead",
    "state__exact=dead&queue__exact=mail",
    "state__exact=dead&last_error_code__exact=KeyError",
    "state__exact=dead&task__exact=shop.tasks.task_3",
    "state__exact=ready",
    "state__exact=running",
    "state__exact=waiting",
    "queue__exact=mail",
    "task__exact=shop.tasks.task_3",
    "last_error_code__exact=KeyError",
    "p=20",
)


def test_every_query_of_the_list_page_reads_the_job_table_through_an_index(
    big_table: None, admin_client: Client
) -> None:
    for query in PAGES:
        with CaptureQueriesContext(connection) as queries:
            response = admin_client.get(f"{CHANGELIST}?{query}")
        assert response.status_code == 200
        statements = job_queries(queries)
        assert statements, query
        plans = {statement: scans(statement) for statement in statements}
        read = sorted(set().union(*plans.values()))
        logger.info(f"?{query}: {len(queries)} queries; the job table is read by {read}")
        for statement, found in plans.items():
            assert not any(scan.startswith("Seq Scan") for scan in found), (query, statement)
        whole_table_counts = [s for s in statements if "COUNT(*)" in s and "WHERE" not in s]
        assert whole_table_counts == [], query


def test_a_big_result_shows_the_planners_estimate_and_a_small_one_the_exact_count(
    big_table: None, admin_client: Client
) -> None:
    everything = admin_client.get(CHANGELIST).context["cl"]
    assert abs(everything.result_count - ROWS) < ROWS * 0.2
    assert everything.full_result_count is None
    dead = admin_client.get(f"{CHANGELIST}?state__exact=dead").context["cl"]
    assert dead.result_count == Job.objects.dead().count() == ROWS // 101
    assert Job.objects.dead().count() < listing.ESTIMATE_ABOVE
    # The (queue, id) index serves a filter on the queue alone: a rare queue is counted exactly.
    rare = admin_client.get(f"{CHANGELIST}?queue__exact=archive").context["cl"]
    assert rare.result_count == Job.objects.filter(queue="archive").count() > 0


def test_one_page_reads_the_dead_jobs_once_for_its_health_table_filters_and_search(
    big_table: None, admin_client: Client
) -> None:
    """The health table's dead count per queue, the queue, task and error-code filters and
    the search's task paths all come from one read of the dead jobs' index, not one each."""
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(f"{CHANGELIST}?q=task_3")
    assert response.status_code == 200
    dead_reads = [s for s in job_queries(queries) if "\"state\" = 'dead'" in s]
    assert len(dead_reads) == 1, dead_reads
    titles = {spec.title for spec in response.context["cl"].filter_specs}
    assert {"queue", "task", "last error code"} <= titles
    health = response.context["queue_health"]
    dead_per_queue = {row.name: row.stats.dead for row in health if row.stats.dead}
    assert dead_per_queue == dict(Counter(Job.objects.dead().values_list("queue", flat=True)))
    # Outside a page, each read is its own: nothing is kept from one request to the next.
    assert dead_jobs.counts(connection.alias) == dead_jobs.counts(connection.alias)
    Job.objects.filter(state=JobState.DEAD).update(last_error_code="OSError")
    assert {kind.last_error_code for kind in dead_jobs.counts(connection.alias)} == {"OSError"}


#: Dead jobs of ``test_the_dead_jobs_are_grouped_by_kind_as_their_index_is_ordered``, among
#: four times as many succeeded ones: 3 queues x 4 tasks x 5 error codes.
DEAD_ROWS = 30_000


@pytest.mark.django_db(transaction=True)
def test_the_dead_jobs_are_grouped_by_kind_as_their_index_is_ordered() -> None:
    """``dead_jobs.counts`` reads ``dbqueue_job_dead_kinds`` index-only and groups the
    entries as they come, in the index's order: no hashing of every dead job's values (22-39
    ms a page with 100,000 dead jobs, against 9 ms)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at,
                attempts, max_attempts, lease_token, lease_seconds, created_at, finished_at,
                last_error_code, last_error, errors, last_worker_id)
            SELECT 'q' || (n %% 3), 't' || (n %% 4), '[]', '{}', s.state, 0, now(), 1, 1, 1,
                60, now(), now(), CASE WHEN s.state = 'dead' THEN 'E' || (n / 5 %% 5) ELSE '' END,
                '', '[]', 'w1'
            FROM generate_series(1, %(rows)s) AS n
            CROSS JOIN LATERAL (SELECT CASE WHEN n %% 5 = 0 THEN 'dead' ELSE 'succeeded' END
                                AS state) AS s
            """,
            {"rows": DEAD_ROWS * 5},
        )
        cursor.execute("VACUUM (ANALYZE) dbqueue_job")
    with CaptureQueriesContext(connection) as queries:
        counts = dead_jobs.counts(connection.alias)
    assert sum(counts.values()) == DEAD_ROWS
    assert len(counts) == 3 * 4 * 5
    (statement,) = job_queries(queries)
    assert scans(statement) == {"Index Only Scan:dbqueue_job_dead_kinds"}
    assert "HashAggregate" not in explain(statement)


def test_filter_choices_come_from_triage_rows_settings_and_the_registry(
    big_table: None, admin_client: Client
) -> None:
    response = admin_client.get(CHANGELIST)
    choices = {
        spec.title: [choice["display"] for choice in spec.choices(response.context["cl"])][1:]
        for spec in response.context["cl"].filter_specs
    }
    # Besides the triage rows' values: the configured and registered queues, the registry's tasks.
    assert {"billing", "default", "mail", "reports", "urgent"} <= set(choices["queue"])
    assert "archive" not in choices["queue"]  # only succeeded jobs, and no task names it
    assert choices["last error code"] == ["KeyError", "ValueError"]
    dead_tasks = {f"shop.tasks.task_{n}" for n in range(11)}
    assert choices["task"] == sorted(dead_tasks | set(registry.task_paths()))
    archived = admin_client.get(f"{CHANGELIST}?queue__exact=archive")
    assert [job.queue for job in archived.context["cl"].result_list][:1] == ["archive"]
