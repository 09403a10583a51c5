"""Orders, and the records of what the shop's jobs did to the outside world.

``EmailLog`` and ``Report`` rows are keyed by the job's idempotency key: a job
that runs again (after a crash, a retry or an operator requeue) finds its
earlier row instead of sending or writing a second one.
"""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    class State(models.TextChoices):
        NEW = "new"
        PAID = "paid"

    customer_email = models.EmailField()
    total_cents = models.PositiveIntegerField()
    state = models.CharField(max_length=8, choices=State.choices, default=State.NEW)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"order {self.pk} {self.customer_email} {self.total_cents / 100:.2f} ({self.state})"


class EmailLog(models.Model):
    """One email handed to the (pretend) mail server, at most once per job."""

    class Kind(models.TextChoices):
        INVOICE = "invoice"
        CONFIRMATION = "confirmation"

    idempotency_key = models.CharField(max_length=100, unique=True)
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="emails")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    recipient = models.EmailField()
    sent_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.kind} to {self.recipient}"


class Report(models.Model):
    """The output of one ``generate_report`` job, written once whatever the retries."""

    idempotency_key = models.CharField(max_length=100, unique=True)
    title = models.CharField(max_length=200)
    order_count = models.PositiveIntegerField()
    revenue_cents = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.title
