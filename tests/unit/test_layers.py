"""Layers point down: importing a module loads only package modules of its own layer or below.

Each case starts a fresh interpreter, sets Django up with the app installed but its
``ready()`` (which imports the checks, the runtime and the test helpers) switched off,
imports one module and reports which ``django_dbqueue`` modules that import loaded.
A module of a lower layer that pulls in a higher one, directly or through another
module, fails here, whatever the import statement looks like.
"""

from __future__ import annotations

import json

import pytest

from tests.fresh_python import ROOT, run_python

#: The schema: the model, and the collation its tables take on MySQL (migration 0009).
MODEL = {"models", "collation"}
PROTOCOL = {
    "clock",
    "conf",
    "dependencies",
    "durations",
    "errors",
    "history",
    "exceptions",
    "jsontext",
    "leases",
    "limits",
    "logfields",
    "pauses",
    "progress",
    "retry",
    "signals",
    "sql",
    "sql.psycopg3",
    "sql.rows",
    "validation",
}
FACE = {
    "",
    "arguments",
    "context",
    "enqueue",
    "middleware",
    "registry",
    "tasks",
    "wakeups",
    "workflows",
}
#: The ``django.tasks`` backend, beside the face; its system checks live in ``checks``.
TASKS_BACKEND = {"backend", "checks"}
OPERATIONS = {"admin", "dashboard", "listing", "metrics", "search", "stats", "triage"}
#: Integrations with other tools (optional extras): above the face, beside operations.
CONTRIB = {"contrib", "contrib.opentelemetry", "contrib.sentry"}

#: module -> the package modules importing it may load (beyond itself).
ALLOWED = {
    **dict.fromkeys(sorted(MODEL), MODEL),
    **dict.fromkeys(sorted(PROTOCOL), MODEL | PROTOCOL),
    **dict.fromkeys(sorted(FACE - {""}), MODEL | PROTOCOL | FACE),
    "backend": MODEL | PROTOCOL | FACE | TASKS_BACKEND,
    "checks": MODEL | PROTOCOL,
    "contrib.opentelemetry": MODEL | PROTOCOL | FACE | {"contrib"},
    "contrib.sentry": MODEL | PROTOCOL | FACE | {"contrib"},
}
#: The runtime may use everything below it, never operations.
RUNTIME = ("runnable", "reaper", "periodic", "testing", "worker.worker")

PROBE = """\
import importlib, json, sys

import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=["django.contrib.contenttypes", "django_dbqueue"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    USE_TZ=True,
)
from django_dbqueue.apps import DbQueueConfig

DbQueueConfig.ready = lambda self: None
django.setup()
before = set(sys.modules)
importlib.import_module(sys.argv[1])
loaded = [name for name in sys.modules if name not in before or name == sys.argv[1]]
print(json.dumps(sorted(name for name in loaded if name.split(".")[0] == "django_dbqueue")))
"""


def loaded_by(module: str) -> set[str]:
    """The package modules (``"leases"``, ``"sql.psycopg3"``; ``""`` for the package) that
    importing ``django_dbqueue.<module>`` loads in a fresh interpreter, itself included."""
    target = f"django_dbqueue.{module}" if module else "django_dbqueue"
    result = run_python("-c", PROBE, target, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return {name.removeprefix("django_dbqueue").lstrip(".") for name in json.loads(result.stdout)}


def test_set_up_loads_the_model_alone() -> None:
    # The package itself loads no module; set-up imports the model, which imports nothing.
    assert loaded_by("") == {""}
    assert loaded_by("models") == {"models"}


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_a_module_loads_only_its_own_layer_and_those_below(module: str) -> None:
    above = loaded_by(module) - ALLOWED[module] - {module, "", "apps"}
    assert not above, f"importing {module} loads {sorted(above)}"


@pytest.mark.parametrize("module", RUNTIME)
def test_the_runtime_loads_no_operations_or_contrib_module(module: str) -> None:
    loaded = loaded_by(module)
    assert module in loaded
    above = loaded & (OPERATIONS | CONTRIB)
    assert not above, f"importing {module} loads {sorted(above)}"


def test_the_protocol_loads_no_task_runtime_or_backend_module() -> None:
    # The rule that made leases.reap take its backoff from the caller.
    loaded = loaded_by("leases")
    assert not loaded & {"tasks", "enqueue", "runnable", "backend", "reaper", "context"}
    assert not any(name.startswith("worker") for name in loaded)
