"""System checks for the ``DBQUEUE`` settings, the database behind the queue and
the ``django.tasks`` backend's ``TASKS`` entry.

Ids: ``dbqueue.E001``-``E022`` are errors (every number from 001 to 022 is used),
``dbqueue.W001``, ``W002``, ``W003``, ``W005`` and ``W006`` warnings (there is no
``W004``); the backend's (``task_backend_checks``) are ``dbqueue.E101``-``E104`` and
``dbqueue.W101``. Each id's message and fix: ``docs/reference/checks.md``.
"""

from __future__ import annotations

import ast
import difflib
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from django.apps import AppConfig, apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.loader import MigrationLoader
from django.utils.module_loading import import_string

from django_dbqueue import collation, conf, durations, limits, sql
from django_dbqueue.retry import retry_problem
from django_dbqueue.validation import (
    INT_MAX,
    QUEUE_NAME_RULE,
    is_column_seconds,
    is_queue_name,
    is_whole,
    unclaimed,
)

if TYPE_CHECKING:
    from django.db.backends.mysql.base import DatabaseWrapper as MySQLDatabaseWrapper

SUPPORTED_VENDORS = ("postgresql", "sqlite", "mysql")
#: SQLite gained ``UPDATE ... RETURNING`` in 3.35.
SQLITE_MINIMUM = (3, 35, 0)
#: SQLite transaction modes that take the write lock at ``BEGIN`` (``dbqueue.W005``).
SQLITE_LOCKING_MODES = ("IMMEDIATE", "EXCLUSIVE")
#: ``SKIP LOCKED`` and JSON_TABLE: MySQL 8.0.1, MariaDB 10.6; exact comparison of keys
#: (``utf8mb4_0900_bin``, ``collation``): MySQL 8.0.17.
MYSQL_MINIMUM = (8, 0, 17)
MARIADB_MINIMUM = (10, 6)
SECONDS = (
    "OLDEST_READY_WARNING",
    "LEASE_SECONDS",
    "RETRY_BASE",
    "RETRY_FACTOR",
    "RETRY_CAP",
    "POLL_INTERVAL",
    "REAPER_INTERVAL",
)
SWITCHES = ("PREPARED_STATEMENTS", "WORKER_SYNCHRONOUS_COMMIT", "EAGER", "WHOLE_TABLE_RETENTION")
CHANNEL_PATTERN = r"[A-Za-z_][A-Za-z0-9_]{0,62}"
#: Keys a task backend's ``OPTIONS`` may hold; each defaults to the ``DBQUEUE`` setting.
BACKEND_OPTION_KEYS = ("MAX_ATTEMPTS", "LEASE_SECONDS", "RETRY")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@register()
def check_settings(**_: Any) -> list[CheckMessage]:
    """The shape of ``DBQUEUE``: keys, types and ranges."""
    raw = getattr(settings, "DBQUEUE", {})
    if not isinstance(raw, dict):
        return [Error("DBQUEUE must be a dict.", hint="Write DBQUEUE = {...}.", id="dbqueue.E001")]
    merged = {**conf.DEFAULTS, **raw}
    return [
        *_check_keys(raw),
        *_check_alias(merged["DATABASE"]),
        *_check_queues(merged["QUEUES"], merged["DEFAULT_QUEUE"]),
        *_check_numbers(merged),
        *_check_retention(merged),
        *_check_channel(merged["NOTIFY_CHANNEL"]),
        *_check_switches(merged),
        *_check_retry(merged["RETRY"]),
        *_check_pooler(merged),
        *_check_other_alias("LISTEN_DATABASE", merged["LISTEN_DATABASE"], "E017"),
        *_check_other_alias("READ_DATABASE", merged["READ_DATABASE"], "E018"),
        *_check_middleware(merged["MIDDLEWARE"]),
        *_check_limits(merged),
    ]


