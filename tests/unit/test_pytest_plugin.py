"""The pytest plugin (``pytest11`` entry point): fixtures where Django is set up, else inert.

Each case runs a fresh pytest in a directory of its own, so the plugin is
loaded the way an installed package's plugin is: by its entry point.
"""

from __future__ import annotations

from pathlib import Path

from tests.fresh_python import ROOT, run_python


def run_pytest(directory: Path, *args: str, settings: str | None = None) -> str:
    (directory / "test_nothing.py").write_text("def test_nothing():\n    assert True\n")
    env = {"PYTHONPATH": str(ROOT)}
    if settings is not None:
        env["DJANGO_SETTINGS_MODULE"] = settings
    done = run_python("-m", "pytest", "-p", "no:cacheprovider", *args, cwd=directory, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_plugin_is_loaded_by_its_entry_point(tmp_path: Path) -> None:
    output = run_pytest(tmp_path, "--trace-config", "-p", "no:django")

    assert "django_dbqueue.pytest_plugin" in output


def test_fixtures_are_offered_once_pytest_django_set_up_django(tmp_path: Path) -> None:
    output = run_pytest(tmp_path, "--fixtures", settings="tests.settings")

    assert "dbqueue_jobs" in output
    assert "dbqueue_run" in output


def test_projects_without_django_settings_are_left_alone(tmp_path: Path) -> None:
    output = run_pytest(tmp_path, "--fixtures")

    assert "dbqueue_jobs" not in output
    assert "1 passed" in run_pytest(tmp_path)


def test_projects_without_pytest_django_are_left_alone(tmp_path: Path) -> None:
    output = run_pytest(tmp_path, "--fixtures", "-p", "no:django", settings="tests.settings")

    assert "dbqueue_jobs" not in output
    assert "1 passed" in run_pytest(tmp_path, "-p", "no:django", settings="tests.settings")
