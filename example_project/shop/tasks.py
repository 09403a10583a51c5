"""The shop's background tasks.

The failures are staged so the demo shows every path a job can take: the
confirmation email times out on its first attempts for some orders (retries
visible), the card of every seventh order is declined (dead letter visible),
and the report is a long task that heartbeats and writes its output under the
job's idempotency key.
"""

from __future__ import annotations

import time

from django_dbqueue import Backoff, JobContext, PermanentError, task
from example_project.shop.models import EmailLog, Order, Report

#: Quick retries, so the demo does not wait: 0.1-0.2 s, then 0.2-0.4 s, ... at most 1 s.
QUICK_RETRY = Backoff(base=0.2, factor=2, cap=1)

#: How many orders one step of ``generate_report`` reads before it heartbeats.
REPORT_PAGE = 5
#: The pretend cost of one report step (a slow query, a file upload...).
REPORT_STEP_SECONDS = 0.05


@task(queue="default", max_attempts=5, give_up_on=(Order.DoesNotExist,))
def send_invoice(order_id: int) -> dict[str, object]:
    """Email the invoice of an order, once: the invoice key is the order's own."""
    order = Order.objects.get(pk=order_id)
    email, created = EmailLog.objects.get_or_create(
        idempotency_key=f"invoice-{order.pk}",
        defaults={
            "order": order,
            "kind": EmailLog.Kind.INVOICE,
            "recipient": order.customer_email,
        },
    )
    return {"order": order.pk, "email": email.pk, "sent_now": created}


def smtp_timeouts(order_id: int) -> int:
    """How many attempts of the confirmation email time out for this order (the staged fault)."""
    if order_id % 9 == 0:
        return 2
    if order_id % 3 == 0:
        return 1
    return 0


@task(
    queue="mail",
    max_attempts=5,
    retry=QUICK_RETRY,
    give_up_on=(Order.DoesNotExist,),
    takes_context=True,
)
def send_confirmation_email(context: JobContext, order_id: int) -> dict[str, object]:
    """Send the order confirmation; the mail server times out now and then.

    The ``ConnectionError`` is an ordinary exception, so the job is retried
    with ``QUICK_RETRY`` backoff. The email is logged under the job's
    idempotency key, which a real mail API would take to drop duplicates.
    """
    order = Order.objects.get(pk=order_id)
    if context.attempt <= smtp_timeouts(order_id):
        raise ConnectionError("SMTP timeout")
    EmailLog.objects.get_or_create(
        idempotency_key=context.idempotency_key,
        defaults={
            "order": order,
            "kind": EmailLog.Kind.CONFIRMATION,
            "recipient": order.customer_email,
        },
    )
    return {"order": order.pk, "attempt": context.attempt}


@task(queue="payments", max_attempts=3, give_up_on=(Order.DoesNotExist,), takes_context=True)
def charge_card(context: JobContext, order_id: int) -> dict[str, object]:
    """Charge the order's card and mark it paid; a declined card is final.

    ``PermanentError`` makes the job dead at once: retrying a declined card
    cannot help, and the dead job waits in the admin for an operator. The
    payment reference is the job's idempotency key: a real payment provider
    would get it so that a job running twice charges once. Marking the order
    paid is idempotent too.
    """
    order = Order.objects.get(pk=order_id)
    if order.pk % 7 == 0:
        raise PermanentError("card declined")
    paid = Order.objects.filter(pk=order.pk, state=Order.State.NEW).update(state=Order.State.PAID)
    return {
        "order": order.pk,
        "charged_cents": order.total_cents if paid else 0,
        "payment_reference": context.idempotency_key,
    }


@task(queue="reports", max_attempts=3, lease=5, timeout=120, takes_context=True)
def generate_report(context: JobContext, title: str) -> dict[str, object]:
    """Sum every order, page by page, and store the result once.

    A long task: it calls ``context.heartbeat()`` after every page, so its
    short lease (5 s) stays alive while it works, up to its 120 s timeout, and
    it stops at once (``LeaseLost``) if the lease is gone (timeout passed,
    or another worker has taken the job over). The report is
    saved under the job's idempotency key, so a second run replaces the first
    run's row instead of adding one.
    """
    count, revenue, after = 0, 0, 0
    while page := list(
        Order.objects.filter(pk__gt=after)
        .order_by("pk")
        .values_list("pk", "total_cents")[:REPORT_PAGE]
    ):
        count += len(page)
        revenue += sum(total for _, total in page)
        after = page[-1][0]
        time.sleep(REPORT_STEP_SECONDS)
        context.heartbeat()
    report, _ = Report.objects.update_or_create(
        idempotency_key=context.idempotency_key,
        defaults={"title": title, "order_count": count, "revenue_cents": revenue},
    )
    return {"report": report.pk, "orders": count, "revenue_cents": revenue}
