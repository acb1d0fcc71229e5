"""``ToolIntent``: what a person or an agent wants, never the tools it expands to.

The stored shape::

    {"enabled": bool|null, "toolset": str|null, "disabled": [names],
     "allowed": null|[names], "web_search": bool|null, "picked": null|[names]}

Hard line 1: an intent holds booleans, a preset or profile name, and short lists a person
wrote by hand. Nothing here ever fills a list from the registry; expansion happens at turn
start (``toolhub.tools.resolve``). Legacy forms normalize (``True``/``False``/``None``, a
bare list = hand-picked names, a dict); a field missing from an old row reads as null.
Anything else is an ``IntentError`` with a message a person can act on.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from toolhub.tools.tool import NAME_PATTERN

MAX_NAMES = 256
MAX_TOOLSET_CHARS = 100
# What a tool profile may be called (profiles are what a toolset name names).
PROFILE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,62}[A-Za-z0-9]$|^[A-Za-z0-9]$"
FIELDS = ("enabled", "toolset", "disabled", "allowed", "web_search", "picked")


def _printable(text: str) -> bool:
    """No control character or lone surrogate: no profile is named so, and the database
    cannot even be asked for one (PostgreSQL refuses NUL in text)."""
    return not any(unicodedata.category(char) in ("Cc", "Cs") for char in text)


class IntentError(ValueError):
    """An intent that cannot be stored or used; the message says which field and why."""


def _names(field: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise IntentError(f"'{field}' must be a list of tool names")
    if len(value) > MAX_NAMES:
        raise IntentError(f"'{field}' lists {len(value)} names; at most {MAX_NAMES}")
    names: dict[str, None] = {}
    for item in value:
        if not isinstance(item, str):
            raise IntentError(f"'{field}' must hold tool names (strings), not {item!r}")
        if not NAME_PATTERN.fullmatch(item):
            raise IntentError(f"'{field}': {item!r} is not a valid tool name")
        names[item] = None
    # Duplicates collapse; the person's order is kept (it is theirs, and short).
    return tuple(names)


def _flag(field: str, value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise IntentError(f"'{field}' must be true, false or null")


@dataclass(frozen=True, slots=True)
class ToolIntent:
    enabled: bool | None = None
    toolset: str | None = None
    disabled: tuple[str, ...] = ()
    allowed: tuple[str, ...] | None = None
    web_search: bool | None = None
    picked: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, value: Any) -> ToolIntent:
        """Normalize any stored or submitted form into a valid intent, or raise."""
        if value is None:
            return cls()
        if isinstance(value, bool):
            return cls(enabled=value)
        if isinstance(value, list | tuple):
            return cls(picked=_names("picked", value))
        if not isinstance(value, Mapping):
            raise IntentError("an intent is an object, a list of tool names, or true/false")
        unknown = sorted(str(key) for key in value if key not in FIELDS)
        if unknown:
            raise IntentError(f"unknown intent field(s): {', '.join(unknown)}")
        return cls()._with(value)

    def _with(self, fields: Mapping[str, Any]) -> ToolIntent:
        changes: dict[str, Any] = {}
        for key, raw in fields.items():
            if key in ("enabled", "web_search"):
                changes[key] = _flag(key, raw)
            elif key == "toolset":
                if raw is not None and (
                    not isinstance(raw, str)
                    or not raw.strip()
                    or len(raw) > MAX_TOOLSET_CHARS
                    or not _printable(raw)
                ):
                    raise IntentError(
                        f"'toolset' must be a profile or preset name of 1 to "
                        f"{MAX_TOOLSET_CHARS} characters, or null"
                    )
                changes[key] = raw
            elif key == "disabled":
                changes[key] = () if raw is None else _names(key, raw)
            else:
                changes[key] = None if raw is None else _names(key, raw)
        return replace(self, **changes)

    def merge(self, patch: Any) -> ToolIntent:
        """The fields ``patch`` gives replace these; the rest are kept (a chat frame's
        intent). Legacy forms are accepted as a whole replacement."""
        if not isinstance(patch, Mapping):
            return ToolIntent.parse(patch)
        ToolIntent.parse(patch)
        return self._with(patch)

    def to_json(self) -> dict[str, Any]:
        """The stored shape, every field present, lists as the person wrote them."""
        return {
            "enabled": self.enabled,
            "toolset": self.toolset,
            "disabled": list(self.disabled),
            "allowed": None if self.allowed is None else list(self.allowed),
            "web_search": self.web_search,
            "picked": None if self.picked is None else list(self.picked),
        }
