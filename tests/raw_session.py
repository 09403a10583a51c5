"""A psycopg connection to the test database of its own, outside Django's (PostgreSQL)."""

from __future__ import annotations

from typing import Any

import psycopg
from django.db import connection


def raw_session(**options: Any) -> psycopg.Connection[Any]:
    """A new psycopg connection to the database Django's default connection uses, with
    ``options`` (``autocommit=True``, ``application_name=...``) passed to ``connect``."""
    settings_dict = connection.settings_dict
    params = {
        "dbname": settings_dict["NAME"],
        "host": settings_dict["HOST"],
        "port": settings_dict["PORT"],
        "user": settings_dict["USER"],
        "password": settings_dict["PASSWORD"],
    }
    return psycopg.connect(**options, **{key: value for key, value in params.items() if value})