def _check_limits(merged: dict[str, Any]) -> list[CheckMessage]:
    """``QUEUE_CONCURRENCY`` and ``QUEUE_RATE``: queue names to sizes and rates;
    ``KEY_CONCURRENCY`` and ``KEY_RATE``: a size, a rate or None (``dbqueue.E021``). A
    size is a whole number from 1, a rate ``"N/m"`` and the like (``limits``)."""
    hint = (
        "Write QUEUE_CONCURRENCY = {'queue name': N, ...}, QUEUE_RATE = {'queue name': "
        f"'100/m', ...}}, KEY_CONCURRENCY = N or None and KEY_RATE = '10/s' or None: each N "
        f"a whole number from 1 to {INT_MAX}; {limits.RATE_RULE}."
    )
    checks = {
        "CONCURRENCY": lambda value: is_whole(value, 1),
        "RATE": limits.is_rate,
    }
    problems = []
    for kind, valid in checks.items():
        per_queue, per_key = merged[f"QUEUE_{kind}"], merged[f"KEY_{kind}"]
        if not isinstance(per_queue, dict):
            problems.append(f"DBQUEUE['QUEUE_{kind}'] is {per_queue!r}; it must be a dict.")
        else:
            problems.extend(
                f"DBQUEUE['QUEUE_{kind}'] has {queue!r}: {value!r}, which is not a queue name "
                f"and a {kind.lower()}."
                for queue, value in per_queue.items()
                if not (is_queue_name(queue) and valid(value))
            )
        if per_key is not None and not valid(per_key):
            problems.append(
                f"DBQUEUE['KEY_{kind}'] is {per_key!r}; it must be None or a {kind.lower()}."
            )
    return [Error(message, hint=hint, id="dbqueue.E021") for message in problems]


def _check_keys(raw: dict[str, Any]) -> list[CheckMessage]:
    unknown = sorted(set(raw) - set(conf.DEFAULTS), key=str)
    if not unknown:
        return []
    guesses = {
        key: difflib.get_close_matches(str(key), conf.DEFAULTS, n=1, cutoff=0.5) for key in unknown
    }
    named = ", ".join(
        f"{key!r} (did you mean {guess[0]!r}?)" if guess else repr(key)
        for key, guess in guesses.items()
    )
    return [
        Warning(
            f"DBQUEUE has unknown keys {named}; they are ignored.",
            hint=f"Known keys: {', '.join(conf.DEFAULTS)}.",
            id="dbqueue.W002",
        )
    ]


def _check_alias(database: object) -> list[CheckMessage]:
    if isinstance(database, str) and database in settings.DATABASES:
        return []
    return [
        Error(
            f"DBQUEUE['DATABASE'] is {database!r}, which is not an alias in DATABASES.",
            hint=f"Use one of {sorted(settings.DATABASES)}.",
            id="dbqueue.E002",
        )
    ]


def _check_queues(queues: object, default_queue: object) -> list[CheckMessage]:
    rule = f"For queue names, {QUEUE_NAME_RULE}."
    listed = isinstance(queues, list) and bool(queues) and all(map(is_queue_name, queues))
    if queues is not None and not listed:
        return [
            Error(
                f"DBQUEUE['QUEUES'] is {queues!r}; it must be None (any queue) or a non-empty "
                "list of queue names.",
                hint=rule,
                id="dbqueue.E003",
            )
        ]
    if not is_queue_name(default_queue):
        return [
            Error(
                f"DBQUEUE['DEFAULT_QUEUE'] is {default_queue!r}, which is not a valid queue name.",
                hint=rule,
                id="dbqueue.E003",
            )
        ]
    if unclaimed(default_queue, cast("list[str] | None", queues)):
        return [
            Error(
                f"DBQUEUE['DEFAULT_QUEUE'] {default_queue!r} is not in DBQUEUE['QUEUES'] {queues}.",
                hint="Add it to QUEUES or pick one of them as DEFAULT_QUEUE.",
                id="dbqueue.E003",
            )
        ]
    return []


def _check_numbers(merged: dict[str, Any]) -> list[CheckMessage]:
    messages = _check_whole(merged, "MAX_ATTEMPTS", 1, "a whole number of 1 or more", "E004")
    for key in SECONDS:
        if not durations.is_seconds(merged[key]):
            messages.append(
                Error(
                    f"DBQUEUE[{key!r}] is {merged[key]!r}; it must be {durations.rule()}.",
                    hint=f"The default is {conf.DEFAULTS[key]}.",
                    id="dbqueue.E005",
                )
            )
    messages += _check_whole(
        merged, "HISTORY_TABLE_DAYS", 1, "a whole number of days, 1 or more", "E023"
    )
    for key in ("MAX_ARGS_BYTES", "MAX_RESULT_BYTES"):
        messages += _check_whole(
            merged, key, 0, "a whole number of bytes, 0 or more (0: no limit)", "E013"
        )
    if _is_number(merged["RETRY_FACTOR"]) and 0 < merged["RETRY_FACTOR"] < 1:
        messages.append(
            Error(
                "DBQUEUE['RETRY_FACTOR'] is below 1, so retry delays would shrink.",
                hint="Use 1 (constant delay) or more.",
                id="dbqueue.E006",
            )
        )
    return messages


