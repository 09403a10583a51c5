"""Migrating a job table that is in use: enqueues go on while PostgreSQL rebuilds indexes;
MySQL/MariaDB tables made under the server's loose default collation are made exact.

Each test migrates a database of its own on the test server.

Migration 0007 replaces two indexes with ``CREATE INDEX CONCURRENTLY``. The test
makes the build wait, by holding a transaction that has written to the table, and
enqueues meanwhile: a plain ``CREATE INDEX`` would queue its table lock behind that
transaction and every later write behind the lock, so the enqueue would wait too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests.e2e.conftest import ROOT
from tests.waiting import WAIT, wait_until

INSERT_JOB = """
    INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at, attempts,
        max_attempts, lease_token, lease_seconds, created_at, last_worker_id,
        last_error_code, last_error, errors)
    VALUES ('default', 'tests.jobs.tasks.noop', '[]', '{}', 'ready', 0, now(), 0, 3, 0, 60,
        now(), '', '', '', '[]')
"""

#: A ready job with the dedupe key given as the statement's one parameter (MySQL/MariaDB).
INSERT_KEYED_JOB_MYSQL = """
    INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at, attempts,
        max_attempts, lease_token, lease_seconds, created_at, last_worker_id,
        last_error_code, last_error, errors, dedupe_key)
    VALUES ('default', 'tests.jobs.tasks.noop', '[]', '{}', 'ready', 0, UTC_TIMESTAMP(6), 0, 3,
        0, 60, UTC_TIMESTAMP(6), '', '', '', '[]', %s)
"""


@pytest.fixture
def database_url() -> Iterator[str]:
    """A database of the test's own on the test server, dropped afterwards."""
    settings = connection.settings_dict
    name = f"dbqueue_migrate_{uuid.uuid4().hex[:8]}"
    server = f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT']}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield f"{server}/{name}"
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


#: ``manage.py migrate`` with ``USE_TZ = False`` and a ``TIME_ZONE`` that has DST.
MIGRATE_WITHOUT_TZ = (
    "import sys, tests.settings as s\n"
    "s.USE_TZ, s.TIME_ZONE = False, 'Europe/Paris'\n"
    "from django.core.management import execute_from_command_line\n"
    "execute_from_command_line(['django-admin', 'migrate', *sys.argv[1:]])\n"
)


def migrate(url: str, *target: str, use_tz: bool = True) -> subprocess.Popen[str]:
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    command = ["-m", "django", "migrate"] if use_tz else ["-c", MIGRATE_WITHOUT_TZ]
    return subprocess.Popen(
        [sys.executable, *command, "-v0", *target],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finished(process: subprocess.Popen[str]) -> str:
    output, _ = process.communicate(timeout=WAIT)
    assert process.returncode == 0, output
    return output


@pytest.mark.postgresql
def test_migration_0007_rebuilds_its_indexes_while_jobs_are_enqueued(database_url: str) -> None:
    finished(migrate(database_url, "django_dbqueue", "0006"))
    with (
        psycopg.connect(database_url) as writer,
        psycopg.connect(database_url, autocommit=True) as observer,
    ):
        writer.execute(INSERT_JOB)  # a write in flight: the index build must wait for it
        migration = migrate(database_url)
        try:
            wait_until(
                lambda: observer.execute(
                    "SELECT 1 FROM pg_stat_progress_create_index p "
                    "JOIN pg_class c ON c.oid = p.relid WHERE c.relname = 'dbqueue_job' "
                    "AND p.phase LIKE 'waiting for%'"
                ).fetchone(),
                what="a concurrent index build waiting for the open write",
            )
            observer.execute("SET lock_timeout = '2s'")
            observer.execute(INSERT_JOB)  # raises LockNotAvailable if writes were held off
        finally:
            writer.commit()
        finished(migration)
        indexes = dict(
            observer.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'dbqueue_job'"
            ).fetchall()
        )
        jobs = observer.execute("SELECT count(*) FROM dbqueue_job").fetchone()
    assert indexes["dbqueue_job_finished"].endswith("WHERE (finished_at IS NOT NULL)")
    assert indexes["dbqueue_job_subject"].endswith("WHERE (subject_type_id IS NOT NULL)")
    assert not [name for name in indexes if name.endswith("_0007")]
    assert jobs == (2,)


