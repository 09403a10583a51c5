"""The admin's search and filters, and the commands' selectors, read a bounded share of a big
table: every kind of search term, every filter choice alone and with a state (issues 34, 36).

300,000 jobs with fresh statistics and a vacuumed visibility map. "No Seq Scan" is not
enough: under ``ORDER BY id DESC LIMIT`` PostgreSQL may walk the whole primary key
backwards and filter every row. So each statement is run under ``EXPLAIN ANALYZE`` and the
rows it reads from the job table (returned by a scan, plus removed by its filter or its
recheck) must stay well under a tenth of the table.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from django_dbqueue import search, triage
from django_dbqueue.models import Job
from tests import plans
from tests.testapp.models import Order

ROWS = 300_000
#: The most rows one statement may read from the job table.
BOUND = ROWS // 50
CHANGELIST = "/admin/django_dbqueue/job/"
#: A task the test process registered that has only succeeded jobs (and few).
RARE_TASK = "tests.jobs.tasks.noop"

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def big_table() -> None:
    """ROWS jobs: 1% dead (errors "card declined <n>"), 0.2% cancelled, 200 ready in
    "urgent", 20 running; a dedupe key on every job, a subject on every third.

    Queue "archive" and task ``RARE_TASK`` hold only a few succeeded jobs.
    """
    order_type = ContentType.objects.get_for_model(Order).pk
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at,
                attempts, max_attempts, lease_token, lease_seconds, worker_id, lease_until,
                created_at, finished_at, last_error_code, last_error, errors, last_worker_id,
                dedupe_key, subject_type_id, subject_id)
            SELECT CASE WHEN s.state = 'ready' THEN 'urgent'
                        WHEN s.state = 'succeeded' AND n %% 1000 = 5 THEN 'archive'
                        ELSE (ARRAY['default', 'default', 'mail', 'reports', 'billing'])[1 + n %% 5]
                   END,
                CASE WHEN s.state = 'succeeded' AND n %% 10000 = 7 THEN %(rare)s
                     ELSE 'shop.tasks.task_' || (n %% 11) END,
                '[]', '{}', s.state, 0, now(),
                CASE WHEN s.state = 'dead' THEN 5 WHEN s.state = 'ready' THEN 0 ELSE 1 END, 5,
                CASE WHEN s.state = 'dead' THEN 5 WHEN s.state = 'ready' THEN 0 ELSE 1 END, 60,
                CASE WHEN s.state = 'running' THEN 'w1' END,
                CASE WHEN s.state = 'running' THEN now() + interval '1 hour' END,
                now() - make_interval(secs => %(rows)s - n),
                CASE WHEN s.state IN ('ready', 'running') THEN NULL
                     ELSE now() - make_interval(secs => %(rows)s - n) END,
                CASE WHEN s.state = 'dead' THEN (ARRAY['ValueError', 'KeyError'])[1 + n %% 2]
                     ELSE '' END,
                CASE WHEN s.state = 'dead'
                     THEN 'Traceback (most recent call last):' || chr(10)
                          || 'ValueError: card declined ' || n
                     ELSE '' END,
                '[]', '', 'order-' || n,
                CASE WHEN n %% 3 = 0 THEN %(order_type)s END,
                CASE WHEN n %% 3 = 0 THEN (n / 3)::text END
            FROM generate_series(1, %(rows)s) AS n
            CROSS JOIN LATERAL (SELECT CASE
                WHEN n %% 101 = 0 THEN 'dead'
                WHEN n %% 500 = 1 THEN 'cancelled'
                WHEN n > %(rows)s - 2000 AND n %% 10 = 3 THEN 'ready'
                WHEN n > %(rows)s - 200 AND n %% 10 = 4 THEN 'running'
                ELSE 'succeeded' END AS state) AS s
            """,
            {"rows": ROWS, "rare": RARE_TASK, "order_type": order_type},
        )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) dbqueue_job")


