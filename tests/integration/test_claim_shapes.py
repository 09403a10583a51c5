"""The claim's plain shape (one queue, no serial key in play) and its general statement agree.

``leases.claim`` runs ``claim_plain`` when it serves one named queue or every
queue, and that statement says whether the shape held; otherwise ``claim``
decides. Each case runs both statements on the same rows, each in a
transaction rolled back, and compares what they would lease, in order.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_dbqueue import leases, sql
from django_dbqueue.models import JobState
from tests.factories import JobFactory

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db]

LIMIT = 7


def run_rolled_back(name: str, params: dict[str, Any]) -> list[sql.Row]:
    """The rows block ``name`` returns, its writes undone."""
    with transaction.atomic():
        rows = sql.run(connection, name, params)
        transaction.set_rollback(True)
    return rows


def plain(queue: str | None, limit: int = LIMIT) -> tuple[bool, list[int]]:
    """Whether ``claim_plain`` took the plain shape, and the jobs it would lease, in order."""
    rows = run_rolled_back("claim_plain", {"queue": queue, "worker_id": "w1", "limit": limit})
    return rows[0]["plain"], in_claim_order(row for row in rows if row["id"] is not None)


def general(queues: list[str] | None, limit: int = LIMIT) -> list[int]:
    """The jobs the general ``claim`` would lease, in order."""
    params = {"queues": queues, "worker_id": "w1", "limit": limit, "turn": 0}
    return in_claim_order(run_rolled_back("claim", params))


def in_claim_order(rows: Iterator[sql.Row] | list[sql.Row]) -> list[int]:
    return [lease.job_id for lease in leases._leases(list(rows), "w1")]


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
def test_one_named_queue_takes_the_plain_shape_and_leases_what_claim_would(limit: int) -> None:
    JobFactory(queue="reports")
    took_plain, ids = plain("mail", limit)
    assert took_plain
    assert ids == general(["mail"], limit)
    assert len(ids) == min(limit, 12)


@pytest.mark.usefixtures("mixed_backlog")
def test_every_queue_takes_the_plain_shape_while_ready_jobs_are_in_one_queue() -> None:
    JobFactory(queue="reports", succeeded=True)
    JobFactory(queue="reports", running=True)
    took_plain, ids = plain(None)
    assert took_plain
    assert ids == general(None)
    assert ids == general(["mail"])


def test_every_queue_with_nothing_ready_is_plain_and_leases_nothing() -> None:
    JobFactory(queue="mail", running=True)
    assert plain(None) == (True, [])
    assert plain("mail") == (True, [])


@pytest.mark.usefixtures("mixed_backlog")
def test_ready_jobs_in_two_queues_leave_every_queue_to_the_general_claim() -> None:
    JobFactory(queue="reports", run_at=timezone.now() + timedelta(minutes=5))
    assert plain(None) == (False, [])
    # A named queue has no turn to share, whatever the other queues hold.
    assert plain("mail")[0]


@pytest.mark.usefixtures("mixed_backlog")
@pytest.mark.parametrize("queue", ["mail", None])
@pytest.mark.parametrize("keyed_state", [JobState.READY, JobState.RUNNING])
def test_a_ready_or_running_job_with_a_serial_key_leaves_the_claim_to_the_general_statement(
    queue: str | None, keyed_state: str
) -> None:
    # Anywhere: a key orders jobs across queues.
    JobFactory(queue="mail", serial_key="k", running=keyed_state == JobState.RUNNING)
    assert plain(queue) == (False, [])
    assert len(general([queue] if queue else None)) == LIMIT


@pytest.mark.usefixtures("mixed_backlog")
def test_finished_jobs_with_a_serial_key_keep_the_plain_shape() -> None:
    JobFactory(queue="mail", serial_key="k", succeeded=True)
    JobFactory(queue="mail", serial_key="k", dead=True)
    took_plain, ids = plain("mail")
    assert took_plain
    assert ids == general(["mail"])


class TestClaimPicksTheStatement:
    """``leases.claim`` runs the statements each shape needs, and leases the same jobs."""

    @pytest.fixture
    def statements_run(self, monkeypatch: pytest.MonkeyPatch) -> list[str]:
        names: list[str] = []
        run_alone = sql.run_alone

        def recording(connection: Any, name: str, params: Any) -> list[sql.Row]:
            names.append(name)
            return run_alone(connection, name, params)

        monkeypatch.setattr(sql, "run_alone", recording)
        return names

    @pytest.mark.parametrize("queues", [["mail"], None])
    def test_one_queue_without_serial_keys_is_one_plain_statement(
        self, statements_run: list[str], queues: list[str] | None
    ) -> None:
        jobs = [JobFactory(queue="mail", priority=n) for n in range(3)]
        claimed = leases.claim(queues, "w1", 10)
        assert [lease.job_id for lease in claimed] == [job.pk for job in reversed(jobs)]
        assert statements_run == ["claim_plain"]

    def test_a_list_of_queues_goes_straight_to_the_general_claim(
        self, statements_run: list[str]
    ) -> None:
        mail, reports = JobFactory(queue="mail"), JobFactory(queue="reports")
        claimed = leases.claim(["mail", "reports"], "w1", 10)
        assert {lease.job_id for lease in claimed} == {mail.pk, reports.pk}
        assert statements_run == ["claim"]

    def test_serial_keys_in_play_fall_back_to_the_general_claim(
        self, statements_run: list[str]
    ) -> None:
        first = JobFactory(queue="mail", serial_key="k")
        JobFactory(queue="mail", serial_key="k")
        keyless = JobFactory(queue="mail")
        claimed = leases.claim(["mail"], "w1", 10)
        assert sorted(lease.job_id for lease in claimed) == [first.pk, keyless.pk]
        assert statements_run == ["claim_plain", "claim"]
