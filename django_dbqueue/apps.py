"""The django_dbqueue app."""

from __future__ import annotations

from django.apps import AppConfig


class DbQueueConfig(AppConfig):
    name = "django_dbqueue"
    label = "django_dbqueue"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_dbqueue import checks  # noqa: F401 - registers the system checks.