@pytest.mark.postgresql
def test_migration_0007_can_be_reversed_and_applied_again(database_url: str) -> None:
    finished(migrate(database_url))
    finished(migrate(database_url, "django_dbqueue", "0006"))
    with psycopg.connect(database_url, autocommit=True) as observer:
        reverted = dict(
            observer.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'dbqueue_job'"
            ).fetchall()
        )
    assert reverted["dbqueue_job_finished"].endswith("(finished_at)")
    assert reverted["dbqueue_job_subject_type_id_bdec4d23"].endswith("(subject_type_id)")
    finished(migrate(database_url))


#: Two slots in the hour Paris's 2024 fall-back repeats: both 02:x5 local, an hour apart.
SLOTS_0010 = {"a": "2024-10-27 00:45:00+00", "b": "2024-10-27 01:15:00+00"}
SLOTS_0011 = {"a": 1729989900, "b": 1729991700}


def periodic_slots(url: str) -> dict[str, object]:
    with psycopg.connect(url, autocommit=True) as observer:
        rows = observer.execute("SELECT task, last_slot FROM dbqueue_periodic_slot").fetchall()
    return dict(rows)


@pytest.mark.postgresql
@pytest.mark.parametrize("use_tz", [True, False], ids=["use_tz_on", "use_tz_off"])
def test_migration_0011_stores_recorded_slots_as_utc_epoch_seconds_and_back(
    database_url: str, use_tz: bool
) -> None:
    finished(migrate(database_url, "django_dbqueue", "0010"))
    with psycopg.connect(database_url, autocommit=True) as writer:
        for task, slot in SLOTS_0010.items():
            writer.execute(
                "INSERT INTO dbqueue_periodic_slot (task, last_slot) VALUES (%s, %s)", (task, slot)
            )
    finished(migrate(database_url, "django_dbqueue", "0011", use_tz=use_tz))
    assert periodic_slots(database_url) == SLOTS_0011

    finished(migrate(database_url, "django_dbqueue", "0010", use_tz=use_tz))
    assert periodic_slots(database_url) == {
        "a": datetime(2024, 10, 27, 0, 45, tzinfo=dt_timezone.utc),
        "b": datetime(2024, 10, 27, 1, 15, tzinfo=dt_timezone.utc),
    }
    finished(migrate(database_url))
    assert periodic_slots(database_url) == SLOTS_0011


#: The indexes migration 0013 adds (issue 34: the admin's search and filters).
SEARCH_INDEXES = {
    "dbqueue_job_queue",
    "dbqueue_job_task",
    "dbqueue_job_dedupe_key",
    "dbqueue_job_cancelled",
    "dbqueue_job_failed",
    "dbqueue_job_error_text",
}


def valid_indexes(url: str) -> set[str]:
    """The names of the job table's valid indexes."""
    with psycopg.connect(url, autocommit=True) as observer:
        rows = observer.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = 'dbqueue_job'::regclass AND i.indisvalid"
        ).fetchall()
    return {name for (name,) in rows}


@pytest.mark.postgresql
def test_migration_0013_builds_the_search_indexes_with_pg_trgm_and_can_be_reversed(
    database_url: str,
) -> None:
    finished(migrate(database_url, "django_dbqueue", "0010"))
    assert not valid_indexes(database_url) & SEARCH_INDEXES
    finished(migrate(database_url))
    assert valid_indexes(database_url) >= SEARCH_INDEXES
    with psycopg.connect(database_url, autocommit=True) as observer:
        (trigram,) = observer.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'dbqueue_job_error_text'"
        ).fetchone()
    assert "gin_trgm_ops" in trigram
    assert "WHERE (last_error <> ''::text)" in trigram
    finished(migrate(database_url, "django_dbqueue", "0010"))
    assert not valid_indexes(database_url) & SEARCH_INDEXES
    finished(migrate(database_url))
    assert valid_indexes(database_url) >= SEARCH_INDEXES


