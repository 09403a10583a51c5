"""The test project's business model in the admin, so a job's subject links to it."""

from __future__ import annotations

from django.contrib import admin

from tests.testapp.models import Order

admin.site.register(Order)
