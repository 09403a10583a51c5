"""The named-statement files and their loader (no database needed)."""

from __future__ import annotations

import re

import pytest

from django_dbqueue.exceptions import UnsupportedDatabase
from django_dbqueue.sql import parse, statements

VENDORS = ("postgresql", "sqlite")
#: The blocks only some vendors define: a worker connection's set-up, a single-row insert,
#: the wake-up probe (PostgreSQL's LISTEN/NOTIFY), a job connection's session reset.
OPTIONAL = {
    "worker_session",
    "insert_job",
    "insert_job_call",
    "listen_session",
    "notify_probe",
    "reset_session",
}
#: The blocks only MySQL/MariaDB defines: the collation read of system check dbqueue.E019,
#: MariaDB's report of an open transaction (``worker.leftovers``).
MYSQL_ONLY = {"loose_collations", "transaction_open"}
#: The blocks only PostgreSQL defines: the pg_trgm index of the admin's search in error text,
#: the job table's bloat signals (``table_health``), and its history tables (``history``).
POSTGRESQL_ONLY = {
    "move_finished",
    "unmoved_finished",
    "retention_cutoff",
    "expired_history",
    "drop_history",
    "prepare_history",
    "hold_unmoved",
    "restore_finished",
    "vacuum_job_tables",
    "error_search_state",
    "error_search_ready",
    "error_search_recent",
    "error_search_index",
    "table_health",
}


def test_parse_splits_named_blocks_and_drops_comment_lines() -> None:
    text = """\
-- A file header that belongs to no statement.

-- name: first
-- What first guarantees.
SELECT 1
FROM a;

-- name: second
  -- an indented comment
UPDATE b SET c = %(c)s
RETURNING id;
"""

    assert parse(text) == {
        "first": "SELECT 1\nFROM a",
        "second": "UPDATE b SET c = %(c)s\nRETURNING id",
    }


def test_every_vendor_defines_the_same_statement_names_but_the_optional_ones() -> None:
    names = set(statements("postgresql")) - OPTIONAL - POSTGRESQL_ONLY
    assert set(statements("postgresql")) >= OPTIONAL | POSTGRESQL_ONLY
    for vendor in VENDORS:
        assert set(statements(vendor)) - OPTIONAL - POSTGRESQL_ONLY == names, vendor
    assert set(statements("mysql")) - OPTIONAL - MYSQL_ONLY == names
    assert set(statements("mysql")) >= MYSQL_ONLY


def test_every_statement_is_non_empty_and_comment_free() -> None:
    # One loop, not parametrize: a "postgresql" test id would trip the conftest's skip.
    for vendor in VENDORS:
        loaded = statements(vendor)
        assert loaded, vendor
        for name, sql in loaded.items():
            comments = [line for line in sql.splitlines() if line.lstrip().startswith("--")]
            assert sql.strip(), (vendor, name)
            assert comments == [], (vendor, name)


def test_vendors_take_the_same_parameters_apart_from_the_clock_and_channel() -> None:
    def parameters(sql: str) -> set[str]:
        return set(re.findall(r"%\((\w+)\)s", sql))

    postgresql, sqlite = statements("postgresql"), statements("sqlite")

    for name in postgresql.keys() - OPTIONAL - POSTGRESQL_ONLY:
        # SQLite reads the clock from %(now)s; only PostgreSQL sends NOTIFY on %(channel)s;
        # SQLite's claim reads every ready job, so no window bounds its keyed reads.
        assert parameters(sqlite[name]) - {"now"} == parameters(postgresql[name]) - {
            "channel",
            "notify",
            *(["serial_window"] if name == "claim" else []),
        }, name


def test_unknown_vendor_raises_unsupported_database_naming_supported_vendors() -> None:
    with pytest.raises(UnsupportedDatabase, match="'oracle'") as raised:
        statements("oracle")

    assert "postgresql" in str(raised.value)
    assert "sqlite" in str(raised.value)
    assert isinstance(raised.value, LookupError)