def _check_whole(
    merged: dict[str, Any], key: str, minimum: int, what: str, number: str
) -> list[CheckMessage]:
    value = merged[key]
    if is_whole(value, minimum):
        return []
    return [
        Error(
            f"DBQUEUE[{key!r}] is {value!r}; it must be {what}.",
            hint=f"The default is {conf.DEFAULTS[key]}.",
            id=f"dbqueue.{number}",
        )
    ]


def _check_retention(merged: dict[str, Any]) -> list[CheckMessage]:
    return [
        Error(
            f"DBQUEUE[{key!r}] is {merged[key]!r}; it must be a timedelta of 0 or more "
            "(0: delete at the next sweep) or None (keep).",
            hint=f"For example timedelta(days=7). The default is {conf.DEFAULTS[key]!r}.",
            id="dbqueue.E007",
        )
        for key in ("SUCCEEDED_RETENTION", "DEAD_RETENTION")
        if merged[key] is not None
        and not (isinstance(merged[key], timedelta) and merged[key] >= timedelta(0))
    ]


def _check_channel(channel: object) -> list[CheckMessage]:
    if isinstance(channel, str) and re.fullmatch(CHANNEL_PATTERN, channel):
        return []
    return [
        Error(
            f"DBQUEUE['NOTIFY_CHANNEL'] is {channel!r}; it must be a PostgreSQL identifier.",
            hint="Use up to 63 letters, digits and '_', not starting with a digit.",
            id="dbqueue.E008",
        )
    ]


def _check_retry(retry: object) -> list[CheckMessage]:
    return _retry_error(
        "DBQUEUE['RETRY']", retry, "; the same shape as a TASKS backend's OPTIONS['RETRY']", "E014"
    )


def _retry_error(where: str, retry: object, hint_end: str, number: str) -> list[CheckMessage]:
    """An error when ``retry`` is no retry policy (``retry_problem``), else nothing."""
    problem = retry_problem(retry)
    if problem is None:
        return []
    return [
        Error(
            f"{where} is {retry!r}: {problem}.",
            hint="For example {'base': 2, 'factor': 2, 'cap': 3600}: seconds, factor >= 1"
            f"{hint_end}.",
            id=f"dbqueue.{number}",
        )
    ]


def _check_switches(merged: dict[str, Any]) -> list[CheckMessage]:
    return [
        Error(
            f"DBQUEUE[{key!r}] is {merged[key]!r}; it must be True or False.",
            hint=f"The default is {conf.DEFAULTS[key]}.",
            id="dbqueue.E012",
        )
        for key in SWITCHES
        if not isinstance(merged[key], bool)
    ]


def _check_pooler(merged: dict[str, Any]) -> list[CheckMessage]:
    pooler = merged["POOLER"]
    if pooler not in conf.POOLERS:
        return [
            Error(
                f"DBQUEUE['POOLER'] is {pooler!r}; it must be None or 'transaction'.",
                hint="None when the queue's database is reached directly or through a "
                "session-mode pool; 'transaction' behind PgBouncer's transaction pooling.",
                id="dbqueue.E015",
            )
        ]
    if pooler == "transaction" and merged["WORKER_SYNCHRONOUS_COMMIT"] is False:
        return [
            Error(
                "DBQUEUE['WORKER_SYNCHRONOUS_COMMIT'] is False with POOLER 'transaction': "
                "asynchronous commit is a session setting, which a transaction-mode pool "
                "would hand on to other clients, whose transactions would then commit "
                "asynchronously too.",
                hint="Remove WORKER_SYNCHRONOUS_COMMIT, or give the worker's own database "
                "role asynchronous commit (ALTER ROLE ... SET synchronous_commit = off).",
                id="dbqueue.E016",
            )
        ]
    return []


