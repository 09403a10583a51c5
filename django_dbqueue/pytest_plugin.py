"""The pytest plugin, loaded by pytest through the ``pytest11`` entry point.

It adds the ``dbqueue_jobs`` and ``dbqueue_run`` fixtures (``pytest_fixtures``)
only when pytest-django is active and has set up Django with django_dbqueue
installed. Projects without pytest-django, or run without
``DJANGO_SETTINGS_MODULE``, see nothing of it: this module imports no model.
"""

from __future__ import annotations

import pytest
from django.apps import apps
from django.conf import settings


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Register the fixtures once pytest-django has set Django up (it configures first)."""
    if not config.pluginmanager.hasplugin("django"):
        return
    if settings.configured and apps.ready and apps.is_installed("django_dbqueue"):
        config.pluginmanager.import_plugin("django_dbqueue.pytest_fixtures")
