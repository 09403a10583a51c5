"""What views and commands call: business changes with their jobs, in one transaction."""

from __future__ import annotations

from django.db import transaction

from example_project.shop.models import Order
from example_project.shop.tasks import charge_card, send_confirmation_email, send_invoice


def place_order(email: str, total_cents: int) -> Order:
    """Save a new order and enqueue its invoice and confirmation email.

    The order and its jobs commit together or not at all: if anything in the
    block raises, there is neither an order without an invoice nor an invoice
    job for an order that does not exist. Workers are woken after the commit.
    """
    with transaction.atomic():
        order = Order.objects.create(customer_email=email, total_cents=total_cents)
        send_invoice.using(subject=order).enqueue(order.pk)
        send_confirmation_email.using(subject=order).enqueue(order.pk)
    return order


def take_payment(order: Order) -> None:
    """Enqueue the card charge of an order, once while a charge job is active."""
    charge_card.using(subject=order, dedupe_key=f"charge:{order.pk}").enqueue(order.pk)
