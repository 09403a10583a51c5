"""Sphinx configuration: MyST markdown pages, furo, the API reference from docstrings.

Build: ``sphinx-build -W --keep-going -n -b html docs docs/_build/html`` (CI's command).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import django
from django.conf import settings
from pygments.lexers.special import TextLexer
from sphinx.highlighting import lexers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Autodoc imports the package's modules, and the models need a configured Django; an
# in-memory SQLite database is never opened.
settings.configure(
    INSTALLED_APPS=[
        "django.contrib.admin",
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "django.contrib.messages",
        "django_dbqueue",
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    USE_TZ=True,
)
django.setup()

project = "django_dbqueue"
author = "django_dbqueue contributors"
copyright = "django_dbqueue contributors"
release = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M)[1]
version = release

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
# Links such as [What happens when…](../explanation/what-happens-when.md#the-faults)
# are checked: every heading down to ### gets an anchor.
myst_heading_anchors = 3

# docs/explanation/architecture.md has a mermaid diagram, which GitHub draws; here it shows
# as its text (no JavaScript from a CDN).
lexers["mermaid"] = TextLexer()

html_theme = "furo"
html_title = f"django_dbqueue {release}"
html_static_path = ["_static"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}

# Nitpicky mode: every cross-reference inside the package must resolve. Types of the
# standard library, Django and other packages have no inventory here (the build is
# offline), so they are the only ones let through.
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(django|datetime|collections|typing|threading|asyncio|contextlib|enum|types|"
        r"decimal|uuid|logging|prometheus_client|sentry_sdk|psycopg|argparse|pathlib)(\..*)?",
    ),
    (r"py:.*", r"(inspect|random|abc|django_tasks)(\..*)?"),
    # Type variables, and internal types the public signatures name but the reference
    # does not document (they are not part of the API).
    (r"py:.*", r"(~?P|P\.args|P\.kwargs|django_dbqueue\.\w+\.[PRT])"),
    (
        r"py:.*",
        r"(django_dbqueue\.\w+\.)?(TaskOptions|Callee|EnqueueOptions|Enqueueable|TaskDefaults|"
        r"OneCall|Renewer|(progress\.)?Poster|ErrorInfo|TaskResult|AttemptCall|timedelta|(models\.)?Model)",
    ),
    (r"py:.*", r"(Any|Callable|Iterable|Iterator|Sequence|Mapping|P|R|T|Self|NoneType)"),
    (r"py:.*", r"(int|str|float|bool|bytes|object|dict|list|tuple|set|frozenset|type)"),
    (r"py:.*", r"(Exception|BaseException|ValueError|TypeError|RuntimeError|LookupError)"),
]
