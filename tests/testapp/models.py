"""Business models the tests enqueue jobs for."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    state = models.CharField(max_length=20, default="new")
    total = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"order {self.pk}"


class Execution(models.Model):
    """One attempt of a job as the task itself saw it (e2e tests)."""

    job_id = models.BigIntegerField()
    attempt = models.PositiveIntegerField()
    worker_id = models.CharField(max_length=255)
    idempotency_key = models.CharField(max_length=100)
    label = models.CharField(max_length=100, blank=True, default="")
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} on {self.worker_id}"


class Effect(models.Model):
    """An external side effect, deduplicated by idempotency key (e2e tests)."""

    key = models.CharField(max_length=100, unique=True)
    applied = models.PositiveIntegerField(default=1)

    def __str__(self) -> str:
        return self.key


class Gate(models.Model):
    """A named switch a blocking e2e task waits on until the test opens it."""

    name = models.CharField(max_length=100, unique=True)
    is_open = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.name} ({'open' if self.is_open else 'closed'})"
