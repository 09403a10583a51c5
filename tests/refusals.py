"""A database that refuses some writes no validation foresees: a trigger, for the tests.

``refusing(text)`` makes PostgreSQL refuse every update of a job whose
``last_error`` or ``result`` holds ``text``, as it would refuse data it can
never store. The trigger is dropped on the way out.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def refusing(text: str) -> Iterator[None]:
    """While inside, PostgreSQL refuses job updates whose error or result holds ``text``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION dbqueue_test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'refused by the test trigger'; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER dbqueue_test_refuse BEFORE UPDATE ON dbqueue_job FOR EACH ROW "
            "WHEN (strpos(NEW.last_error, %s) > 0 OR strpos(NEW.result::text, %s) > 0) "
            "EXECUTE FUNCTION dbqueue_test_refuse()",
            [text, text],
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER dbqueue_test_refuse ON dbqueue_job")
            cursor.execute("DROP FUNCTION dbqueue_test_refuse()")