@pytest.fixture
def mysql_database_url() -> Iterator[str]:
    """A database of the test's own on the MySQL/MariaDB test server, in the server's
    default collation, dropped afterwards."""
    import MySQLdb  # the driver is installed only where the MySQL tests run

    settings = connection.settings_dict
    name = f"dbqueue_migrate_{uuid.uuid4().hex[:8]}"
    server = {"host": settings["HOST"], "port": int(settings["PORT"]), "user": settings["USER"]}
    admin = MySQLdb.connect(**server, password=settings["PASSWORD"])
    try:
        admin.cursor().execute(f"CREATE DATABASE {name}")
        yield f"mysql://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{name}"
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


def connect_mysql(url: str) -> Any:
    """An autocommit connection to the database ``url`` names, on the test server."""
    import MySQLdb  # the driver is installed only where the MySQL tests run

    settings = connection.settings_dict
    return MySQLdb.connect(
        host=settings["HOST"],
        port=int(settings["PORT"]),
        user=settings["USER"],
        password=settings["PASSWORD"],
        database=url.rsplit("/", 1)[1],
        autocommit=True,
        charset="utf8mb4",
    )


@pytest.mark.mysql
def test_migration_0009_makes_an_existing_mysql_table_compare_keys_exactly(
    mysql_database_url: str,
) -> None:
    import MySQLdb  # the driver is installed only where the MySQL tests run

    finished(migrate(mysql_database_url, "django_dbqueue", "0008"))
    table = connect_mysql(mysql_database_url)
    insert = INSERT_KEYED_JOB_MYSQL
    table.cursor().execute(insert, ["invoice:ABC"])
    with pytest.raises(MySQLdb.IntegrityError):  # the loose default: one key to the server
        table.cursor().execute(insert, ["invoice:abc"])

    finished(migrate(mysql_database_url))  # migrate runs dbqueue.E019 first: not refused

    table.cursor().execute(insert, ["invoice:abc"])
    table.cursor().execute(insert, ["invoice:abc "])
    cursor = table.cursor()
    cursor.execute("SELECT dedupe_key FROM dbqueue_job ORDER BY id")
    assert [key for (key,) in cursor.fetchall()] == ["invoice:ABC", "invoice:abc", "invoice:abc "]
    table.close()


@pytest.mark.postgresql
def test_migration_0016_can_be_reversed_and_applied_again(database_url: str) -> None:
    finished(migrate(database_url))
    finished(migrate(database_url, "django_dbqueue", "0015"))
    with psycopg.connect(database_url, autocommit=True) as observer:
        function = observer.execute("SELECT to_regprocedure('dbqueue_awaited(bigint)')").fetchone()
        tables = observer.execute("SELECT to_regclass('dbqueue_dependency')").fetchone()
        dedupe = observer.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'dbqueue_job_active_dedupe'"
        ).fetchone()
    assert function == (None,)
    assert tables == (None,)
    assert dedupe is not None
    assert "waiting" not in dedupe[0]
    finished(migrate(database_url))
    with psycopg.connect(database_url, autocommit=True) as observer:
        awaited = observer.execute("SELECT dbqueue_awaited(1)").fetchone()
    assert awaited == (False,)


def reversed_then_applied(
    database_url: str, before: str, function: str, call: str
) -> tuple[Any, ...] | None:
    """Migrate, migrate back to ``before`` (where ``function``, a signature, must not
    exist), then forward again; what ``call`` returns then."""
    finished(migrate(database_url))
    finished(migrate(database_url, "django_dbqueue", before))
    with psycopg.connect(database_url, autocommit=True) as observer:
        assert observer.execute("SELECT to_regprocedure(%s)", [function]).fetchone() == (None,)
    finished(migrate(database_url))
    with psycopg.connect(database_url, autocommit=True) as observer:
        return observer.execute(call).fetchone()


@pytest.mark.postgresql
def test_migration_0020_can_be_reversed_and_applied_again(database_url: str) -> None:
    none_ready = reversed_then_applied(
        database_url,
        "0019",
        "dbqueue_limited_candidates(text[], integer, integer)",
        "SELECT count(*) FROM dbqueue_limited_candidates(ARRAY['default'], 10, 100)",
    )
    assert none_ready == (0,)


