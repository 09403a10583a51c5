"""JSON text as the job table stores it: arguments and results.

Every supported database must be able to store it, so besides what JSON
itself cannot hold, NaN and infinity are refused, and so is the NUL
character: PostgreSQL's ``jsonb`` rejects ``\\u0000``, and a value it refuses
would fail the whole statement it is written in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

#: How deep job arguments may nest (lists and dicts inside one another). Python's json
#: gives up with ``RecursionError`` near a thousand levels, and MariaDB stores no JSON
#: document deeper than 32, the call that carries an argument adding three levels around
#: it; real arguments nest a few levels.
MAX_DEPTH = 20

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


def check_argument(value: object) -> None:
    """Refuse an argument that JSON would change or that nests too deep.

    Raises ``TypeError`` for a dict key that is not a string (JSON would turn
    ``{1: ...}`` into ``{"1": ...}``, so the task would get something else) and
    ``ValueError`` for lists and dicts nested deeper than ``MAX_DEPTH`` (a value
    that contains itself included). Looks at containers only, depth first, so
    a deep value is found without walking everything beside it.
    """
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            for key in item:
                if not isinstance(key, str):
                    raise TypeError(
                        f"has the dict key {key!r} ({type(key).__name__}); JSON keys are "
                        f"strings, so the task would get {str(key)!r} instead. Use string keys"
                    )
            children: Iterable[object] = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth >= MAX_DEPTH:
            raise ValueError(
                f"nests lists and dicts deeper than {MAX_DEPTH} levels. Pass a flatter value, "
                "or the id of a row holding it"
            )
        stack.extend((child, depth + 1) for child in children)
