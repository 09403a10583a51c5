"""Settings for the test suite.

The database comes from ``DATABASE_URL`` (default: the local PostgreSQL with
trust auth). ``DATABASE_URL=sqlite:////tmp/dbqueue.sqlite3`` runs the suite on
SQLite; PostgreSQL-only tests then skip themselves.
"""

from __future__ import annotations

import environ

env = environ.Env()

SECRET_KEY = "tests-only"
USE_TZ = True
TIME_ZONE = "UTC"
DATABASES = {
    "default": env.db_url("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/postgres")
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    # The app adds MySQL equivalents of the conditional indexes and constraint (migration 0004);
    # neither server has indexes with non-key columns (include=).
    SILENCED_SYSTEM_CHECKS = ["models.W036", "models.W037", "models.W040"]
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not Django's shared in-memory database, so threads get real SQLite locking.
    DATABASES["default"]["TEST"] = {"NAME": DATABASES["default"]["NAME"] + ".test"}
    # BEGIN IMMEDIATE: a transaction that reads, then writes, waits for the write lock
    # (up to the timeout) instead of being refused with "database is locked" (dbqueue.W005).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    )
    # SQLite has no indexes with non-key columns (include=) either.
    SILENCED_SYSTEM_CHECKS = ["models.W040"]
# A second alias on the same database, standing in for a read replica (READ_DATABASE).
DATABASES["replica"] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_dbqueue",
    "tests.testapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
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
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DBQUEUE = {"LEASE_SECONDS": 30}
TASKS = {"default": {"BACKEND": "django_dbqueue.backend.DatabaseQueueBackend", "QUEUES": []}}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_dbqueue": {"handlers": ["console"], "level": "WARNING"}},
}
