"""What every benchmark of one run shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.database import Connection
from benchmarks.results import Results
from benchmarks.sizes import Sizes


@dataclass
class Session:
    """The database, the sizes, where worker logs go, and the results so far.

    ``harness`` is an autocommit connection for resetting, seeding and
    reading back; it never takes part in what is measured.
    """

    url: str
    sizes: Sizes
    logs: Path
    harness: Connection
    results: Results = field(default_factory=Results)
