"""The "Test your tasks" page's code, copied into a brand-new ``startproject``, works.

The files are taken from the page itself (``docs/howto/testing.md``: each block marked
``% run: project`` names its file on its first line; ``tests/docs/blocks.py`` reads
them), so the docs cannot drift from what runs. The project is Django's default one, on
its default SQLite database.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.docs import blocks
from tests.fresh_python import run_python


def run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_python(*args, cwd=project, DJANGO_SETTINGS_MODULE="mysite.settings")


def test_testing_your_tasks_works_in_a_new_startproject(tmp_path: Path) -> None:
    project = tmp_path / "mysite"
    project.mkdir()
    assert run(project, "-m", "django", "startproject", "mysite", str(project)).returncode == 0
    assert run(project, "manage.py", "startapp", "shop").returncode == 0
    with (project / "mysite" / "settings.py").open("a") as settings:
        settings.write('\nINSTALLED_APPS += ["django_dbqueue", "shop"]\n')
    files = blocks.project_files("howto/testing.md")
    assert set(files) == {"shop/tasks.py", "shop/tests.py", "shop/test_invoices.py"}
    for path, code in files.items():
        (project / path).write_text(code)

    unittest_style = run(project, "manage.py", "test", "shop", "-v", "2")
    pytest_style = run(project, "-m", "pytest", "-p", "no:cacheprovider", "shop/test_invoices.py")

    assert unittest_style.returncode == 0, unittest_style.stdout + unittest_style.stderr
    assert "Ran 2 tests" in unittest_style.stderr
    assert pytest_style.returncode == 0, pytest_style.stdout + pytest_style.stderr
    assert "1 passed" in pytest_style.stdout
