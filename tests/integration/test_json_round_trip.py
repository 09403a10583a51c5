"""What a job's arguments and result come back as, per database (docs/howto/databases.md).

SQLite and MariaDB store the JSON text as written, so every value comes back as it went
in. PostgreSQL's ``jsonb`` keeps the value of each number and string but not its spelling
or the order of object keys: an integral float written with an exponent (``1e+16``, what
Python writes from 1e16 up) comes back an ``int`` of the same decimal value, ``-0.0``
comes back ``0.0``, and keys come back shorter first, then in byte order. Each case is
compared as JSON text, so a changed type, sign or key order shows.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection

from django_dbqueue import Job, leases
from tests.jobs.enqueue_tasks import echo

pytestmark = pytest.mark.django_db

#: (value, what PostgreSQL gives back where that differs); elsewhere the value itself.
CASES = [
    pytest.param(1e308, 10**308, id="1e308"),
    pytest.param(1e16, 10**16, id="1e16"),
    pytest.param(-0.0, 0.0, id="minus-zero"),
    pytest.param({"b": 1, "a": 2, "aa": 3}, {"a": 2, "b": 1, "aa": 3}, id="key-order"),
    pytest.param(1e15 + 0.5, None, id="large-float"),
    pytest.param(5e-324, None, id="subnormal"),
    pytest.param(1.0, None, id="integral-float"),
    pytest.param(2**64, None, id="2**64"),
    pytest.param(10**30, None, id="10**30"),
    pytest.param("é\u2028😀\x01", None, id="text"),
]


def given_back(value: Any, on_postgresql: Any) -> str:
    converted = on_postgresql is not None and connection.vendor == "postgresql"
    return json.dumps(on_postgresql if converted else value)


@pytest.fixture(autouse=True)
def not_mysql() -> None:
    if connection.vendor == "mysql" and not connection.mysql_is_mariadb:
        pytest.skip("MySQL's binary JSON is not measured here (docs/howto/databases.md)")


@pytest.mark.parametrize(("value", "on_postgresql"), CASES)
def test_arguments_and_result_come_back_as_the_database_keeps_them(
    value: Any, on_postgresql: Any
) -> None:
    job = echo.enqueue(value, key=value)
    (lease,) = leases.claim(None, "w1", 1)

    assert json.dumps(lease.args[0]) == given_back(value, on_postgresql)
    assert json.dumps(lease.kwargs["key"]) == given_back(value, on_postgresql)
    assert leases.complete(lease, value)
    assert json.dumps(Job.objects.get(pk=job.pk).result) == given_back(value, on_postgresql)
