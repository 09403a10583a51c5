"""Rows of the named statements, read by column name.

A statement's result is a list of ``Row`` mappings whose keys are the column
names its ``RETURNING`` or ``SELECT`` list gives (``cursor.description``, read
once per statement). Reading by name means a reordered list changes nothing,
and a column missing from it raises ``KeyError`` naming that column instead of
handing over another column's value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

#: One result row: column name -> value.
Row = Mapping[str, Any]


class Cursor(Protocol):
    """What ``fetch`` needs of a DB-API cursor that has just executed a statement."""

    @property
    def description(self) -> Any: ...

    def fetchall(self) -> Any: ...


def fetch(cursor: Cursor, description: Any = None) -> list[Row]:
    """Every row the cursor's statement returned, by column name; ``[]`` when it returns none.

    ``description`` is ``cursor.description`` when the caller read it already.
    """
    # Read once: psycopg builds the description anew on every read.
    description = description or cursor.description
    if not description:
        return []
    names = [column[0] for column in description]
    return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
