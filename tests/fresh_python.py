"""A fresh Python interpreter, as a new project or a new shell would start one.

The test suite's own Django settings are left out of its environment, so what
it sees is what its arguments and ``env`` give it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 120


def run_python(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python *args`` in ``cwd`` with ``env`` added; output captured, exit status not checked."""
    inherited = {key: value for key, value in os.environ.items() if not key.startswith("DJANGO_")}
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**inherited, **env},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