#: What each optional alias setting must reach, for its check's hint.
ALIAS_PURPOSES = {
    "LISTEN_DATABASE": "the queue's PostgreSQL directly (or through a session-mode pool)",
    "READ_DATABASE": "a replica of the queue's database (or the database itself)",
}


def _check_other_alias(key: str, alias: object, number: str) -> list[CheckMessage]:
    if alias is None or (isinstance(alias, str) and alias in settings.DATABASES):
        return []
    return [
        Error(
            f"DBQUEUE[{key!r}] is {alias!r}, which is not an alias in DATABASES.",
            hint=f"Add an alias that reaches {ALIAS_PURPOSES[key]}, or remove the key. "
            f"Aliases: {sorted(settings.DATABASES)}.",
            id=f"dbqueue.{number}",
        )
    ]


def _check_middleware(paths: object) -> list[CheckMessage]:
    """``MIDDLEWARE``: a list of dotted paths, each importing to a callable (``dbqueue.E020``)."""
    hint = (
        "List dotted paths of middleware factories, e.g. "
        "['django_dbqueue.contrib.opentelemetry.TracingMiddleware']; see the middleware docs."
    )
    if not isinstance(paths, (list, tuple)) or not all(isinstance(p, str) for p in paths):
        message = f"DBQUEUE['MIDDLEWARE'] must be a list of dotted paths, not {paths!r}."
        return [Error(message, hint=hint, id="dbqueue.E020")]
    problems: list[CheckMessage] = []
    for path in paths:
        try:
            found = import_string(path)
        except ImportError as exc:
            problem = str(exc)
        else:
            problem = "" if callable(found) else f"{found!r} is not callable"
        if problem:
            message = f"DBQUEUE['MIDDLEWARE'] entry {path!r}: {problem}."
            problems.append(Error(message, hint=hint, id="dbqueue.E020"))
    return problems


@register(deploy=False)
def check_database(databases: Any = None, **_: Any) -> list[CheckMessage]:
    """The queue's database is one we support, and business data saves there too."""
    alias = conf.user_settings().get("DATABASE", conf.DEFAULTS["DATABASE"])
    if not isinstance(alias, str) or alias not in settings.DATABASES:
        return []  # Reported by check_settings.
    connection = connections[alias]
    messages: list[CheckMessage] = []
    if connection.vendor not in SUPPORTED_VENDORS:
        messages.append(
            Error(
                f"DBQUEUE['DATABASE'] {alias!r} uses {connection.vendor!r}, which django_dbqueue "
                "does not support.",
                hint=f"Point DBQUEUE['DATABASE'] at {' or '.join(SUPPORTED_VENDORS)}.",
                id="dbqueue.E009",
            )
        )
    elif connection.vendor == "sqlite":
        import sqlite3

        if sqlite3.sqlite_version_info < SQLITE_MINIMUM:
            messages.append(
                Error(
                    f"SQLite {sqlite3.sqlite_version} is too old: django_dbqueue needs "
                    "3.35 or newer (UPDATE ... RETURNING).",
                    hint="Use a Python built with a newer SQLite, or PostgreSQL.",
                    id="dbqueue.E010",
                )
            )
    messages += _check_business_alias(alias)
    return messages


@register(Tags.database)
def check_mysql_version(databases: Any = None, **_: Any) -> list[CheckMessage]:
    """MySQL 8.0.17+ or MariaDB 10.6+ (asks the server, so it runs with database checks)."""
    alias = conf.user_settings().get("DATABASE", conf.DEFAULTS["DATABASE"])
    if not isinstance(alias, str) or alias not in (databases or ()):
        return []
    if connections[alias].vendor != "mysql":
        return []
    connection = cast("MySQLDatabaseWrapper", connections[alias])
    name, minimum = (
        ("MariaDB", MARIADB_MINIMUM) if connection.mysql_is_mariadb else ("MySQL", MYSQL_MINIMUM)
    )
    if connection.mysql_version >= minimum:
        return []
    found = ".".join(map(str, connection.mysql_version))
    needed = ".".join(map(str, minimum))
    return [
        Error(
            f"{name} {found} is too old for django_dbqueue: it needs {name} {needed} or newer "
            "(FOR UPDATE SKIP LOCKED, JSON_TABLE, a binary NO PAD collation for keys).",
            hint="Upgrade the server (MySQL 8.0.17+ or MariaDB 10.6+), or use PostgreSQL.",
            id="dbqueue.E011",
        )
    ]


