"""The claim stays on the ready index at any backlog size; statements on jobs named by id reach
them by primary key."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from django_dbqueue import leases, sql
from django_dbqueue.models import TERMINAL_STATES, Job
from tests import plans
from tests.testapp.models import Order

BACKLOG = 100_000
#: The ready index, and its part without serial keys (where keyless claim candidates come from).
READY_INDEXES = ("dbqueue_job_ready", "dbqueue_job_ready_keyless")
INDEX_SCANS = ("Index Scan", "Index Only Scan")


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
    return statement_plan("claim", leases.claim_params(queues, "w1", 10))


def statement_plan(name: str, params: dict[str, object], analyze: bool = False) -> str:
    """The plan of block ``name`` for these values (run and timed with ``analyze``)."""
    statement = sql.statements("postgresql")[name]
    adapted = {key: sql.adapt(connection, value) for key, value in params.items()}
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN ({explain_options(analyze)}) " + statement, adapted)
        (plan,) = cursor.fetchone()
    return json.dumps(plan)


#: The job table's alias in the candidate scan of each path of the claim.
CLAIM_PATHS = {"plain": "p", "general": "g"}


def claim_path_loops(plan: str) -> dict[str, int]:
    """How often each path's candidate scan ran in an analysed claim plan (0: never executed)."""
    return {
        path: sum(node["Actual Loops"] for node in plans.reads(plan) if node.get("Alias") == alias)
        for path, alias in CLAIM_PATHS.items()
    }


def subplan(plan: str, name: str) -> dict[str, Any]:
    """The plan node of ``name`` (e.g. ``CTE shape``)."""
    (node,) = [node for node in plans.nodes(plan) if node.get("Subplan Name") == name]
    return node


@pytest.mark.postgresql
@pytest.mark.django_db
@pytest.mark.parametrize(
    "name",
    [
        "claim",
        "complete",
        "renew",
        "set_progress",
        "lock_lease",
        "release",
        "cancel_running",
        "record_failures",
        "request_cancel",
    ],
)
def test_prepared_statements_reach_their_rows_by_primary_key_at_any_table_size(name: str) -> None:
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
    scans = plans.scans(generic_plan(name))
    assert "Index Scan:dbqueue_job_pkey" in scans
    assert not any(scan.startswith(("Seq Scan", "Bitmap Heap Scan")) for scan in scans), scans
    # Statistics taken with no job running call the running jobs' index nearly empty: a
    # batch that read its rows there would read every job running on every worker.
    assert not any(scan.endswith(":dbqueue_job_running_lease") for scan in scans), scans


@pytest.mark.postgresql
@pytest.mark.django_db
@pytest.mark.parametrize("queues", [["mail"], ["default", "mail"], None])
def test_claim_reads_ready_jobs_through_the_ready_index(
    big_backlog: None, queues: list[str] | None
) -> None:
    scans = plans.scans(claim_plan(queues))
    assert any(f"{how}:{index}" in scans for how in INDEX_SCANS for index in READY_INDEXES), scans
    assert not any(scan.startswith(("Seq Scan", "Bitmap Heap Scan")) for scan in scans), scans


@pytest.mark.postgresql
@pytest.mark.django_db
@pytest.mark.parametrize("prepared", [False, True])
@pytest.mark.parametrize(("queues", "taken"), [(["mail"], "plain"), (None, "general")])
def test_the_claim_runs_one_path_and_its_plain_path_reads_the_ready_index_in_order(
    big_backlog: None, queues: list[str] | None, taken: str, prepared: bool
) -> None:
    # Three queues have ready jobs: every queue (None) takes turns, the general path.
    params = leases.claim_params(queues, "w1", 10)
    explain = generic_plan if prepared else statement_plan
    plan = explain("claim", params, analyze=True)
    loops = claim_path_loops(plan)
    assert loops[taken] > 0, loops
    assert all(count == 0 for path, count in loops.items() if path != taken), loops
    plain = subplan(plan, "CTE plain_chosen")
    scans = plans.scans(plain)
    assert len(scans) == 1, scans
    assert scans <= {f"Index Scan:{index}" for index in READY_INDEXES}, scans
    assert not any(node["Node Type"] == "Sort" for node in plans.nodes(plain)), (
        "the ready index gives the claim order: nothing to sort"
    )
    probes = plans.scans(subplan(plan, "CTE shape"))
    assert any(scan.endswith(":dbqueue_job_serial_active") for scan in probes), probes
    assert not any(scan.startswith(("Seq Scan", "Bitmap Heap Scan")) for scan in probes), probes


