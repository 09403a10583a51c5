"""Reading the gauges as Prometheus scrapes them (fixture ``fresh_view_cache``: afresh)."""

from __future__ import annotations

from django.test import Client
from prometheus_client.parser import text_string_to_metric_families


def scrape(client: Client, label: str) -> dict[tuple[str, str], float]:
    """``(metric, value of label)`` -> value of every sample at ``/metrics`` with ``label``."""
    response = client.get("/metrics")
    assert response.status_code == 200
    return {
        (sample.name, sample.labels[label]): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
        if label in sample.labels
    }
