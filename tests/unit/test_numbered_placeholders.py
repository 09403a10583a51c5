"""The statement files' placeholders numbered as PostgreSQL's own, once per statement
(``sql.psycopg3.numbered``; no database needed)."""

from __future__ import annotations

import re

import pytest

from django_dbqueue.sql import statements
from django_dbqueue.sql.psycopg3 import numbered

NAMED = re.compile(r"%\((\w+)\)s")


def test_each_name_gets_one_number_in_order_of_first_use() -> None:
    text, names = numbered("SELECT %(b)s, %(a)s, %(b)s::int, %(c)s WHERE x = %(a)s")
    assert text == "SELECT $1, $2, $1::int, $3 WHERE x = $2"
    assert names == ("b", "a", "c")


def test_a_doubled_percent_is_a_literal_one() -> None:
    assert numbered("SELECT '100%%' || %(x)s") == ("SELECT '100%' || $1", ("x",))


@pytest.mark.parametrize("statement", ["SELECT 5 % 2", "SELECT %s", "SELECT %(x)d"])
def test_a_percent_that_is_no_placeholder_is_refused(statement: str) -> None:
    with pytest.raises(ValueError, match="no placeholder"):
        numbered(statement)


@pytest.mark.parametrize("name", sorted(statements("postgresql")))
def test_every_postgresql_statement_numbers_each_of_its_names(name: str) -> None:
    statement = statements("postgresql")[name]
    text, names = numbered(statement)
    assert sorted(names) == sorted(set(NAMED.findall(statement)))
    assert "%(" not in text
    assert set(re.findall(r"\$(\d+)", text)) == {str(n) for n in range(1, len(names) + 1)}
