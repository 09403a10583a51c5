"""``AmongIds``: a filter on a long list of ids, sent to PostgreSQL as one array.

Django's ``pk__in=ids`` writes one placeholder per id (``IN (%s, %s, ...)``); with
client-side binding, Django's default on psycopg, each statement's text is then
split at every placeholder and each id quoted into it, over and over: an admin
search page sends its thousand matches three times (the count's plan, the count
and the page), a workflow filter up to ten thousand ids. ``AmongIds`` sends
``id = ANY(%s)`` with the list as one array parameter, which PostgreSQL plans
and reads as it does the ``IN`` list (an index scan of the array's values). On
MySQL, MariaDB and SQLite it is Django's ``IN``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F
from django.db.models.lookups import In
from django.db.models.sql.compiler import SQLCompiler


class AmongIds(In):
    """``field IN ids``, as ``field = ANY(%s)`` with one array parameter on PostgreSQL.

    Used as an expression in ``filter()``: ``jobs.filter(AmongIds(F("pk"), ids))``,
    or through ``among``.
    """

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper
    ) -> tuple[str, tuple[Any, ...]]:
        if not self.rhs:
            raise EmptyResultSet  # as Django's IN: no statement is sent for no ids
        lhs, lhs_params = self.process_lhs(compiler, connection)
        return f"{lhs} = ANY(%s)", (*lhs_params, [int(value) for value in self.rhs])


def among(ids: list[int], field: str = "pk") -> AmongIds:
    """The filter ``field`` (the primary key unless named) in ``ids``, a list of ints."""
    return AmongIds(F(field), ids)
