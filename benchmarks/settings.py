"""Django settings of the benchmark run and of the workers it starts.

The database comes from ``DBQUEUE_BENCH_DATABASE_URL`` (``python -m benchmarks``
sets it from ``--database-url``) and ``CONN_MAX_AGE`` from
``DBQUEUE_BENCH_CONN_MAX_AGE`` (``0``, Django's default, unless a benchmark
compares it with ``none``: persistent connections), and ``DBQUEUE`` from
``DBQUEUE_BENCH_DBQUEUE`` (JSON; empty unless a drain sets a worker setting).
Worker subprocesses inherit all three. No ``LOGGING``: ``runworkers`` logs at
INFO on stderr (successes at DEBUG under load), as in a project that
configures nothing.
"""

from __future__ import annotations

import json
import os

import environ

from benchmarks.env import (
    CONN_MAX_AGE_ENV,
    DATABASE_URL_ENV,
    DBQUEUE_ENV,
    DEFAULT_DATABASE_URL,
    conn_max_age,
)

SECRET_KEY = "benchmarks-only"
USE_TZ = True
TIME_ZONE = "UTC"
DATABASES = {
    "default": {
        **environ.Env.db_url_config(os.environ.get(DATABASE_URL_ENV, DEFAULT_DATABASE_URL)),
        "CONN_MAX_AGE": conn_max_age(os.environ.get(CONN_MAX_AGE_ENV, "0")),
    }
}
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_dbqueue",
    "tests.testapp",
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DBQUEUE: dict[str, object] = json.loads(os.environ.get(DBQUEUE_ENV, "{}"))
