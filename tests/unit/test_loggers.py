"""Every package module that logs does so under its own name (``getLogger(__name__)``)."""

from __future__ import annotations

import importlib
import logging
import pkgutil

import django_dbqueue


def test_each_module_logs_under_its_own_name() -> None:
    misnamed = {}
    for info in pkgutil.walk_packages(django_dbqueue.__path__, "django_dbqueue."):
        if ".migrations." in info.name:
            continue
        module = importlib.import_module(info.name)
        log = getattr(module, "log", None)
        if isinstance(log, logging.Logger) and log.name != info.name:
            misnamed[info.name] = log.name
    assert misnamed == {}
