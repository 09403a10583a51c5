"""(g) The admin on a big job table: the list page, a filtered dead page, the health view.

For each size in ``sizes.admin_rows`` the job table is rebuilt with one
``INSERT ... SELECT generate_series`` (98.8% succeeded, 1% dead over four error
codes, 0.2% cancelled, a few ready and running jobs, five queues, 23 tasks),
then ``VACUUM (ANALYZE)``. Each page is fetched through Django's test client as
a logged-in superuser, template rendering included; the figure is the median
of ``PAGE_ROUNDS`` fetches after one warm-up, and the details keep the page's
query count. The health view is ``dashboard.context()``: the queue summary,
the throughput chart and the schedules, without the list. Each size is then timed
again with its finished jobs moved to history tables of ``HISTORY_TABLE_DAYS`` days
(PostgreSQL: ``dbqueue_move_history``), keys ending in ``_history``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from io import StringIO

from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from benchmarks import database
from benchmarks.results import Result
from benchmarks.session import Session
from benchmarks.timing import timed
from django_dbqueue import dashboard

PAGE_ROUNDS = 5
#: The days of one history table when the pages are timed with the finished jobs moved.
HISTORY_TABLE_DAYS = 7
CHANGELIST = "/admin/django_dbqueue/job/"
#: key, label and query string of each page measured; ``{rows}`` is the table's size.
PAGES = (
    ("admin_list", "admin job list page", ""),
    ("admin_dead_filtered", "admin dead jobs of one queue", "?state__exact=dead&queue__exact=mail"),
    ("admin_filter_state", "admin filter: state cancelled", "?state__exact=cancelled"),
    ("admin_filter_queue", "admin filter: a queue", "?queue__exact=billing"),
    ("admin_filter_task", "admin filter: a task", "?task__exact=shop.tasks.task_7"),
    ("admin_filter_error_code", "admin filter: an error code", "?last_error_code__exact=KeyError"),
    ("admin_search_id", "admin search: a job id", "?q={newer}"),
    ("admin_search_dedupe_key", "admin search: a dedupe key", "?q=order-{middle}"),
    ("admin_search_subject", "admin search: a subject id", "?q=s{middle}"),
    ("admin_search_task", "admin search: a task path", "?q=shop.tasks.task_7"),
    ("admin_search_fragment", "admin search: a task path fragment", "?q=task_7"),
    ("admin_search_error_code", "admin search: an error code", "?q=TimeoutError"),
    ("admin_search_error_word", "admin search: a word of the error text", "?q=boom"),
)

BUILD = """
INSERT INTO dbqueue_job (
    queue, task, args, kwargs, state, priority, run_at, attempts, max_attempts, lease_token,
    lease_seconds, worker_id, lease_until, created_at, started_at, finished_at,
    last_error_code, last_error, errors, last_worker_id, dedupe_key, subject_type_id, subject_id
)
SELECT
    (ARRAY['default', 'default', 'default', 'mail', 'mail', 'reports', 'webhooks', 'billing'])
        [1 + i %% 8],
    'shop.tasks.task_' || (i %% 23), '[1]'::jsonb, '{}'::jsonb, s.state, 0,
    now() - make_interval(secs => (%(rows)s - i) * 0.25),
    CASE WHEN s.state = 'dead' THEN 5 WHEN s.state IN ('ready', 'cancelled') THEN 0 ELSE 1 END,
    5,
    CASE WHEN s.state = 'dead' THEN 5 WHEN s.state IN ('ready', 'cancelled') THEN 0 ELSE 1 END,
    60,
    CASE WHEN s.state = 'running' THEN 'bench-worker' END,
    CASE WHEN s.state = 'running' THEN now() + interval '1 hour' END,
    now() - make_interval(secs => (%(rows)s - i) * 0.25),
    CASE WHEN s.state IN ('ready', 'cancelled') THEN NULL
         ELSE now() - make_interval(secs => (%(rows)s - i) * 0.25) END,
    CASE WHEN s.state IN ('ready', 'running') THEN NULL
         ELSE now() - make_interval(secs => (%(rows)s - i) * 0.25 - 1) END,
    CASE WHEN s.state = 'dead'
         THEN (ARRAY['ValueError', 'TimeoutError', 'LEASE_EXPIRED', 'KeyError'])[1 + i %% 4]
         ELSE '' END,
    CASE WHEN s.state = 'dead' THEN 'Traceback (most recent call last):' || chr(10)
                                     || 'ValueError: boom ' || i ELSE '' END,
    '[]'::jsonb, '',
    CASE WHEN i %% 10 = 0 THEN 'order-' || i END,
    CASE WHEN i %% 5 = 0 THEN %(subject_type)s END,
    CASE WHEN i %% 5 = 0 THEN 's' || i END
