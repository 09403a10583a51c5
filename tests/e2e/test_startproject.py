"""The README's "Testing your tasks" code, copied into a brand-new ``startproject``, works.

The files are taken from the README section itself (each ``python`` block names
its file on its first line), so the README cannot drift from what runs. The
project is Django's default one, on its default SQLite database.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.fresh_python import ROOT, run_python


def readme_files(section: str) -> dict[str, str]:
    """``{path: code}`` of the ``python`` blocks of README section ``section``."""
    readme = (ROOT / "README.md").read_text()
    body = readme.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", body, flags=re.S)
    files = {}
    for block in blocks:
        named = re.match(r"# (\S+)", block)
        assert named is not None, f"a python block of {section!r} names no file:\n{block}"
        files[named.group(1)] = block
    return files


def run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_python(*args, cwd=project, DJANGO_SETTINGS_MODULE="mysite.settings")


def test_testing_your_tasks_works_in_a_new_startproject(tmp_path: Path) -> None:
    project = tmp_path / "mysite"
    project.mkdir()
    assert run(project, "-m", "django", "startproject", "mysite", str(project)).returncode == 0
    assert run(project, "manage.py", "startapp", "shop").returncode == 0
    with (project / "mysite" / "settings.py").open("a") as settings:
        settings.write('\nINSTALLED_APPS += ["django_dbqueue", "shop"]\n')
    files = readme_files("Testing your tasks")
    assert set(files) == {"shop/tasks.py", "shop/tests.py", "shop/test_invoices.py"}
    for path, code in files.items():
        (project / path).write_text(code)

    unittest_style = run(project, "manage.py", "test", "shop", "-v", "2")
    pytest_style = run(project, "-m", "pytest", "-p", "no:cacheprovider", "shop/test_invoices.py")

    assert unittest_style.returncode == 0, unittest_style.stdout + unittest_style.stderr
    assert "Ran 2 tests" in unittest_style.stderr
    assert pytest_style.returncode == 0, pytest_style.stdout + pytest_style.stderr
    assert "1 passed" in pytest_style.stdout
