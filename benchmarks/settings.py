"""Django settings of the benchmark run and of the workers it starts.

The database comes from ``DBQUEUE_BENCH_DATABASE_URL`` (``python -m benchmarks``
sets it from ``--database-url``) and ``CONN_MAX_AGE`` from
``DBQUEUE_BENCH_CONN_MAX_AGE`` (``0``, Django's default, unless a benchmark
compares it with ``none``: persistent connections), and ``DBQUEUE`` from
``DBQUEUE_BENCH_DBQUEUE`` (JSON; empty unless a drain sets a worker setting).
Worker subprocesses inherit all three; a ``DBQUEUE`` whose ``MIDDLEWARE`` lists
the tracing middleware also gets OpenTelemetry's SDK, spans made and dropped
(``benchmarks.otel``). No ``LOGGING``: ``runworkers`` logs at
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
    "django.contrib.admin",
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_dbqueue",
    "tests.testapp",
]
# The admin pages benchmark (benchmarks/admin_pages.py) fetches the job admin.
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DBQUEUE: dict[str, object] = json.loads(os.environ.get(DBQUEUE_ENV, "{}"))
_middleware: list[str] = DBQUEUE.get("MIDDLEWARE", [])  # type: ignore[assignment]
if any(path.startswith("django_dbqueue.contrib.opentelemetry.") for path in _middleware):
    # The otel extra, imported only by the workers of the tracing benchmark.
    from benchmarks.otel import install_sdk

    install_sdk()
