"""The context window a turn works in, and the windows model servers reported.

A window comes from one of three places (``ContextWindow.source``):

- ``server``: the model's server said it (its model list, its properties, or an error
  that named the window when a request did not fit);
- ``setting``: the agent sets one, which wins only when it is smaller than the server's
  (a person may keep a conversation shorter than the model allows, never longer);
- ``assumed``: neither says, and ``DEFAULT_WINDOW`` stands in; the pages say so.

Reported windows are kept in the cache shared by every process, per server origin and
model, for a day (``KEEP_REPORTED``); a server that said nothing is asked again after ten
minutes (``KEEP_UNKNOWN``). A per-process memo spares the cache on every turn for a minute
(``MEMO_SECONDS``). The cache is a convenience, never a dependency: every read and write
here swallows the cache's failures (a Redis outage means "not known", never a failed turn).
Only believable figures are kept (``believable``): a server that says 0 or 10**30 has not
said anything.

docs/architecture.md, "Context windows".
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Literal

from django.core.cache import cache

from toolhub.tools.resolve import DEFAULT_CONTEXT_WINDOW

log = logging.getLogger(__name__)

DEFAULT_WINDOW = DEFAULT_CONTEXT_WINDOW
KEEP_REPORTED = 24 * 3600
KEEP_UNKNOWN = 600
MEMO_SECONDS = 60.0
# Model names are the agents' to choose: the memo keeps the most recent this many.
MEMO_SIZE = 512
SMALLEST = 256
LARGEST = 100_000_000

Source = Literal["server", "setting", "assumed"]

# (origin, model) -> (when it was read, the window or None for "the server says nothing").
_memo: dict[tuple[str, str], tuple[float, int | None]] = {}


@dataclass(frozen=True, slots=True)
class ContextWindow:
    tokens: int
    source: Source

    @property
    def words(self) -> str:
        """What a person reads about it."""
        if self.source == "server":
            return f"{self.tokens:,} tokens, as the model's server reports."
        if self.source == "setting":
            return f"{self.tokens:,} tokens, as set on the agent."
        return (
            f"{self.tokens:,} tokens, assumed: the model's server does not say, "
            "and the agent sets no window."
        )

    def to_json(self) -> dict[str, object]:
        return {"tokens": self.tokens, "source": self.source, "words": self.words}


def believable(value: object) -> int | None:
    """``value`` as a window in tokens, or ``None`` when it cannot be one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value != value or not SMALLEST <= value <= LARGEST:
        return None
    return int(value)


def window_of(*, setting: int | None, reported: int | None) -> ContextWindow:
    """The window a turn works in: the server's, or the agent's setting when smaller."""
    if reported is not None and (setting is None or setting >= reported):
        return ContextWindow(reported, "server")
    if setting:
        return ContextWindow(setting, "setting")
    return ContextWindow(DEFAULT_WINDOW, "assumed")


def _key(origin: str, model: str) -> str:
    digest = hashlib.sha256(f"{origin}\n{model}".encode()).hexdigest()[:32]
    return f"window:{digest}"


def window_fresh(*, origin: str, model: str) -> bool:
    """Whether this process read or asked ``model``'s window within ``MEMO_SECONDS``: a
    dict lookup, so a turn can skip the cache entirely."""
    memo = _memo.get((origin, model))
    return memo is not None and time.monotonic() - memo[0] < MEMO_SECONDS


def window_known(*, origin: str, model: str) -> tuple[bool, int | None]:
    """Whether the server was asked lately, and what it said (``None``: nothing)."""
    now = time.monotonic()
    memo = _memo.get((origin, model))
    if memo is not None and now - memo[0] < MEMO_SECONDS:
        return True, memo[1]
    try:
        stored = cache.get(_key(origin, model))
    except Exception:
        log.warning("reading a model's window from the cache failed", exc_info=True)
        return False, None
    if stored is None:
        return False, None
    window = believable(stored)
    _memo_put((origin, model), window)
    return True, window


def _memo_put(key: tuple[str, str], window: int | None) -> None:
    _memo.pop(key, None)
    _memo[key] = (time.monotonic(), window)
    while len(_memo) > MEMO_SIZE:
        # Dicts keep insertion order: the first key is the longest unrefreshed.
        _memo.pop(next(iter(_memo)), None)


def window_remember(*, origin: str, model: str, tokens: int | None) -> None:
    """Keep what the server said of ``model``'s window (``None``: it said nothing)."""
    window = believable(tokens)
    _memo_put((origin, model), window)
    try:
        cache.set(
            _key(origin, model),
            window or 0,
            timeout=KEEP_REPORTED if window else KEEP_UNKNOWN,
        )
    except Exception:
        log.warning("keeping a model's window in the cache failed", exc_info=True)


def windows_forget() -> None:
    """Drop this process's memo (tests, whose servers come and go on reused ports)."""
    _memo.clear()
