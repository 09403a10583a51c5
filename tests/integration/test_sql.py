"""SQLite write transactions take the lock up front and retry a locked database."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator

import pytest
from django.db import OperationalError, connection

from django_dbqueue import leases, sql
from tests.jobs import tasks


@pytest.fixture
def other_writer() -> Iterator[sqlite3.Connection]:
    """A second SQLite connection that can hold the database write lock."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite locking")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout = 10")  # Make the retries, not the busy wait, matter.
    writer = sqlite3.connect(
        connection.settings_dict["NAME"], isolation_level=None, check_same_thread=False
    )
    try:
        yield writer
    finally:
        writer.close()
        connection.close()  # Drops the short busy timeout with the connection.


@pytest.mark.django_db(transaction=True)
def test_claim_retries_while_another_writer_briefly_holds_the_lock(
    other_writer: sqlite3.Connection,
) -> None:
    job = tasks.noop.enqueue()
    other_writer.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.2, other_writer.execute, ["COMMIT"])
    release.start()
    try:
        claimed = leases.claim(None, "w1", 1)
    finally:
        release.join(10)
    assert [lease.job_id for lease in claimed] == [job.pk]


@pytest.mark.django_db(transaction=True)
def test_claim_gives_up_when_the_lock_outlasts_every_retry(
    other_writer: sqlite3.Connection,
) -> None:
    tasks.noop.enqueue()
    other_writer.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(OperationalError, match="locked"):
            leases.claim(None, "w1", 1)
    finally:
        other_writer.execute("COMMIT")
    assert len(leases.claim(None, "w1", 1)) == 1


@pytest.mark.sqlite
@pytest.mark.django_db(transaction=True)
def test_on_commit_in_sqlites_own_transaction_runs_after_commit_never_after_rollback() -> None:
    """``write_transaction``'s BEGIN IMMEDIATE is no Django transaction: Django's own
    ``on_commit`` would run at once, inside it. Given ``django.db.connection`` (a proxy)."""
    ran: list[str] = []
    with sql.write_transaction(connection):
        sql.on_commit(connection, lambda: ran.append("committed"))
        assert ran == []
    assert ran == ["committed"]

    def rolled_back() -> None:
        with sql.write_transaction(connection):
            sql.on_commit(connection, lambda: ran.append("rolled back"))
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        rolled_back()
    assert ran == ["committed"]
    with sql.write_transaction(connection):  # the connection is usable: nothing left open
        pass
