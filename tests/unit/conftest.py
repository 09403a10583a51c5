"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest

from tests.manual_clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
