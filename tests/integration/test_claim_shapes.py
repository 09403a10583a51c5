"""The claim's two paths, in its one statement: each runs when it should, and they agree.

PostgreSQL's ``claim`` block holds a plain path (one queue, no serial key in
play: the ready index read in order) and the general one (queue discovery,
turns, serial-key checks), each gated by ``shape.plain`` so exactly one runs.
Each case runs the real block and its general path alone (the same block with
the gates forced), each in a transaction rolled back, on the same rows and
compares the jobs they would lease, in order; ``EXPLAIN ANALYZE`` says which
path the real block took.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_dbqueue import leases, sql
from django_dbqueue.models import JobState
from django_dbqueue.sql.rows import fetch
from tests.factories import JobFactory
from tests.integration.test_claim_plan import claim_path_loops, explain_options

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db]

LIMIT = 7
#: The gates of the block's two paths, as the block spells them.
PLAIN_GATE = "WHERE (SELECT plain FROM shape)"
GENERAL_GATE = "WHERE NOT (SELECT plain FROM shape)"


def real_claim() -> str:
    return sql.statements("postgresql")["claim"]


def general_only() -> str:
    """The claim block with its plain path shut and its general path always open."""
    statement = real_claim()
    assert statement.count(PLAIN_GATE) == 1, "the plain path's gate has changed"
    assert statement.count(GENERAL_GATE) == 1, "the general path's gate has changed"
    return statement.replace(PLAIN_GATE, "WHERE false").replace(GENERAL_GATE, "WHERE true")


def rolled_back(statement: str, queues: list[str] | None, limit: int) -> list[sql.Row]:
    """The rows ``statement`` returns for a claim of ``queues``, its writes undone."""
    params = leases.claim_params(queues, "w1", limit)
    adapted = {key: sql.adapt(connection, value) for key, value in params.items()}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, adapted)
        rows = fetch(cursor)
        transaction.set_rollback(True)
    return rows


def in_claim_order(rows: list[sql.Row]) -> list[int]:
    return [lease.job_id for lease in leases._leases(rows, "w1")]


def path_taken(queues: list[str] | None, limit: int) -> str:
    """Which path the real claim ran (its candidate scan looped), by ``EXPLAIN ANALYZE``."""
    (explained,) = rolled_back(f"EXPLAIN ({explain_options(True)}) " + real_claim(), queues, limit)
    loops = claim_path_loops(json.dumps(explained["QUERY PLAN"]))
    taken = [path for path, count in loops.items() if count > 0]
    assert len(taken) == 1, loops
    return taken[0]


def claim(queues: list[str] | None, limit: int = LIMIT) -> tuple[str, list[int]]:
    """The path the claim takes and the jobs it leases, in order, after checking that its
    general path alone leases the same jobs in the same order."""
    ids = in_claim_order(rolled_back(real_claim(), queues, limit))
    assert ids == in_claim_order(rolled_back(general_only(), queues, limit))
    return path_taken(queues, limit), ids


@pytest.fixture
def mixed_backlog() -> None:
    """Due jobs of several priorities and ages in ``mail``, with rows no claim may take."""
    now = timezone.now()
    for n in range(12):
        JobFactory(queue="mail", priority=n % 3, run_at=now - timedelta(seconds=n % 5))
    JobFactory(queue="mail", run_at=now + timedelta(minutes=5))
    JobFactory(queue="mail", running=True)
    JobFactory(queue="mail", succeeded=True)
    JobFactory(queue="mail", dead=True)


@pytest.mark.usefixtures("mixed_backlog")
@pytest.mark.parametrize("limit", [1, LIMIT, 100])
def test_one_named_queue_takes_the_plain_path_and_leases_what_the_general_one_would(
    limit: int,
) -> None:
    JobFactory(queue="reports")
    path, ids = claim(["mail"], limit)
    assert path == "plain"
    assert len(ids) == min(limit, 12)


@pytest.mark.usefixtures("mixed_backlog")
def test_every_queue_takes_the_plain_path_while_ready_jobs_are_in_one_queue() -> None:
    JobFactory(queue="reports", succeeded=True)
    JobFactory(queue="reports", running=True)
    path, ids = claim(None)
    assert path == "plain"
    assert ids == claim(["mail"])[1]
    assert len(ids) == LIMIT


def test_nothing_ready_takes_the_plain_path_and_leases_nothing() -> None:
    JobFactory(queue="mail", running=True)
    assert claim(None) == ("plain", [])
    assert claim(["mail"]) == ("plain", [])


@pytest.mark.usefixtures("mixed_backlog")
def test_ready_jobs_in_two_queues_leave_every_queue_to_the_general_path() -> None:
    JobFactory(queue="reports", run_at=timezone.now() + timedelta(minutes=5))
    assert claim(None)[0] == "general"
    # A named queue has no turn to share, whatever the other queues hold.
    assert claim(["mail"])[0] == "plain"


@pytest.mark.usefixtures("mixed_backlog")
def test_a_list_of_queues_takes_the_general_path() -> None:
    reports = JobFactory(queue="reports")
    path, ids = claim(["mail", "reports"])
    assert path == "general"
    assert reports.pk in ids


@pytest.mark.usefixtures("mixed_backlog")
@pytest.mark.parametrize("queues", [["mail"], None])
@pytest.mark.parametrize("keyed_state", [JobState.READY, JobState.RUNNING])
def test_a_ready_or_running_job_with_a_serial_key_leaves_the_claim_to_the_general_path(
    queues: list[str] | None, keyed_state: str
) -> None:
    # Anywhere: a key orders jobs across queues.
    JobFactory(queue="mail", serial_key="k", running=keyed_state == JobState.RUNNING)
    path, ids = claim(queues)
    assert path == "general"
    assert len(ids) == LIMIT


@pytest.mark.usefixtures("mixed_backlog")
def test_finished_jobs_with_a_serial_key_keep_the_plain_path() -> None:
    JobFactory(queue="mail", serial_key="k", succeeded=True)
    JobFactory(queue="mail", serial_key="k", dead=True)
    assert claim(["mail"])[0] == "plain"


class TestClaimIsOneStatement:
    """``leases.claim`` sends the one claim statement whatever the shape."""

    def claimed(self, queues: list[str] | None) -> list[int]:
        with CaptureQueriesContext(connection) as queries:
            claimed = leases.claim(queues, "w1", 10)
        assert len(queries.captured_queries) == 1, queries.captured_queries
        assert "FOR UPDATE SKIP LOCKED" in queries.captured_queries[0]["sql"]
        return [lease.job_id for lease in claimed]

    @pytest.mark.parametrize("queues", [["mail"], None])
    def test_one_queue_without_serial_keys(self, queues: list[str] | None) -> None:
        jobs = [JobFactory(queue="mail", priority=n) for n in range(3)]
        assert self.claimed(queues) == [job.pk for job in reversed(jobs)]

    @pytest.mark.parametrize("queues", [["mail", "reports"], None])
    def test_several_queues(self, queues: list[str] | None) -> None:
        mail, reports = JobFactory(queue="mail"), JobFactory(queue="reports")
        assert sorted(self.claimed(queues)) == [mail.pk, reports.pk]

    def test_serial_keys_in_play(self) -> None:
        first = JobFactory(queue="mail", serial_key="k")
        JobFactory(queue="mail", serial_key="k")
        keyless = JobFactory(queue="mail")
        assert sorted(self.claimed(["mail"])) == [first.pk, keyless.pk]
