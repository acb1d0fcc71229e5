"""Text the database can store, and JSON from outside that the code can walk.

``storable`` is the one place where NUL and lone surrogates are replaced;
``json_loads_bounded`` the one place where client JSON's nesting is bounded.

PostgreSQL refuses a NUL character in text and JSON, and no database (nor UTF-8) can hold
a lone UTF-16 surrogate, which JSON's ``"\\ud800"`` escapes produce. Text from a person,
a model or a tool may carry either. Every writer of such text (chat text, titles, events,
tool runs) passes it through ``storable`` first, so a stray byte can never stop a turn
between its start and its end. Replacements are visible: NUL becomes ``␀`` (U+2400) and a
lone surrogate ``�`` (U+FFFD), so what was stored, sent and shown is the same everywhere.
"""

from __future__ import annotations

import json
import re
from typing import Any

NUL_MARK = "\u2400"
SURROGATE_MARK = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _mark(match: re.Match[str]) -> str:
    return NUL_MARK if match.group() == "\x00" else SURROGATE_MARK


def storable_text(text: str) -> str:
    # Nearly all text has neither: one scan, no copy.
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(_mark, text)


def storable(value: Any) -> Any:
    """``value`` with every string in it (dict keys included) made storable. Anything that
    needed no change is returned as it is, not copied."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        items = [(storable(key), storable(item)) for key, item in value.items()]
        if all(a is b and c is d for (a, c), (b, d) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        items = [storable(item) for item in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items)
    return value


MAX_JSON_DEPTH = 64


class TooDeep(ValueError):
    """JSON nested deeper than ``MAX_JSON_DEPTH``."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_loads_bounded(raw: str | bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` for input from outside: nesting deeper than ``max_depth`` is a
    ``TooDeep`` (a ``ValueError``, like any other bad JSON), never a RecursionError in the
    parser or in whatever walks the value afterwards."""
    try:
        value = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:
        raise TooDeep(f"JSON nested deeper than {max_depth} levels") from None
    # Iterative, so the check itself cannot recurse too deep.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                raise TooDeep(f"JSON nested deeper than {max_depth} levels")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return value
