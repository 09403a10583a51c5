"""Operator triage helpers: naming ids, empty selectors; no database."""

from __future__ import annotations

from django_dbqueue import triage


def test_named_ids_stop_after_twenty() -> None:
    assert triage.named([3, 1, 2]) == "1, 2, 3"
    assert triage.named(range(1, 26)).endswith("19, 20 and 5 more")


def test_a_selector_with_nothing_given_is_empty() -> None:
    assert triage.Selector().is_empty()
    assert not triage.Selector(queue="mail").is_empty()
