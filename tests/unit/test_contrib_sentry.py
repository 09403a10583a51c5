"""``django_dbqueue.contrib.sentry`` without the ``sentry`` extra: an error that says what to
install, in a fresh interpreter where ``sentry_sdk`` cannot be imported."""

from __future__ import annotations

from tests.fresh_python import ROOT, run_python

WITHOUT_SENTRY = """\
import sys

import django
from django.conf import settings

sys.modules["sentry_sdk"] = None  # what an environment without the package gives
settings.configure(
    INSTALLED_APPS=["django.contrib.contenttypes", "django_dbqueue"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
)
django.setup()
import django_dbqueue.contrib.sentry
"""


def test_importing_it_without_sentry_sdk_says_which_extra_to_install() -> None:
    result = run_python("-c", WITHOUT_SENTRY, cwd=ROOT)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line == (
        "django.core.exceptions.ImproperlyConfigured: django_dbqueue.contrib.sentry needs "
        'sentry-sdk: pip install "django-dbqueue[sentry]".'
    )
