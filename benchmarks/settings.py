"""Django settings of the benchmark run and of the workers it starts.

The database comes from ``DBQUEUE_BENCH_DATABASE_URL`` (``python -m benchmarks``
sets it from ``--database-url``) and ``CONN_MAX_AGE`` from
``DBQUEUE_BENCH_CONN_MAX_AGE`` (``0``, Django's default, unless a benchmark
compares it with ``none``: persistent connections). Worker subprocesses inherit
both. No ``LOGGING``: ``runworkers`` logs one line per job at INFO on stderr,
as it does in a project that configures nothing.
"""

from __future__ import annotations

import os

import environ

from benchmarks.env import CONN_MAX_AGE_ENV, DATABASE_URL_ENV, DEFAULT_DATABASE_URL, conn_max_age

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
DBQUEUE: dict[str, object] = {}
