"""JSON text as the job table stores it: arguments and results, and the text rule they share.

Every supported database must be able to store it, so besides what JSON
itself cannot hold, NaN and infinity are refused, and so are two kinds of
character no database stores as themselves (``unstorable``): the NUL
character (PostgreSQL's ``jsonb`` and text columns reject ``\\u0000``) and
surrogate code points (``\\ud800``: half of a UTF-16 pair, not Unicode text,
so no UTF-8 column or driver takes one). A value the database refuses would
fail the whole statement it is written in; these are refused alike on every
vendor, also where the database would take them (SQLite, MySQL JSON).
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

#: Surrogate code points: text no UTF-8 column, driver or ``jsonb`` value takes.
SURROGATE = re.compile("[\ud800-\udfff]")
#: How messages name the NUL character.
NUL = "the NUL character (\\x00), which PostgreSQL cannot store"


def dumps(value: object) -> str:
    """``value`` as JSON text every supported database stores.

    Raises ``TypeError`` for what JSON cannot hold, and ``ValueError`` for NaN,
    infinity and strings (values or dict keys) holding the NUL character or a
    surrogate code point (``unstorable``).
    """
    text = json.dumps(value, allow_nan=False)
    if "\\u0000" in text and NUL_ESCAPE.search(text):
        raise ValueError(f"a string holds {NUL}")
    # json escapes a surrogate as \udXXX, and also writes every character beyond the
    # BMP (an emoji) as a pair of such escapes: only the value itself tells them apart.
    if "\\ud" in text:
        problem = unstorable(json.dumps(value, ensure_ascii=False))
        if problem:
            raise ValueError(f"a string holds {problem}")
    return text


def unstorable(text: str) -> str | None:
    """Why no supported database stores ``text`` as itself, or ``None`` when they all do.

    Names the first character refused: the NUL character, or a surrogate
    code point (``\\ud800``), which is not Unicode text and so has no UTF-8 form.
    """
    if "\x00" in text:
        return NUL
    found = SURROGATE.search(text)
    if found:
        return (
            f"the surrogate code point {found.group()!r} (half of a UTF-16 pair, not Unicode "
            "text), which no database stores"
        )
    return None


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