#: The isolation level the MySQL claim needs: each statement reads the latest commits.
MYSQL_ISOLATION = "read committed"


@register()
def check_mysql_isolation(**_: Any) -> list[CheckMessage]:
    """The queue's MySQL/MariaDB connection reads at READ COMMITTED (``dbqueue.E022``).

    The claim counts a limit's running jobs in a statement run after it locked the limit
    (``limits``); under REPEATABLE READ that statement would read the transaction's first
    snapshot, taken before the lock, and miss jobs another claim has just started. Django
    sets READ COMMITTED unless ``OPTIONS["isolation_level"]`` says otherwise.
    """
    alias = conf.user_settings().get("DATABASE", conf.DEFAULTS["DATABASE"])
    if not isinstance(alias, str) or alias not in settings.DATABASES:
        return []
    database = settings.DATABASES[alias]
    if not database.get("ENGINE", "").endswith("mysql"):
        return []
    level = database.get("OPTIONS", {}).get("isolation_level", MYSQL_ISOLATION)
    if level == MYSQL_ISOLATION:
        return []
    return [
        Error(
            f"DATABASES[{alias!r}]['OPTIONS']['isolation_level'] is {level!r}; django_dbqueue's "
            "claim needs 'read committed' on MySQL/MariaDB to hold its limits exact.",
            hint="Remove the option (Django's default is 'read committed') or set it so.",
            id="dbqueue.E022",
        )
    ]


@register(deploy=False)
def check_sqlite_transaction_mode(databases: Any = None, **_: Any) -> list[CheckMessage]:
    """The queue's SQLite database begins transactions ``IMMEDIATE`` (``dbqueue.W005``).

    SQLite has one writer. A transaction begun ``DEFERRED`` (Django's default)
    that reads, then writes, is refused with ``database is locked`` the moment
    another connection (a worker) holds the write lock: SQLite cannot wait for
    it without risking a deadlock, so no timeout helps. ``IMMEDIATE`` (or
    ``EXCLUSIVE``) takes the lock at ``BEGIN``, where the busy timeout applies.
    """
    alias = conf.user_settings().get("DATABASE", conf.DEFAULTS["DATABASE"])
    if not isinstance(alias, str) or alias not in settings.DATABASES:
        return []  # Reported by check_settings.
    connection = connections[alias]
    if connection.vendor != "sqlite":
        return []
    mode = connection.settings_dict.get("OPTIONS", {}).get("transaction_mode")
    if isinstance(mode, str) and mode.upper() in SQLITE_LOCKING_MODES:
        return []
    return [
        Warning(
            f"DATABASES[{alias!r}] (the queue's SQLite database) begins transactions "
            f"{mode or 'DEFERRED'}: while a worker writes, a transaction that reads and "
            "then writes (a view that enqueues) fails at once with 'database is locked', "
            "whatever the timeout.",
            hint=f'Set DATABASES[{alias!r}]["OPTIONS"]["transaction_mode"] = "IMMEDIATE".',
            id="dbqueue.W005",
        )
    ]


@register(Tags.database)
def check_mysql_key_collation(databases: Any = None, **_: Any) -> list[CheckMessage]:
    """On MySQL/MariaDB, the app's key and name columns compare exactly (``dbqueue.E019``).

    A column under a case- or accent-insensitive or PAD SPACE collation would
    merge distinct dedupe keys (the second job is never written), serial keys,
    queue and task names. Migration ``mysql_exact_key_collation`` converts the
    tables; while one of the app's migrations is unapplied the check waits for
    ``migrate``, which runs database checks first and must not be refused.
    """
    alias = conf.user_settings().get("DATABASE", conf.DEFAULTS["DATABASE"])
    if not isinstance(alias, str) or alias not in (databases or ()):
        return []
    if connections[alias].vendor != "mysql" or _migrations_pending(connections[alias]):
        return []
    connection = cast("MySQLDatabaseWrapper", connections[alias])
    exact = collation.exact_collation(connection)
    loose = sql.run(connection, "loose_collations", {"exact": exact})
    if not loose:
        return []
    named = ", ".join(
        f"{row['table_name']}.{row['column_name']} ({row['collation_name']})" for row in loose
    )
    conversions = "; ".join(
        f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 COLLATE {exact}"
        for table in sorted({row["table_name"] for row in loose})
    )
    return [
        Error(
            f"Columns of django_dbqueue's tables compare text loosely: {named}. Dedupe keys, "
            "serial keys, queue and task names that differ only in case, accents or trailing "
            "spaces would be taken for one another (a deduplicated job is never written).",
            hint="Give them the exact collation migration mysql_exact_key_collation sets: "
            f"{conversions}.",
            id="dbqueue.E019",
        )
    ]


