"""Tasks only the enqueue tests use."""

from __future__ import annotations

from typing import Any

from django_dbqueue import task


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Accepts any arguments, so a test controls exactly what gets encoded."""
    return {"args": list(args), "kwargs": kwargs}
