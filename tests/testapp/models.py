"""Business models the tests enqueue jobs for."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    state = models.CharField(max_length=20, default="new")
    total = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"order {self.pk}"
