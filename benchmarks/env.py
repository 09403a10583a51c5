"""The environment variables that carry a run's choices into Django settings.

They live apart from ``settings.py`` so that naming them does not import the
settings before the run has set them.
"""

from __future__ import annotations

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/dbqueue_bench"
DATABASE_URL_ENV = "DBQUEUE_BENCH_DATABASE_URL"
CONN_MAX_AGE_ENV = "DBQUEUE_BENCH_CONN_MAX_AGE"
#: ``DBQUEUE`` of the workers a benchmark starts, as JSON (default: none set).
DBQUEUE_ENV = "DBQUEUE_BENCH_DBQUEUE"


def conn_max_age(text: str) -> int | None:
    """``CONN_MAX_AGE`` from its environment form: seconds, or ``none`` (persistent)."""
    return None if text.lower() == "none" else int(text)
