"""One measured figure, and the run's figures in the order they were taken."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Result:
    """A figure of one benchmark.

    ``raw`` names the result of the raw-psycopg counterpart measured in the
    same run: the ceiling this figure is read against. ``details`` holds what
    explains the figure (sizes, the wall time, whether a drain was cut short).
    """

    key: str
    label: str
    value: float
    unit: str
    raw: str | None = None
    #: How many jobs (or samples) the figure is taken over.
    n: int | None = None
    details: Mapping[str, object] = field(default_factory=dict)


class Results(Mapping[str, Result]):
    """Results by key, in the order they were added; each is announced on stderr."""

    def __init__(self) -> None:
        self._by_key: dict[str, Result] = {}

    def add(self, result: Result) -> None:
        self._by_key[result.key] = result
        print(f"  {result.label}: {result.value:,.2f} {result.unit}", file=sys.stderr, flush=True)

    def ratio_to_raw(self, key: str) -> float | None:
        """The figure over its raw counterpart's, or ``None`` without one."""
        result = self._by_key[key]
        raw = self._by_key.get(result.raw) if result.raw else None
        return result.value / raw.value if raw else None

    def __getitem__(self, key: str) -> Result:
        return self._by_key[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)
