"""System checks: one test per id, and silence for a valid configuration."""

from __future__ import annotations

import contextlib
import math
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.core.checks import CheckMessage, run_checks
from django.db import connections
from pytest_django import Settings

from django_dbqueue import checks, conf, durations
from django_dbqueue.retry import Backoff


def ids(messages: list[CheckMessage]) -> list[str]:
    return [message.id for message in messages if message.id]


def only(messages: list[CheckMessage], check_id: str) -> list[CheckMessage]:
    """The messages with ``check_id``; each must say how to fix it."""
    found = [message for message in messages if message.id == check_id]
    assert found, f"{check_id} not in {ids(messages)}"
    assert all(message.hint for message in found)
    return found


def configure(settings: Settings, **values: Any) -> None:
    settings.DBQUEUE = {**settings.DBQUEUE, **values}


@pytest.fixture
def queue_alias(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A second alias ``queue`` on the same database, known to settings and connections."""
    from django.conf import settings

    config = dict(connections.settings["default"])
    # DATABASES is the dict ConnectionHandler configured; replacing it via override_settings
    # warns and is not seen by ``connections``, so add the alias to both in place.
    monkeypatch.setitem(settings.DATABASES, "queue", config)
    monkeypatch.setitem(connections.settings, "queue", config)
    yield "queue"
    with contextlib.suppress(AttributeError):  # The connection object was never created.
        del connections["queue"]


def test_test_settings_produce_no_messages() -> None:
    assert checks.check_settings() == []
    assert checks.check_database() == []
    assert checks.check_sqlite_transaction_mode() == []


def test_absent_dbqueue_setting_produces_no_messages(settings: Settings) -> None:
    del settings.DBQUEUE

    assert checks.check_settings() == []
    assert checks.check_database() == []


def test_every_default_value_is_valid(settings: Settings) -> None:
    from django_dbqueue.conf import DEFAULTS

    settings.DBQUEUE = dict(DEFAULTS)

    assert checks.check_settings() == []


def test_checks_are_registered_with_django(settings: Settings) -> None:
    configure(settings, MAX_ATTEMPTS=0)

    assert "dbqueue.E004" in ids(run_checks())


@pytest.mark.parametrize("value", [[("MAX_ATTEMPTS", 3)], "MAX_ATTEMPTS=3", None])
def test_e001_dbqueue_must_be_a_dict(settings: Settings, value: object) -> None:
    settings.DBQUEUE = value

    messages = checks.check_settings()

    assert ids(messages) == ["dbqueue.E001"]
    only(messages, "dbqueue.E001")


def test_e002_database_alias_must_be_in_databases(settings: Settings) -> None:
    configure(settings, DATABASE="missing")

    messages = checks.check_settings()

    assert ids(messages) == ["dbqueue.E002"]
    (message,) = only(messages, "dbqueue.E002")
    assert "'missing'" in message.msg
    assert "default" in message.hint
    # check_database leaves the report to check_settings instead of crashing.
    assert checks.check_database() == []


@pytest.mark.parametrize("value", [["default"], {"alias": "default"}])
def test_e002_unhashable_database_value_is_reported_not_a_crash(
    settings: Settings, value: object
) -> None:
    configure(settings, DATABASE=value)

    assert ids(checks.check_settings()) == ["dbqueue.E002"]
    assert checks.check_database() == []


@pytest.mark.parametrize(
    "values",
    [
        {"QUEUES": "default"},
        {"QUEUES": ["default", "two words"]},
        {"QUEUES": ["default", 7]},
        {"QUEUES": []},
        {"DEFAULT_QUEUE": ""},
        {"DEFAULT_QUEUE": "mail/eu"},
        {"DEFAULT_QUEUE": None},
        {"QUEUES": ["mail", "reports"]},
    ],
)
def test_e003_queues_and_default_queue_must_be_valid(
    settings: Settings, values: dict[str, Any]
) -> None:
    configure(settings, **values)

    messages = checks.check_settings()

    assert set(ids(messages)) == {"dbqueue.E003"}
    only(messages, "dbqueue.E003")


@pytest.mark.parametrize(
    "values", [{"QUEUES": None}, {"QUEUES": ["default", "mail.eu", "low-prio_2"]}]
)
def test_valid_queues_pass(settings: Settings, values: dict[str, Any]) -> None:
    configure(settings, **values)

    assert checks.check_settings() == []


def test_e003_default_queue_missing_from_queues_says_to_add_it(settings: Settings) -> None:
    configure(settings, QUEUES=["mail"], DEFAULT_QUEUE="default")

    (message,) = only(checks.check_settings(), "dbqueue.E003")

    assert "'default' is not in" in message.msg
    assert "Add it to QUEUES" in message.hint


@pytest.mark.parametrize("value", [0, -1, True, 2.5, "5"])
def test_e004_max_attempts_must_be_a_whole_number_of_one_or_more(
    settings: Settings, value: object
) -> None:
    configure(settings, MAX_ATTEMPTS=value)

    messages = checks.check_settings()

    assert ids(messages) == ["dbqueue.E004"]
    only(messages, "dbqueue.E004")


@pytest.mark.parametrize("key", checks.SECONDS)
@pytest.mark.parametrize(
    "value", [0, -3, "5", None, True, math.inf, math.nan, durations.MAX_SECONDS + 1]
)
def test_e005_numeric_settings_must_be_finite_positive_capped_numbers(
    settings: Settings, key: str, value: object
) -> None:
    configure(settings, **{key: value})

    messages = checks.check_settings()

    assert ids(messages) == ["dbqueue.E005"]
    (message,) = only(messages, "dbqueue.E005")
    assert key in message.msg


def test_e005_covers_every_number_of_seconds_setting() -> None:
    assert set(checks.SECONDS) == {
        "OLDEST_READY_WARNING",
        "LEASE_SECONDS",
        "RETRY_BASE",
        "RETRY_FACTOR",
        "RETRY_CAP",
        "POLL_INTERVAL",
        "REAPER_INTERVAL",
    }


def test_fractional_seconds_are_accepted(settings: Settings) -> None:
    configure(settings, POLL_INTERVAL=0.5, REAPER_INTERVAL=2.5, RETRY_BASE=0.25, RETRY_CAP=90.5)

    assert checks.check_settings() == []


@pytest.mark.parametrize("value", [0.4, 1.5])
def test_fractional_lease_seconds_are_accepted(settings: Settings, value: float) -> None:
    # Leases are stored in whole seconds, rounded up (see test_leases).
    configure(settings, LEASE_SECONDS=value)

    assert checks.check_settings() == []


def test_e006_retry_factor_below_one_is_rejected(settings: Settings) -> None:
    configure(settings, RETRY_FACTOR=0.5)

    messages = checks.check_settings()

    assert ids(messages) == ["dbqueue.E006"]
    only(messages, "dbqueue.E006")


def test_retry_factor_of_one_is_a_valid_constant_delay(settings: Settings) -> None:
    configure(settings, RETRY_FACTOR=1)

    assert checks.check_settings() == []


@pytest.mark.parametrize("key", ["SUCCEEDED_RETENTION", "DEAD_RETENTION"])
@pytest.mark.parametrize("value", [86400, "1 day", timedelta(days=-1)])
def test_e007_retention_must_be_a_timedelta_from_zero_or_none(
    settings: Settings, key: str, value: object
) -> None:
    configure(settings, **{key: value})

    messages = checks.check_settings()

    assert ids(messages) == ["dbqueue.E007"]
    (message,) = only(messages, "dbqueue.E007")
    assert key in message.msg


@pytest.mark.parametrize("value", [None, timedelta(0), timedelta(hours=1)])
def test_retention_accepts_none_zero_and_timedeltas(settings: Settings, value: object) -> None:
    configure(settings, SUCCEEDED_RETENTION=value, DEAD_RETENTION=value)

    assert checks.check_settings() == []


@pytest.mark.parametrize("value", ["", "db-queue", "1queue", "q" * 64, "job queue", 5])
def test_e008_notify_channel_must_be_a_postgresql_identifier(
    settings: Settings, value: object
) -> None:
    configure(settings, NOTIFY_CHANNEL=value)

    messages = checks.check_settings()

    assert ids(messages) == ["dbqueue.E008"]
    only(messages, "dbqueue.E008")


@pytest.mark.parametrize("key", checks.SWITCHES)
@pytest.mark.parametrize("value", [0, 1, "off", None])
def test_e012_switches_must_be_true_or_false(settings: Settings, key: str, value: object) -> None:
    configure(settings, **{key: value})

    messages = checks.check_settings()

    assert ids(messages) == ["dbqueue.E012"]
    (message,) = only(messages, "dbqueue.E012")
    assert key in message.msg


@pytest.mark.parametrize("key", checks.SWITCHES)
@pytest.mark.parametrize("value", [True, False])
def test_switches_accept_true_and_false(settings: Settings, key: str, value: bool) -> None:
    configure(settings, **{key: value})

    assert checks.check_settings() == []


def test_e009_unsupported_database_vendor_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connections["default"], "vendor", "oracle")

    messages = checks.check_database()

    assert ids(messages) == ["dbqueue.E009"]
    (message,) = only(messages, "dbqueue.E009")
    assert "'oracle'" in message.msg
    assert "postgresql" in message.hint
    assert "sqlite" in message.hint


def test_e010_sqlite_older_than_3_35_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connections["default"], "vendor", "sqlite")
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 30, 0))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.30.0")

    messages = checks.check_database()

    assert ids(messages) == ["dbqueue.E010"]
    (message,) = only(messages, "dbqueue.E010")
    assert "3.30.0" in message.msg


def test_sqlite_3_35_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connections["default"], "vendor", "sqlite")
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 35, 0))

    assert checks.check_database() == []


def sqlite_options(monkeypatch: pytest.MonkeyPatch, **options: object) -> None:
    """Make the default alias look like SQLite configured with ``options``."""
    monkeypatch.setattr(connections["default"], "vendor", "sqlite")
    monkeypatch.setitem(connections["default"].settings_dict, "OPTIONS", options)


@pytest.mark.parametrize("options", [{}, {"transaction_mode": "DEFERRED"}, {"timeout": 60}])
def test_w005_sqlite_queue_database_not_in_immediate_mode(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, object]
) -> None:
    sqlite_options(monkeypatch, **options)

    messages = checks.check_sqlite_transaction_mode()

    assert ids(messages) == ["dbqueue.W005"]
    (message,) = only(messages, "dbqueue.W005")
    assert "database is locked" in message.msg
    assert '["transaction_mode"] = "IMMEDIATE"' in message.hint


@pytest.mark.parametrize("mode", ["IMMEDIATE", "immediate", "EXCLUSIVE"])
def test_sqlite_in_a_mode_that_locks_at_begin_is_accepted(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    sqlite_options(monkeypatch, transaction_mode=mode)

    assert checks.check_sqlite_transaction_mode() == []


def test_transaction_mode_is_not_asked_of_other_databases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connections["default"], "vendor", "postgresql")
    monkeypatch.setitem(connections["default"].settings_dict, "OPTIONS", {})

    assert checks.check_sqlite_transaction_mode() == []


def test_w001_queue_alias_other_than_where_business_models_save(
    settings: Settings, queue_alias: str
) -> None:
    configure(settings, DATABASE=queue_alias)

    messages = checks.check_database()

    assert ids(messages) == ["dbqueue.W001"]
    (message,) = only(messages, "dbqueue.W001")
    assert "'queue'" in message.msg
    # The first three business models (by label) are named, then "...".
    elsewhere = sorted(
        model._meta.label
        for model in apps.get_models()
        if model._meta.app_label not in ("django_dbqueue", "contenttypes")
    )
    assert f"{', '.join(elsewhere[:3])} ... save on another database" in message.msg
    assert "Set DBQUEUE['DATABASE']" in message.hint
    # The alias itself is valid, so check_settings has nothing to say.
    assert checks.check_settings() == []


class QueueRouter:
    """Routes every write to ``queue``, where DBQUEUE['DATABASE'] points."""

    def db_for_write(self, model: type, **hints: Any) -> str:
        return "queue"


def test_w001_is_silent_when_business_models_are_routed_to_the_queue_alias(
    settings: Settings, queue_alias: str
) -> None:
    configure(settings, DATABASE=queue_alias)
    settings.DATABASE_ROUTERS = [f"{__name__}.QueueRouter"]

    assert checks.check_database() == []


def test_w002_unknown_keys_are_reported_with_the_known_ones(settings: Settings) -> None:
    configure(settings, LEASE=30, QUEUE="mail")

    messages = checks.check_settings()

    assert ids(messages) == ["dbqueue.W002"]
    (message,) = only(messages, "dbqueue.W002")
    assert "'LEASE'" in message.msg
    assert "'QUEUE'" in message.msg
    assert "LEASE_SECONDS" in message.hint


def test_w002_suggests_the_nearest_known_key(settings: Settings) -> None:
    configure(settings, POLL_INTERVALS=1, LEASE_SECOND=30, FROBNICATE=True)

    (message,) = only(checks.check_settings(), "dbqueue.W002")

    assert "'POLL_INTERVALS' (did you mean 'POLL_INTERVAL'?)" in message.msg
    assert "'LEASE_SECOND' (did you mean 'LEASE_SECONDS'?)" in message.msg
    assert "'FROBNICATE', " in message.msg  # nothing near it: named without a guess


@pytest.mark.parametrize("key", ["MAX_ARGS_BYTES", "MAX_RESULT_BYTES"])
@pytest.mark.parametrize("value", [-1, 1.5, "1MiB", None, True])
def test_e013_max_args_and_result_bytes_must_be_a_whole_number_of_bytes(
    settings: Settings, key: str, value: object
) -> None:
    configure(settings, **{key: value})

    messages = checks.check_settings()

    assert ids(messages) == ["dbqueue.E013"]
    (message,) = only(messages, "dbqueue.E013")
    assert key in message.msg


@pytest.mark.parametrize("key", ["MAX_ARGS_BYTES", "MAX_RESULT_BYTES"])
@pytest.mark.parametrize("value", [0, 1, 10 * 1024 * 1024])
def test_max_args_and_result_bytes_accept_zero_and_positive_sizes(
    settings: Settings, key: str, value: int
) -> None:
    configure(settings, **{key: value})

    assert checks.check_settings() == []


@pytest.mark.parametrize(
    "value",
    [{"base": 0}, {"factor": 0.5}, {"delay": 3}, [2, 2, 60], {"cap": "1h"}],
    ids=["zero-base", "shrinking", "unknown-key", "list", "text-cap"],
)
def test_e014_retry_must_have_the_tasks_options_shape(settings: Settings, value: object) -> None:
    configure(settings, RETRY=value)

    messages = checks.check_settings()

    assert ids(messages) == ["dbqueue.E014"]
    (message,) = only(messages, "dbqueue.E014")
    assert "DBQUEUE['RETRY']" in message.msg
    assert "OPTIONS['RETRY']" in message.hint


def test_retry_in_the_tasks_options_shape_overrides_the_flat_keys(settings: Settings) -> None:
    configure(settings, RETRY={"base": 0.5, "cap": 10}, RETRY_BASE=5, RETRY_FACTOR=3)

    assert checks.check_settings() == []
    assert conf.get().backoff == Backoff(base=0.5, factor=3, cap=10)


@pytest.mark.parametrize(
    ("is_mariadb", "version", "expected"),
    [
        (True, (10, 5, 9), ["dbqueue.E011"]),
        (True, (10, 6, 0), []),
        (False, (8, 0, 0), ["dbqueue.E011"]),
        (False, (8, 0, 16), ["dbqueue.E011"]),
        (False, (8, 0, 17), []),
    ],
)
def test_e011_mysql_and_mariadb_versions_without_skip_locked_are_rejected(
    monkeypatch: pytest.MonkeyPatch,
    is_mariadb: bool,
    version: tuple[int, ...],
    expected: list[str],
) -> None:
    default = connections["default"]
    monkeypatch.setattr(default, "vendor", "mysql")
    monkeypatch.setattr(default, "mysql_is_mariadb", is_mariadb, raising=False)
    monkeypatch.setattr(default, "mysql_version", version, raising=False)

    messages = checks.check_mysql_version(databases=["default"])

    assert ids(messages) == expected
    assert all("MySQL 8.0.17+ or MariaDB 10.6+" in message.hint for message in messages)


def test_e011_asks_the_server_only_when_database_checks_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connections["default"], "vendor", "mysql")
    assert checks.check_mysql_version(databases=None) == []


@pytest.mark.parametrize("pooler", ["session", "Transaction", True])
def test_e015_pooler_other_than_none_or_transaction_is_an_error(
    settings: Settings, pooler: object
) -> None:
    configure(settings, POOLER=pooler)

    messages = checks.check_settings()

    assert ids(messages) == ["dbqueue.E015"]
    (message,) = only(messages, "dbqueue.E015")
    assert repr(pooler) in message.msg
    assert "session-mode" in message.hint


@pytest.mark.parametrize("pooler", [None, "transaction"])
def test_pooler_accepts_none_and_transaction(settings: Settings, pooler: str | None) -> None:
    configure(settings, POOLER=pooler)

    assert checks.check_settings() == []


def test_e016_asynchronous_worker_commit_behind_a_transaction_pool_is_an_error(
    settings: Settings,
) -> None:
    configure(settings, POOLER="transaction", WORKER_SYNCHRONOUS_COMMIT=False)

    messages = checks.check_settings()

    assert ids(messages) == ["dbqueue.E016"]
    (message,) = only(messages, "dbqueue.E016")
    assert "other clients" in message.msg
    assert "ALTER ROLE" in message.hint


@pytest.mark.parametrize(
    ("dbqueue", "prepared"),
    [
        ({}, True),
        ({"POOLER": "transaction"}, False),
        ({"POOLER": "transaction", "PREPARED_STATEMENTS": True}, True),
        ({"PREPARED_STATEMENTS": False}, False),
    ],
)
def test_behind_a_pooler_statements_are_unprepared_unless_the_project_asks(
    settings: Settings, dbqueue: dict[str, object], prepared: bool
) -> None:
    configure(settings, **dbqueue)

    assert conf.get().prepared_statements is prepared


def test_e017_listen_database_not_in_databases_is_an_error(settings: Settings) -> None:
    configure(settings, LISTEN_DATABASE="direct")

    messages = checks.check_settings()

    assert ids(messages) == ["dbqueue.E017"]
    (message,) = only(messages, "dbqueue.E017")
    assert "'direct'" in message.msg
    assert "'default'" in message.hint


@pytest.mark.parametrize("alias", [None, "default"])
def test_listen_database_accepts_none_and_an_alias(settings: Settings, alias: str | None) -> None:
    configure(settings, LISTEN_DATABASE=alias)

    assert checks.check_settings() == []


def test_e018_read_database_not_in_databases_is_an_error(settings: Settings) -> None:
    configure(settings, READ_DATABASE="replica-1")

    messages = checks.check_settings()

    assert ids(messages) == ["dbqueue.E018"]
    (message,) = only(messages, "dbqueue.E018")
    assert "'replica-1'" in message.msg
    assert "replica" in message.hint
