"""What ``dbqueue_stats`` and the gauges show of the job table, which only PostgreSQL
measures (``table_health``): the tests of the queues and limits set it aside here, and
``test_table_health`` checks it."""

from __future__ import annotations

from typing import Any

from django.db import connection


def measures_table() -> bool:
    """Whether this database reports the job table's health (PostgreSQL)."""
    return connection.vendor == "postgresql"


def without_table_section(output: str) -> str:
    """``dbqueue_stats``' text without its last section, the job table's, where shown."""
    if not measures_table():
        return output
    *sections, table = output.strip().split("\n\n")
    assert table.startswith("table "), output
    return "\n\n".join(sections) + "\n"


def without_table(document: dict[str, Any]) -> dict[str, Any]:
    """A ``dbqueue_stats --json`` document without ``"table"``, which is an object where the
    table is measured and ``null`` elsewhere."""
    rest = dict(document)
    table = rest.pop("table")
    assert (table is not None) == measures_table(), table
    return rest


def gauge_read_queries() -> int:
    """The queries of one read of the gauges: the jobs, the dead jobs, the pauses, the
    limits, and the table's statistics where measured."""
    return 5 if measures_table() else 4