FROM generate_series(1, %(rows)s) AS i
CROSS JOIN LATERAL (
    SELECT CASE
        WHEN i %% 1000 < 10 THEN 'dead'
        WHEN i %% 1000 < 12 THEN 'cancelled'
        WHEN i > %(rows)s - 2000 AND i %% 10 = 0 THEN 'ready'
        WHEN i > %(rows)s - 200 AND i %% 10 = 1 THEN 'running'
        ELSE 'succeeded'
    END AS state
) s
"""


def run(session: Session) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]
    user, _ = User.objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    for rows in session.sizes.admin_rows:
        database.reset(session.harness)
        subject_type = ContentType.objects.get_for_model(User).pk
        session.harness.execute(BUILD, {"rows": rows, "subject_type": subject_type})
        database.vacuum(session.harness)
        pages(session, client, rows, "", f"{rows:,} jobs")
        # The same jobs, the finished ones moved to history tables as the reaper moves
        # them while retention keeps them (issue 31): ten million jobs span a month, kept
        # in weekly tables as the docs advise for a long retention; then every table
        # vacuumed.
        keeping = {"SUCCEEDED_RETENTION": None, "HISTORY_TABLE_DAYS": HISTORY_TABLE_DAYS}
        with override_settings(DBQUEUE={**settings.DBQUEUE, **keeping}):
            call_command("dbqueue_move_history", stdout=StringIO())
        session.harness.execute("VACUUM (ANALYZE)")
        pages(session, client, rows, "_history", f"{rows:,} jobs, finished ones in history")
    database.reset(session.harness)


def pages(session: Session, client: Client, rows: int, suffix: str, jobs: str) -> None:
    """Every page of ``PAGES`` and the health view, timed; keys end with ``suffix``."""
    middle = rows // 20 * 10
    for key, label, query in PAGES:
        url = CHANGELIST + query.format(newer=rows - 100, middle=middle)
        milliseconds, queries = median_ms(lambda url=url: fetch(client, url))
        add(
            session,
            f"{key}_{size_name(rows)}{suffix}",
            f"{label}, {jobs}",
            milliseconds,
            rows,
            {"url": url, "queries": queries},
        )
    milliseconds, queries = median_ms(dashboard.context)
    add(
        session,
        f"admin_health_{size_name(rows)}{suffix}",
        f"admin health view, {jobs}",
        milliseconds,
        rows,
        {"queries": queries},
    )


def fetch(client: Client, url: str) -> None:
    response = client.get(url)
    if response.status_code != 200:
        raise RuntimeError(f"{url} answered {response.status_code}")


def median_ms(action: Callable[[], object]) -> tuple[float, int]:
    """The median milliseconds of ``PAGE_ROUNDS`` calls after a warm-up, and their queries."""
    action()
    samples = []
    for _ in range(PAGE_ROUNDS):
        with CaptureQueriesContext(connection) as queries:
            _, seconds = timed(action)
        samples.append(seconds * 1000)
    return statistics.median(samples), len(queries)


def add(
    session: Session, key: str, label: str, value: float, rows: int, details: dict[str, object]
) -> None:
    session.results.add(Result(key, label, value, "ms", n=rows, details=details))


def size_name(rows: int) -> str:
    """``1000000`` -> ``"1m"``, ``20000`` -> ``"20k"``."""
    if rows % 1_000_000 == 0:
        return f"{rows // 1_000_000}m"
    return f"{rows // 1000}k"
