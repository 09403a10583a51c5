from __future__ import annotations

from django.contrib import admin

from example_project.shop.models import EmailLog, Order, Report


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ("id", "customer_email", "total_cents", "state", "created_at")
    list_filter = ("state",)
    search_fields = ("customer_email",)
    ordering = ("-created_at", "-id")


@admin.register(EmailLog)
class EmailLogAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "recipient", "order", "idempotency_key", "sent_at")
    list_filter = ("kind",)


@admin.register(Report)
class ReportAdmin(admin.ModelAdmin):
    list_display = ("id", "title", "order_count", "revenue_cents", "idempotency_key", "created_at")