#: Parameter types of the worker's batched statements, for PREPARE.
PARAMETER_TYPES = {
    "queues": "text",
    "worker_id": "text",
    "limit": "int",
    "serial_window": "int",
    "turn": "int",
    "rows": "text",
    "leases": "text",
    "reports": "text",
    "expired": "boolean",
    "job_id": "bigint",
    "job_ids": "text",
    "lease_token": "bigint",
    "code": "text",
    "last_error": "text",
    "errors": "text",
    "settles": "boolean",
    "finished": "text",
    "channel": "text",
}
FENCE = {"job_id": 1, "worker_id": "w1", "lease_token": 1}
EXAMPLES = {
    "claim": leases.claim_params(None, "w1", 10),
    "complete": {
        "rows": '[{"job_id": 1, "lease_token": 1, "worker_id": "w1", "result": null}]',
        "settles": False,
    },
    "renew": {"leases": '[{"job_id": 1, "lease_token": 1, "worker_id": "w1"}]'},
    "set_progress": {
        "reports": '[{"job_id": 1, "lease_token": 1, "worker_id": "w1", "progress": "{}"}]'
    },
    "lock_lease": FENCE,
    "release": FENCE,
    "cancel_running": {**FENCE, "code": "CANCELLED", "last_error": "", "errors": "[]"},
    "record_failures": {"rows": "[]", "expired": False},
    "request_cancel": {"job_ids": "[1]"},
}


def explain_options(analyze: bool) -> str:
    return "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"


def generic_plan(name: str, example: dict[str, object] | None = None, analyze: bool = False) -> str:
    """The plan a prepared statement settles on after five runs, whatever the values
    (run with ``example`` and timed with ``analyze``)."""
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
        values = [sql.adapt(connection, (example or EXAMPLES[name])[n]) for n in names]
        arguments = ", ".join(["%s"] * len(values))
        cursor.execute(
            f"EXPLAIN ({explain_options(analyze)}) EXECUTE generic_{name} ({arguments})", values
        )
        (plan,) = cursor.fetchone()
        cursor.execute(f"DEALLOCATE generic_{name}")
    return json.dumps(plan)


@pytest.mark.postgresql
@pytest.mark.django_db
def test_settling_reaches_edges_and_dependents_by_index_at_any_table_size() -> None:
    """A settling costs the edges it settles, not the edge table (a group's 10,000 edges)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at,
                attempts, max_attempts, lease_token, lease_seconds, created_at,
                last_error_code, last_error, errors)
            SELECT 'default', 'tests.jobs.tasks.noop', '[]', '{}', 'ready', 0, now(), 0, 5, 0,
                60, now(), '', '', '[]'
            FROM generate_series(1, 3000)
            """
        )
        cursor.execute(
            """
            INSERT INTO dbqueue_dependency (job_id, depends_on_id, position, on_failure, state)
            SELECT max(id) OVER (), id, row_number() OVER (ORDER BY id), 'cancel', 'pending'
            FROM dbqueue_job
            """
        )
        cursor.execute("ANALYZE dbqueue_job")
        cursor.execute("ANALYZE dbqueue_dependency")
    one_edge = {"finished": '[{"id": 1, "failed": false}]'}
    one_row = {
        "rows": '[{"id": 1, "resolved": 1, "state": "ready", "code": null, '
        '"last_error": null, "errors": null}]',
        "channel": "dbqueue",
    }
    for name, params, table, index in (
        ("settle_edges", one_edge, "dbqueue_dependency", "dbqueue_dependency_on"),
        ("update_dependents", one_row, "dbqueue_job", "dbqueue_job_pkey"),
    ):
        plan = generic_plan(name, params)
        # An Index Scan, or a Bitmap Heap Scan over a Bitmap Index Scan of the ids: either
        # reads the rows the ids name; a Seq Scan reads the whole table.
        indexes = {node.get("Index Name") for node in plans.nodes(plan)}
        assert index in indexes, (name, indexes)
        assert not any(scan.startswith("Seq Scan") for scan in plans.scans(plan, table))


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_the_claim_reads_indexes_only_when_most_ready_jobs_are_limited() -> None:
    """The probe for a ready limited job reads the ready-limited index, not the table, even
    where the statistics say most ready jobs are limited: a plan that scans the table for the
    first one walks every finished row before it (2.6 ms of a 3.4 ms claim at 16,000). The
    table is compacted first: what earlier tests left of it must not decide the plan."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at,
                attempts, max_attempts, lease_token, lease_seconds, created_at, finished_at,
                last_error_code, last_error, errors, limit_key, limit_size)
            SELECT 'default', 'tests.jobs.tasks.noop', '[]', '{}',
                CASE WHEN n %% 2 = 0 THEN 'ready' ELSE 'succeeded' END, 0,
                now() - interval '1 minute', CASE WHEN n %% 2 = 0 THEN 0 ELSE 1 END, 5,
                CASE WHEN n %% 2 = 0 THEN 0 ELSE 1 END, 60, now(),
                CASE WHEN n %% 2 = 0 THEN NULL ELSE now() END, '', '', '[]',
                'task:tests.jobs.tasks.noop', 32
            FROM generate_series(1, %s) AS n
            """,
            [2 * BACKLOG // 10],
        )
        cursor.execute("VACUUM (FULL, ANALYZE) dbqueue_job")
    params = leases.claim_params(None, "w1", 10)
    for plan in (statement_plan("claim", params), generic_plan("claim", params)):
        scans = plans.scans(plan)
        assert ":dbqueue_job_ready_limited" in " ".join(scans), scans
        assert not any(scan.startswith("Seq Scan") for scan in scans), scans
        # A bitmap scan only as a primary-key probe (each candidate's `seen`), never a range.
        assert bitmap_indexes(plan) <= {"dbqueue_job_pkey"}, bitmap_indexes(plan)


