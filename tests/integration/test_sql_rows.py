"""Statement results are read by column name: a reordered list is harmless, a missing one loud."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.db import connection

from django_dbqueue import leases, sql
from django_dbqueue.models import Job
from tests.jobs import tasks

#: The claim's columns, as every vendor's block names them.
CLAIM_COLUMNS = {
    "id",
    "lease_token",
    "task",
    "args",
    "kwargs",
    "attempts",
    "max_attempts",
    "lease_until",
    "lease_seconds",
    "queue",
    "priority",
    "run_at",
    "backend",
    "meta",
}
#: A column list of a claim block: RETURNING, or a SELECT (MySQL's last, PostgreSQL's over the
#: leased rows). The claim's own is the last one that names ``lease_token``: statements after
#: it (the rate limits' pace on SQLite) return no rows.
COLUMN_LIST = re.compile(r"(RETURNING|SELECT)\s+((?:[\w.]+,\s*)*[\w.]+)(\s+FROM\b|\s*;|\s*$)")


def with_claim_columns(change: Callable[[list[str]], list[str]]) -> dict[str, str]:
    """The vendor's statements, the claim's result column list rewritten by ``change``."""
    real = sql.statements(connection.vendor)
    lists = COLUMN_LIST.finditer(real["claim"])
    matches = [found for found in lists if "lease_token" in found.group(2)]
    assert matches, real["claim"]
    last = matches[-1]
    columns = [column.strip() for column in last.group(2).split(",")]
    rewritten = f"{last.group(1)} {', '.join(change(columns))}{last.group(3)}"
    claim = real["claim"][: last.start()] + rewritten + real["claim"][last.end() :]
    return {**real, "claim": claim}


@pytest.mark.django_db(transaction=True)
def test_claim_returns_rows_by_column_name() -> None:
    tasks.noop.enqueue()
    rows = sql.run_alone(connection, "claim", leases.claim_params(None, "w1", 1))
    (row,) = rows
    assert set(row) == CLAIM_COLUMNS


@pytest.mark.django_db(transaction=True)
def test_a_reordered_column_list_changes_no_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    job = tasks.send_invoice.using(priority=7, queue="default").enqueue(42)
    reordered = with_claim_columns(lambda columns: columns[::-1])
    monkeypatch.setattr(sql, "statements", lambda vendor: reordered)

    (lease,) = leases.claim(None, "w1", 1)

    stored = Job.objects.get(pk=job.pk)
    assert (lease.job_id, lease.task, lease.args, lease.kwargs) == (job.pk, job.task, [42], {})
    assert (lease.attempt, lease.max_attempts, lease.lease_token) == (1, stored.max_attempts, 1)
    assert (lease.lease_until, lease.lease_seconds) == (stored.lease_until, stored.lease_seconds)
    assert (lease.queue, lease.backend) == ("default", None)


@pytest.mark.django_db(transaction=True)
def test_a_column_missing_from_the_list_raises_key_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks.noop.enqueue()
    without_priority = with_claim_columns(
        lambda columns: [column for column in columns if not column.endswith("priority")]
    )
    monkeypatch.setattr(sql, "statements", lambda vendor: without_priority)

    with pytest.raises(KeyError, match="'priority'"):
        leases.claim(None, "w1", 1)