@register(Tags.database)
def check_error_search(databases: Any = None, **_: Any) -> list[CheckMessage]:
    """On PostgreSQL, the admin's search in error text has its trigram index (``dbqueue.W006``).

    Without ``pg_trgm`` (or its index) the search still matches ids, keys, tasks
    and error codes through indexes, but not the text of errors. Waits for
    ``migrate`` while one of the app's migrations is unapplied, as E019 does.
    """
    alias = conf.user_settings().get("DATABASE", conf.DEFAULTS["DATABASE"])
    if not isinstance(alias, str) or alias not in (databases or ()):
        return []
    connection = connections[alias]
    if connection.vendor != "postgresql" or _migrations_pending(connection):
        return []
    (state,) = sql.run(connection, "error_search_state", {})
    if state["indexed"]:
        return []
    missing = (
        "the pg_trgm extension, which this server does not have"
        if not state["available"]
        else "the pg_trgm extension"
        if not state["installed"]
        else "the trigram index dbqueue_job_error_text"
    )
    build = sql.statements("postgresql")["error_search_index"]
    steps = "" if state["installed"] else "CREATE EXTENSION pg_trgm (as a role allowed to), then "
    return [
        Warning(
            f"The admin's job search cannot match error text on DATABASES[{alias!r}]: it lacks "
            f"{missing}. Ids, dedupe keys, subject ids, tasks and error codes are still matched.",
            hint=("Install PostgreSQL's contrib package, then " if not state["available"] else "")
            + f"run {steps}{' '.join(build.split())}",
            id="dbqueue.W006",
        )
    ]


def _migrations_pending(connection: BaseDatabaseWrapper) -> bool:
    """Whether a migration of django_dbqueue is not applied yet on ``connection``."""
    loader = MigrationLoader(connection, ignore_no_migrations=True)
    ours = {key for key in loader.disk_migrations if key[0] == "django_dbqueue"}
    return not ours <= set(loader.applied_migrations or ())


def _check_business_alias(alias: str) -> list[CheckMessage]:
    elsewhere = sorted(
        model._meta.label
        for model in apps.get_models()
        if model._meta.app_label not in ("django_dbqueue", "contenttypes")
        and router.db_for_write(model) != alias
    )
    if not elsewhere:
        return []
    shown = ", ".join(elsewhere[:3]) + (" ..." if len(elsewhere) > 3 else "")
    return [
        Warning(
            f"DBQUEUE['DATABASE'] is {alias!r} but {shown} save on another database, so "
            "enqueue() cannot share their transaction.",
            hint=(
                "Set DBQUEUE['DATABASE'] to the alias those models save on, "
                f"or route them to {alias!r}."
            ),
            id="dbqueue.W001",
        )
    ]


@register()
def check_on_save_imported(
    app_configs: Sequence[AppConfig] | None = None, **_: Any
) -> list[CheckMessage]:
    """A module-level ``on_save()`` in a project module nothing imported (``dbqueue.W003``).

    Its hook is never connected, so those saves would enqueue nothing, silently.
    The project's own apps are read (not installed packages, migrations or test
    modules); ``on_save()`` inside a function, such as ``AppConfig.ready()``, is
    not looked at: it runs when that function does.
    """
    return [
        Warning(
            f"{module} calls on_save() at line {line}, but nothing imported {module} by the "
            "time the checks ran, so that hook is not connected: those saves enqueue nothing.",
            hint=(
                f"Call on_save() from {app.name}'s AppConfig.ready() (or import {module} "
                f"there), or move the call to {app.name}.tasks, which is imported at start-up."
            ),
            id="dbqueue.W003",
        )
        for app in app_configs or apps.get_app_configs()
        for module, line in _module_level_on_save_calls(app)
        if module not in sys.modules
    ]


