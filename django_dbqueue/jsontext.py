"""JSON text as the job table stores it: arguments and results.

Every supported database must be able to store it, so besides what JSON
itself cannot hold, NaN and infinity are refused, and so is the NUL
character: PostgreSQL's ``jsonb`` rejects ``\\u0000``, and a value it refuses
would fail the whole statement it is written in.
"""

from __future__ import annotations

import json
import re

#: ``\u0000`` as an escape, not as a backslash followed by the text "u0000".
NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def dumps(value: object) -> str:
    """``value`` as JSON text every supported database stores.

    Raises ``TypeError`` for what JSON cannot hold, and ``ValueError`` for NaN,
    infinity and strings holding the NUL character.
    """
    text = json.dumps(value, allow_nan=False)
    if "\\u0000" in text and NUL_ESCAPE.search(text):
        raise ValueError("a string holds the NUL character (\\x00), which PostgreSQL cannot store")
    return text
