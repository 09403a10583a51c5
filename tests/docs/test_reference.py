"""The reference pages name everything the code defines, so they cannot fall behind it.

Each test reads the names from the code itself (the check ids in ``checks.py``, the keys
of ``conf.DEFAULTS``, the options of each command's parser, the metric names in
``metrics.py``) and asserts each one appears, in backticks, on its reference page.
"""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import pytest
from django.core.management import load_command_class

import django_dbqueue.management.commands
from django_dbqueue import conf

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
PACKAGE = ROOT / "django_dbqueue"
#: Options every Django command has; Django documents them.
DJANGO_OPTIONS = {
    "--help",
    "--version",
    "--verbosity",
    "--settings",
    "--pythonpath",
    "--traceback",
    "--no-color",
    "--force-color",
    "--skip-checks",
}


def page(name: str) -> str:
    return (REFERENCE / f"{name}.md").read_text()


def check_ids() -> list[str]:
    """Every id ``checks.py`` can report: ``id="dbqueue.E001"`` and the ``"E017"`` it formats."""
    source = (PACKAGE / "checks.py").read_text()
    numbers = re.findall(r'"(?:dbqueue\.)?([EW]\d{3})"', source)
    return sorted({f"dbqueue.{number}" for number in numbers})


def command_names() -> list[str]:
    return [
        module.name
        for module in pkgutil.iter_modules(django_dbqueue.management.commands.__path__)
        if not module.name.startswith("_")
    ]


def command_options() -> list[tuple[str, str]]:
    """``(command, --option)`` for every option of every command of the app."""
    found = []
    for name in command_names():
        parser = load_command_class("django_dbqueue", name).create_parser("manage.py", name)
        for action in parser._actions:
            found += [
                (name, option)
                for option in action.option_strings
                if option.startswith("--") and option not in DJANGO_OPTIONS
            ]
    return found


def metric_names() -> list[str]:
    source = (PACKAGE / "metrics.py").read_text()
    return sorted(set(re.findall(r'"(dbqueue_(?:queue|worker)_[a-z_]+)"', source)))


def test_the_code_has_what_the_pages_are_checked_for() -> None:
    assert len(check_ids()) >= 25
    assert "dbqueue.E017" in check_ids()  # formatted from a number, not written whole
    assert {"runworkers", "dbqueue_stats", "dbqueue_purge"} <= set(command_names())
    assert ("runworkers", "--concurrency") in command_options()
    assert "dbqueue_worker_thread_alive" in metric_names()


@pytest.mark.parametrize("check_id", check_ids())
def test_every_check_id_has_its_row_in_the_checks_reference(check_id: str) -> None:
    assert f"| `{check_id}`" in page("checks")


@pytest.mark.parametrize("key", sorted(conf.DEFAULTS))
def test_every_setting_is_in_the_settings_reference(key: str) -> None:
    assert f"`{key}`" in page("settings")


def test_every_command_has_its_section_in_the_commands_reference() -> None:
    headings = re.findall(r"^## `(\w+)`$", page("commands"), flags=re.M)
    assert sorted(headings) == sorted(command_names())


@pytest.mark.parametrize(("command", "option"), command_options())
def test_every_command_option_is_in_its_commands_section(command: str, option: str) -> None:
    section = page("commands").split(f"\n## `{command}`\n", 1)[1].split("\n## ", 1)[0]
    assert f"| `{option}" in section


@pytest.mark.parametrize("metric", metric_names())
def test_every_metric_is_in_the_metrics_reference(metric: str) -> None:
    assert f"`{metric}`" in page("metrics")