def rows_read(statement: str, params: Sequence[object] = ()) -> tuple[int, set[str]]:
    """The rows ``statement`` reads from the job table (run under ``EXPLAIN ANALYZE``), and
    ``"<node type>:<index or table>"`` for each read."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params or None)
        (plan,) = cursor.fetchone()
    read = sum(
        node["Actual Rows"] * node["Actual Loops"]
        + node.get("Rows Removed by Filter", 0)
        + node.get("Rows Removed by Index Recheck", 0)
        for node in plans.reads(plan)
    )
    return read, plans.scans(plan)


def page_statements(client: Client, query: dict[str, str]) -> list[str]:
    """The statements the list page sends to the job table (not the paginator's EXPLAIN),
    leaving out the health summary above the list (``test_dashboard`` bounds it) and the
    catalog probe for the error-text index, which names the table only in a string."""
    with CaptureQueriesContext(connection) as queries:
        response = client.get(CHANGELIST, query)
    assert response.status_code == 200, query
    return [
        q["sql"]
        for q in queries.captured_queries
        if '"dbqueue_job"' in q["sql"]
        and not q["sql"].startswith("EXPLAIN")
        and "GROUP BY" not in q["sql"]
    ]


def assert_bounded(client: Client, query: dict[str, str]) -> None:
    statements = page_statements(client, query)
    assert statements, query
    for statement in statements:
        read, scans = rows_read(statement)
        assert read < BOUND, (query, read, scans, statement)
        assert not any(scan.startswith("Seq Scan") for scan in scans), (query, statement)


#: One term per kind of search: job id, dedupe key, subject id, task path, task fragment,
#: error code, words of the error text (rare, and in every error); a term matching nothing.
SEARCHES = (
    "299900",  # the ids run on from earlier tests' rows: a job id or none, bounded either way
    "order-123456",
    "4242",
    "shop.tasks.task_3",
    "task_3",
    "KeyError",
    "declined 2020",
    "declined",  # in every error: answered from the newest failed jobs
    "no-such-thing",
)


def test_every_kind_of_search_reads_a_bounded_share_of_the_table(
    big_table: None, admin_client: Client
) -> None:
    assert search.searches_error_text(connection.alias)
    for term in SEARCHES:
        assert_bounded(admin_client, {"q": term})


def test_each_search_kind_finds_its_jobs(big_table: None, admin_client: Client) -> None:
    def found(term: str) -> set[int]:
        response = admin_client.get(CHANGELIST, {"q": term})
        return {job.pk for job in response.context["cl"].result_list}

    newest = Job.objects.order_by("-pk")[100].pk
    by_key = Job.objects.get(dedupe_key="order-123456").pk
    by_subject = Job.objects.get(subject_id="4242").pk
    declined = Job.objects.filter(last_error__contains="declined 20200")
    assert found(str(newest)) == {newest}
    assert found("order-123456") == {by_key}
    # The subject id, and the dead jobs whose error text holds the term.
    in_errors = Job.objects.filter(last_error__contains="4242").values_list("pk", flat=True)
    assert found("4242") == {by_subject, *in_errors}
    assert found("declined 20200") == set(declined.values_list("pk", flat=True)) != set()
    assert found("no-such-thing") == set()


#: Every filter choice kind, alone and with each state.
FILTERS = (
    {"queue__exact": "archive"},
    {"queue__exact": "default"},
    {"queue__exact": "urgent"},
    {"task__exact": RARE_TASK},
    {"task__exact": "shop.tasks.task_3"},
    {"last_error_code__exact": "KeyError"},
)
STATES = ("", "ready", "running", "succeeded", "dead", "cancelled")


def test_every_filter_choice_alone_and_with_a_state_reads_a_bounded_share(
    big_table: None, admin_client: Client
) -> None:
    for choice in FILTERS:
        for state in STATES:
            assert_bounded(admin_client, {**choice, **({"state__exact": state} if state else {})})


def test_a_queue_or_task_with_only_succeeded_jobs_is_listed_and_filters(
    big_table: None, admin_client: Client
) -> None:
    unfiltered = admin_client.get(CHANGELIST).context["cl"]
    specs = {spec.title: spec for spec in unfiltered.filter_specs}
    assert RARE_TASK in [choice["display"] for choice in specs["task"].choices(unfiltered)]
    response = admin_client.get(CHANGELIST, {"task__exact": RARE_TASK})
    listed = {job.task for job in response.context["cl"].result_list}
    assert listed == {RARE_TASK}


@pytest.mark.parametrize(
    ("selector", "kind"),
    [
        (triage.Selector(task=RARE_TASK), "dead"),
        (triage.Selector(task="shop.tasks.task_3"), "dead"),
        (triage.Selector(queue="archive"), "dead"),
        (triage.Selector(queue="urgent"), "ready"),
        (triage.Selector(task="shop.tasks.task_3"), "ready"),
        (triage.Selector(task="shop.tasks.task_3"), "running"),
        (triage.Selector(queue="default", error_code="KeyError"), "dead"),
    ],
)
def test_command_selectors_read_a_bounded_share(
    big_table: None, selector: triage.Selector, kind: str
) -> None:
    """``dbqueue_requeue`` (dead jobs) and ``dbqueue_cancel`` (ready, then running ones): each
    batch, and the check that the selection is not empty."""
    jobs = selector.jobs(since_field="finished_at")
    selected = getattr(jobs, kind)()
    first_batch = selected.order_by("pk").only("pk", "task", "state")[: triage.BATCH]
    for queryset in (first_batch, selected.order_by()[:1]):
        read, scans = rows_read(*queryset.query.sql_with_params())
        assert read < BOUND, (selector, kind, read, scans)


@pytest.mark.parametrize(
    "selector",
    [triage.Selector(task="shop.tasks.typo"), triage.Selector(queue="typo")],
)
def test_a_selector_matching_nothing_counts_its_jobs_from_an_index(
    big_table: None, selector: triage.Selector
) -> None:
    """The "matches nothing" message counts the selected jobs in any state (``require_match``)."""
    jobs = selector.jobs(since_field="created_at")
    sql_text, params = jobs.order_by().values("pk").query.sql_with_params()
    read, scans = rows_read(f"SELECT COUNT(*) FROM ({sql_text}) AS selected", params)
    assert read < BOUND, (selector, read, scans)
    assert not any(scan.startswith("Seq Scan") for scan in scans), (selector, scans)