def bitmap_indexes(plan: str) -> set[str]:
    """The indexes the plan's bitmap scans read."""
    return {
        node["Index Name"] for node in plans.nodes(plan) if node["Node Type"] == "Bitmap Index Scan"
    }


# Last in the file: its backlog, rolled back, leaves the table bloated for the plans above.
@pytest.mark.postgresql
@pytest.mark.django_db
def test_next_due_and_the_reapers_lock_read_their_indexes_in_custom_and_generic_plans(
    big_backlog: None,
) -> None:
    """The worker's connections keep generic plans (``plan_cache_mode``): these must hold too."""
    for queues in (["mail"], ["default", "mail"], None):
        for scans in (
            plans.scans(statement_plan("next_due", {"queues": queues})),
            plans.scans(generic_plan("next_due", {"queues": queues})),
        ):
            assert scans, f"next_due reads no job rows for {queues}"
            # The ready jobs, and those of a paced limit (its next start: limits.py).
            ready = (":dbqueue_job_ready", ":dbqueue_job_ready_limited")
            assert all(scan.endswith(ready) for scan in scans), (queues, scans)
    for scans in (
        plans.scans(statement_plan("lock_expired", {"limit": 100})),
        plans.scans(generic_plan("lock_expired", {"limit": 100})),
    ):
        assert scans == {"Index Scan:dbqueue_job_running_lease"}, scans


def orm_plans(queryset: QuerySet[Any]) -> list[str]:
    """A queryset's plan as Django runs it, and the generic plan the worker's connections use."""
    statement, params = queryset.query.sql_with_params()
    numbered = iter(range(1, len(params) + 1))
    prepared = re.sub(r"%s", lambda _: f"${next(numbered)}", statement)
    arguments = ", ".join(["%s"] * len(params))
    found = []
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {statement}", params)
        found.append(json.dumps(cursor.fetchone()[0]))
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE generic_orm AS {prepared}".replace("%", "%%"))
        cursor.execute(f"EXPLAIN (FORMAT JSON) EXECUTE generic_orm ({arguments})", params)
        found.append(json.dumps(cursor.fetchone()[0]))
        cursor.execute("DEALLOCATE generic_orm")
    return found


@pytest.mark.postgresql
@pytest.mark.django_db
def test_the_purge_and_subject_lookups_read_their_partial_indexes_in_custom_and_generic_plans(
    big_backlog: None,
) -> None:
    """The finished and subject indexes hold only rows with a value; every lookup names one."""
    old = Job.objects.filter(
        state__in=TERMINAL_STATES, finished_at__lt=timezone.now() - timedelta(days=7)
    )
    locked = old.order_by("finished_at").select_for_update(skip_locked=True)  # as purge() locks
    order = ContentType.objects.get_for_model(Order)
    lookups = {
        "dbqueue_job_finished": locked.values_list("pk", flat=True)[:1000],
        "dbqueue_job_subject": Job.objects.filter(subject_type=order, subject_id="7"),
    }
    for index, queryset in lookups.items():
        for plan in orm_plans(queryset):
            assert {scan.split(":")[1] for scan in plans.scans(plan)} == {index}, plan
    # What on_delete=PROTECT asks before a content type goes: the subject index leads with it.
    for plan in orm_plans(Job.objects.filter(subject_type=order)[:1]):
        assert {scan.split(":")[1] for scan in plans.scans(plan)} == {"dbqueue_job_subject"}