def _module_level_on_save_calls(app: AppConfig) -> Iterator[tuple[str, int]]:
    """``(module, line)`` of each ``on_save(...)`` statement at the top of the app's modules."""
    root = Path(app.path)
    if {"site-packages", "dist-packages"} & set(root.parts):
        return
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).with_suffix("").parts
        if "migrations" in relative or any(part.startswith("test") for part in relative):
            continue
        source = path.read_text(errors="replace")
        if "on_save(" not in source:
            continue
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        module = ".".join((app.name, *relative)).removesuffix(".__init__")
        for statement in tree.body:
            call = getattr(statement, "value", None)
            if isinstance(call, ast.Call) and _called_name(call.func) == "on_save":
                yield module, statement.lineno


def _called_name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def task_backend_checks(
    alias: str, options: object, queues: Iterable[object]
) -> list[CheckMessage]:
    """The checks of ``TASKS[alias]``, a ``DatabaseQueueBackend`` (its ``check()`` calls this).

    The app is installed (``E101``), ``OPTIONS`` are valid (``E102``, ``E103``;
    unknown keys ``W101``), and every queue in ``QUEUES`` is one a worker would
    claim (``E104``).
    """
    return [
        *_check_backend_installed(alias),
        *_check_backend_options(alias, options),
        *_check_backend_queues(alias, queues),
    ]


def _check_backend_installed(alias: str) -> list[CheckMessage]:
    if apps.is_installed("django_dbqueue"):
        return []
    return [
        Error(
            f"TASKS[{alias!r}] uses DatabaseQueueBackend but django_dbqueue is not "
            "installed, so there is no job table and no worker.",
            hint="Add 'django_dbqueue' to INSTALLED_APPS and run migrate.",
            id="dbqueue.E101",
        )
    ]


def _check_backend_options(alias: str, options: object) -> list[CheckMessage]:
    where = f"TASKS[{alias!r}]['OPTIONS']"
    if not isinstance(options, dict):
        return [_backend_option_error(f"{where} must be a dict, not {options!r}.")]
    messages: list[CheckMessage] = []
    unknown = sorted(set(options) - set(BACKEND_OPTION_KEYS))
    if unknown:
        messages.append(
            Warning(
                f"{where} has unknown keys {unknown}; they are ignored.",
                hint=f"Known keys: {', '.join(BACKEND_OPTION_KEYS)}.",
                id="dbqueue.W101",
            )
        )
    max_attempts = options.get("MAX_ATTEMPTS", 1)
    if not is_whole(max_attempts, 1):
        messages.append(
            _backend_option_error(
                f"{where}['MAX_ATTEMPTS'] is {max_attempts!r}; use a whole number >= 1."
            )
        )
    lease = options.get("LEASE_SECONDS", 1)
    if not is_column_seconds(lease):
        messages.append(
            _backend_option_error(
                f"{where}['LEASE_SECONDS'] is {lease!r}; use a number of seconds > 0."
            )
        )
    return messages + _retry_error(f"{where}['RETRY']", options.get("RETRY", {}), "", "E103")


def _backend_option_error(message: str) -> CheckMessage:
    return Error(
        message,
        hint="OPTIONS takes MAX_ATTEMPTS (>= 1), LEASE_SECONDS (> 0) and RETRY "
        "({'base': 2, 'factor': 2, 'cap': 3600}); each defaults to DBQUEUE.",
        id="dbqueue.E102",
    )


def _check_backend_queues(alias: str, queues: Iterable[object]) -> list[CheckMessage]:
    allowed = conf.get().queues
    return [
        Error(
            f"TASKS[{alias!r}]['QUEUES'] has {queue!r}, which no worker would claim: "
            + (
                "it is not a valid queue name."
                if not is_queue_name(queue)
                else f"it is not in DBQUEUE['QUEUES'] {allowed}."
            ),
            hint=f"For queue names, {QUEUE_NAME_RULE}; and use a queue DBQUEUE['QUEUES'] "
            "lists (when it lists any).",
            id="dbqueue.E104",
        )
        for queue in sorted(queues, key=str)
        if not is_queue_name(queue) or unclaimed(queue, allowed)
    ]