@pytest.mark.postgresql
def test_migration_0022_can_be_reversed_and_applied_again(database_url: str) -> None:
    """The previous build's dbqueue_awaited stays beside it (workers still running it)."""
    awaited = reversed_then_applied(
        database_url,
        "0021",
        "dbqueue_awaited_among(bigint[])",
        "SELECT dbqueue_awaited_among(ARRAY[1, 2]), dbqueue_awaited(1)",
    )
    assert awaited == ([], False)


#: One ready job of ``keyed`` through dbqueue_insert_job (migration 0021): its id, or no row
#: when the key is an active job's. Numbers are CAST, as the insert_job statement sends them.
CALL_INSERT_JOB = """
SELECT job_id FROM dbqueue_insert_job(
    queue => 'default', task => 'keyed', call => '{"args": [1], "kwargs": {}}',
    state => 'ready', priority => CAST(-2147483648 AS integer), run_at => NULL,
    delay => CAST(0 AS double precision), max_attempts => 5, lease_seconds => 60,
    dedupe_key => 'report', serial_key => NULL, subject_type_id => NULL, subject_id => NULL,
    backend => NULL, meta => NULL, pending_dependencies => 0, limit_key => NULL,
    limit_size => NULL, limit_rate => NULL, notify => true, channel => 'dbqueue'
)
"""


@pytest.mark.postgresql
def test_migration_0021_can_be_reversed_and_applied_again(database_url: str) -> None:
    insert_job = (
        "SELECT to_regprocedure('dbqueue_insert_job(text, text, jsonb, text, integer, "
        "timestamptz, double precision, integer, integer, text, text, integer, text, text, "
        "jsonb, integer, text, integer, double precision, boolean, text)')"
    )
    finished(migrate(database_url))
    finished(migrate(database_url, "django_dbqueue", "0020"))
    with psycopg.connect(database_url, autocommit=True) as observer:
        assert observer.execute(insert_job).fetchone() == (None,)
    finished(migrate(database_url))
    row, duplicate = called_twice(database_url, CALL_INSERT_JOB)
    assert duplicate == []  # the key is the ready job's: skipped, no error
    assert row == KEYED_ROW_VALUES


#: The row of the job an insert function's test writes, as ``called_twice`` reads it.
KEYED_ROW = (
    "SELECT state, args, kwargs, priority, run_at = created_at, meta IS NULL, "
    "limit_key IS NULL FROM dbqueue_job WHERE id = %s"
)
KEYED_ROW_VALUES = ("ready", [1], {}, -(2**31), True, True, True)


def called_twice(url: str, call: str) -> tuple[tuple[Any, ...] | None, list[tuple[Any, ...]]]:
    """Run ``call`` (one job of ``keyed`` through an insert function, with a dedupe key)
    twice: the row of the job the first wrote (``KEYED_ROW``), and what the second returned."""
    with psycopg.connect(url, autocommit=True) as observer:
        (job_id,) = observer.execute(call).fetchone()
        duplicate = observer.execute(call).fetchall()
        return observer.execute(KEYED_ROW, [job_id]).fetchone(), duplicate


#: One ready job of ``keyed`` through dbqueue_enqueue_job (migration 0025), its shape as one
#: JSON object: its id, or no row when the key is an active job's.
CALL_ENQUEUE_JOB = """
SELECT job_id FROM dbqueue_enqueue_job(
    '{"queue": "default", "task": "keyed", "state": "ready", "priority": -2147483648,
      "run_at": null, "delay": 0.0, "max_attempts": 5, "lease_seconds": 60,
      "dedupe_key": "report", "serial_key": null, "subject_type_id": null,
      "subject_id": null, "backend": null, "meta": null, "pending_dependencies": 0,
      "limit_key": null, "limit_size": null, "limit_rate": null, "channel": "dbqueue"}',
    '{"args": [1], "kwargs": {}}', true
)
"""


@pytest.mark.postgresql
def test_migration_0025_can_be_reversed_and_applied_again(database_url: str) -> None:
    """Backward it drops dbqueue_enqueue_job and leaves 0021's dbqueue_insert_job (the
    previous build still calls it); forward again, the call writes the job once."""
    enqueue_job = "dbqueue_enqueue_job(jsonb, jsonb, boolean)"
    applied = reversed_then_applied(
        database_url, "0024", enqueue_job, f"SELECT to_regprocedure('{enqueue_job}') IS NOT NULL"
    )
    assert applied == (True,)
    row, duplicate = called_twice(database_url, CALL_ENQUEUE_JOB)
    assert duplicate == []  # the key is the ready job's: skipped, no error
    assert row == KEYED_ROW_VALUES
    previous_build = called_twice(database_url, CALL_INSERT_JOB.replace("report", "other"))
    assert previous_build == (KEYED_ROW_VALUES, [])


