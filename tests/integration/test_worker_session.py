"""The worker's own connections: set up once per connection, statements prepared (PostgreSQL)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from django.db import ProgrammingError, connection, connections, transaction
from django.test import override_settings

from django_dbqueue import leases, sql
from django_dbqueue.models import Job
from django_dbqueue.sql import statements
from django_dbqueue.sql.psycopg3 import numbered
from django_dbqueue.worker.session import worker_session
from tests.jobs import tasks

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

T = TypeVar("T")


def in_thread(action: Callable[[], T]) -> T:
    """``action()`` on a thread of its own (its own connection), which is then closed."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(action())
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test's thread.
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if errors:
        raise errors[0]
    return results[0]


def setting(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {name}")
        return str(cursor.fetchone()[0])


def prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def inside_session(action: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        with worker_session():
            return action()

    return run


def test_a_worker_connection_runs_without_jit_and_keeps_the_server_commit_setting() -> None:
    assert in_thread(lambda: setting("jit")) == "on"  # the server's default, elsewhere
    inside = in_thread(inside_session(lambda: (setting("jit"), setting("synchronous_commit"))))
    assert inside == ("off", "on")


def test_a_worker_connection_keeps_generic_plans_for_its_prepared_statements() -> None:
    assert in_thread(lambda: setting("plan_cache_mode")) == "auto"  # elsewhere
    assert in_thread(inside_session(lambda: setting("plan_cache_mode"))) == "force_generic_plan"


@override_settings(DBQUEUE={"WORKER_SYNCHRONOUS_COMMIT": False})
def test_asynchronous_worker_commits_apply_to_worker_connections_only() -> None:
    assert in_thread(inside_session(lambda: setting("synchronous_commit"))) == "off"
    assert in_thread(lambda: setting("synchronous_commit")) == "on"


def test_protocol_statements_run_prepared_on_a_worker_connection() -> None:
    tasks.noop.enqueue()

    def claim_then_list() -> list[str]:
        assert len(leases.claim(None, "w1", 1)) == 1
        return prepared_statements()

    statements = in_thread(inside_session(claim_then_list))
    claims = [text for text in statements if "FOR UPDATE SKIP LOCKED" in text]
    assert len(claims) == 1
    assert "SET state = 'running'" in claims[0]
    assert in_thread(lambda: (leases.claim(None, "w1", 1), prepared_statements())[1]) == []


def test_a_prepared_statement_is_numbered_as_psycopg_would_and_wrappers_see_it_named() -> None:
    """The server prepares the claim with ``$n`` placeholders numbered once (``numbered``),
    as psycopg numbers them; an execute wrapper sees the statement file's text and names."""
    tasks.noop.enqueue()
    seen: list[tuple[str, Any]] = []

    def note(execute: Any, text: str, params: Any, *args: Any) -> Any:
        seen.append((text, params))
        return execute(text, params, *args)

    def claim_then_list() -> list[str]:
        with connection.execute_wrapper(note):
            assert len(leases.claim(None, "w1", 1)) == 1
        return prepared_statements()

    (claim,) = [
        text for text in in_thread(inside_session(claim_then_list)) if "SKIP LOCKED" in text
    ]
    assert claim == numbered(statements("postgresql")["claim"])[0]
    ((named, params),) = [(text, params) for text, params in seen if "SKIP LOCKED" in text]
    assert named == statements("postgresql")["claim"]
    assert params["limit"] == 1


def test_a_parameter_missing_from_a_prepared_statement_is_an_error_naming_it() -> None:
    def claim_without_its_serial_window() -> list[sql.Row]:
        params = leases.claim_params(None, "w1", 1)
        del params["serial_window"]
        return sql.run(connection, "claim", params)

    with pytest.raises(ProgrammingError, match="serial_window"):
        in_thread(inside_session(claim_without_its_serial_window))
    assert Job.objects.filter(state="running").count() == 0


@pytest.mark.parametrize("use_tz", [True, False])
def test_a_prepared_claim_reads_timestamps_exactly_as_the_orm_does(use_tz: bool) -> None:
    with override_settings(USE_TZ=use_tz):
        job = tasks.noop.enqueue()
        (lease,) = in_thread(inside_session(lambda: leases.claim(None, "w1", 1)))
        stored = Job.objects.get(pk=job.pk)
    assert lease.lease_until == stored.lease_until
    assert lease.lease_until.tzinfo == stored.lease_until.tzinfo


@override_settings(DBQUEUE={"PREPARED_STATEMENTS": False})
def test_prepared_statements_can_be_turned_off_for_poolers_that_cannot_keep_them() -> None:
    tasks.noop.enqueue()

    def claim_then_list() -> list[str]:
        leases.claim(None, "w1", 1)
        return prepared_statements()

    assert in_thread(inside_session(claim_then_list)) == []
    assert in_thread(inside_session(lambda: setting("jit"))) == "off"  # still set up


def test_a_connection_opened_again_inside_the_session_is_set_up_again() -> None:
    def reconnect_then_read() -> str:
        setting("jit")
        connection.close()
        return setting("jit")

    assert in_thread(inside_session(reconnect_then_read)) == "off"


def test_the_session_closes_its_connection_so_its_settings_end_with_it() -> None:
    def open_then_leave() -> bool:
        with worker_session():
            setting("jit")
        return connection.connection is None

    assert in_thread(open_then_leave)


def test_a_connection_inside_a_transaction_is_left_as_it_is() -> None:
    with transaction.atomic():
        with worker_session():
            assert setting("jit") == "on"
        assert connection.connection is not None  # not closed under the transaction
        assert setting("jit") == "on"


@override_settings(DBQUEUE={"POOLER": "transaction"})
def test_behind_a_transaction_pool_a_worker_connection_keeps_the_server_settings() -> None:
    tasks.noop.enqueue()

    def claim_then_read() -> tuple[str, list[str]]:
        assert len(leases.claim(None, "w1", 1)) == 1
        return setting("jit"), prepared_statements()

    assert in_thread(inside_session(claim_then_read)) == ("on", [])


@override_settings(DBQUEUE={"POOLER": "transaction", "PREPARED_STATEMENTS": True})
def test_behind_a_transaction_pool_statements_prepare_only_when_asked_to() -> None:
    tasks.noop.enqueue()

    def claim_then_list() -> list[str]:
        leases.claim(None, "w1", 1)
        return prepared_statements()

    claims = [text for text in in_thread(inside_session(claim_then_list)) if "SKIP LOCKED" in text]
    assert len(claims) == 1
    assert in_thread(inside_session(lambda: setting("jit"))) == "on"
