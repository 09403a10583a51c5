"""on_save hooks cannot be forgotten: tasks modules load at start-up, strays are reported (W003).

Each case sets up Django in a fresh interpreter with a small app of its own
(``forgetful``), so what start-up imports is exactly what the app declares.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

from tests.fresh_python import ROOT, run_python

HOOK = """\
from django.contrib.auth.models import Group

from django_dbqueue import on_save, task


@task
def {name}(pk: int) -> None: ...


on_save(Group, {name})
"""

SETUP = """\
import json, sys
import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=[
        "django.contrib.contenttypes", "django.contrib.auth", "django_dbqueue", "forgetful",
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    USE_TZ=True,
)
django.setup()
from django.core import checks

found = [m for m in checks.run_checks() if m.id == "dbqueue.W003"]
print(json.dumps({
    "imported": sorted(name for name in sys.modules if name.startswith("forgetful")),
    "warnings": [m.msg for m in found],
    "hints": [m.hint for m in found],
}))
"""


def start_up(app: dict[str, str], tmp_path: Path) -> dict[str, list[str]]:
    package = tmp_path / "forgetful"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, source in app.items():
        (package / name).write_text(textwrap.dedent(source))
    path = os.pathsep.join([str(tmp_path), str(ROOT)])
    done = run_python("-c", SETUP, cwd=tmp_path, PYTHONPATH=path)
    assert done.returncode == 0, done.stderr
    result: dict[str, list[str]] = json.loads(done.stdout)
    return result


def test_a_tasks_module_is_imported_at_start_up_so_its_hooks_are_connected(
    tmp_path: Path,
) -> None:
    started = start_up({"tasks.py": HOOK.format(name="welcome")}, tmp_path)

    assert "forgetful.tasks" in started["imported"]
    assert started["warnings"] == []


def test_a_hook_in_a_module_nothing_imports_is_reported_with_a_hint(tmp_path: Path) -> None:
    started = start_up({"hooks.py": HOOK.format(name="welcome")}, tmp_path)

    assert "forgetful.hooks" not in started["imported"]
    (warning,) = started["warnings"]
    assert "forgetful.hooks calls on_save() at line 10" in warning
    assert "saves enqueue nothing" in warning
    assert "AppConfig.ready()" in started["hints"][0]


def test_hooks_registered_in_app_config_ready_are_not_reported(tmp_path: Path) -> None:
    app = {
        "__init__.py": "",
        "apps.py": """\
            from django.apps import AppConfig


            class ForgetfulConfig(AppConfig):
                name = "forgetful"

                def ready(self):
                    from forgetful import hooks  # noqa: F401 - connects the on_save hook.
            """,
        "hooks.py": HOOK.format(name="welcome"),
        "helpers.py": """\
            from django_dbqueue import on_save


            def connect(model, task):
                on_save(model, task)  # inside a function: runs when it is called
            """,
    }
    started = start_up(app, tmp_path)

    assert "forgetful.hooks" in started["imported"]
    assert started["warnings"] == []