#: Every index of the dead jobs by kind (migration 0024) on dbqueue_job and its history
#: tables: ``(table, index, valid)``.
DEAD_KINDS_INDEXES = r"""
SELECT i.indrelid::regclass::text, i.indexrelid::regclass::text, i.indisvalid FROM pg_index i
WHERE (i.indrelid = 'dbqueue_job'::regclass
       OR i.indrelid IN (SELECT inhrelid FROM pg_inherits
                         WHERE inhparent = 'dbqueue_job'::regclass))
  AND pg_get_indexdef(i.indexrelid)
      LIKE '% USING btree (queue, task, last_error_code) WHERE ((state)::text = ''dead''::text)'
ORDER BY 1
"""


def dead_kinds_indexes(url: str) -> list[tuple[str, str, bool]]:
    with psycopg.connect(url, autocommit=True) as observer:
        return observer.execute(DEAD_KINDS_INDEXES).fetchall()


def history_table(url: str, state: str, finished_at: str) -> None:
    """Create the history table of a job ``state`` that finished at ``finished_at``."""
    with psycopg.connect(url, autocommit=True) as observer:
        observer.execute(f"SELECT dbqueue_history_table('{state}', {finished_at}, 1)")


#: The copy of the dead jobs' index by kind on the history table of dead and cancelled
#: jobs, as migration 0024 and LIKE ... INCLUDING INDEXES both name it.
ENDED_COPY = "dbqueue_job_ended_queue_task_last_error_code_idx"


@pytest.mark.postgresql
def test_migration_0024_indexes_the_dead_jobs_by_kind_wherever_they_are_and_reverses(
    database_url: str,
) -> None:
    """Forward: on dbqueue_job and the history table of dead jobs, not on one of succeeded
    jobs made before; a history table made later copies it. Backward: every copy goes."""
    finished(migrate(database_url, "django_dbqueue", "0023"))
    history_table(database_url, "succeeded", "now()")
    finished(migrate(database_url))
    assert dead_kinds_indexes(database_url) == [("dbqueue_job", "dbqueue_job_dead_kinds", True)]
    history_table(database_url, "dead", "now()")  # made after 0024: LIKE copies the index
    history_table(database_url, "succeeded", "now() + interval '3 days'")
    copies = dead_kinds_indexes(database_url)
    assert ("dbqueue_job_ended", ENDED_COPY, True) in copies
    assert len(copies) == 3  # dbqueue_job, the dead jobs' table, the later succeeded one
    finished(migrate(database_url, "django_dbqueue", "0023"))
    assert dead_kinds_indexes(database_url) == []
    finished(migrate(database_url))  # the dead jobs' table existed before: 0024 indexes it
    assert dead_kinds_indexes(database_url) == [
        ("dbqueue_job", "dbqueue_job_dead_kinds", True),
        ("dbqueue_job_ended", ENDED_COPY, True),
    ]


@pytest.mark.mysql
def test_migration_0016_makes_a_waiting_mysql_job_hold_its_dedupe_key_and_reverses(
    mysql_database_url: str,
) -> None:
    import MySQLdb  # the driver is installed only where the MySQL tests run

    finished(migrate(mysql_database_url))
    table = connect_mysql(mysql_database_url)
    table.cursor().execute(INSERT_KEYED_JOB_MYSQL, ["report"])
    table.cursor().execute("UPDATE dbqueue_job SET state = 'waiting', pending_dependencies = 1")
    with pytest.raises(MySQLdb.IntegrityError):  # the waiting job holds the key
        table.cursor().execute(INSERT_KEYED_JOB_MYSQL, ["report"])
    table.cursor().execute("UPDATE dbqueue_job SET state = 'ready', pending_dependencies = 0")
    table.close()

    finished(migrate(mysql_database_url, "django_dbqueue", "0015"))
    finished(migrate(mysql_database_url))
