"""URLs for the metrics view tests: the queue gauges at ``/metrics``."""

from __future__ import annotations

from django.urls import path

from django_dbqueue.metrics import queue_metrics_view

urlpatterns = [path("metrics", queue_metrics_view)]
