"""Tool texts' token vectors in one unnamed file a process shares, read by offset.

Where there is a disk cache, a ``SemanticIndex`` does not hold its documents' token
vectors (~150 MB at 10,000 tools): at its build it places them in the process's store,
and a search reads the rows it scores from there with one ``preadv`` a row, not through
SQLite (docs/tool-search.md has the figures). An index is made per tool resolution and a
process keeps hundreds of those (``resolve._MEMO_SIZE``), mostly over the same tools: so
the store is keyed by the text, and each distinct text's vectors are written once,
whatever number of indexes has it.

The store is a series of generations, each one append-only unnamed file in the disk
cache's directory (gone with its process, or when no index uses it): per text its int8
vectors, then their float32 scales. An index holds, per distinct document, its offset
and number of vectors (``TokenRows``: ~160 KB at 10,000 tools) and a reference to the
generation it was built on. Appends are made under the store's lock, at the offset the
generation tracks (``os.pwritev``); an offset is handed to an index only once its bytes
are written in full, so the lock-free reads never meet a region being written.

Invariants:

- Disk is bounded by the distinct texts, not by the indexes: a generation holds each
  text once; an index starts a new generation only when the current one has passed
  ``_GENERATION_BYTES`` (or is unusable: another directory, another model, a short read),
  so it exceeds that bound by at most the one build that crossed it. An older generation
  is written no more (but by a build that began on it) and its file closes when the last
  index built on it is collected.
- A failure never reaches a search: a file that cannot be made or written, or a read
  that comes back short, leaves the index reading the encoding cache, with one log line;
  a short read also retires the generation, so later indexes start a fresh file.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolhub.tools.embedding_model import Encoding

logger = logging.getLogger(__name__)

# When a generation's file passes this many bytes, the next index starts a new one. Twice
# the texts the encoder keeps in memory without a disk cache (its design size, 10,000:
# ``embedding_cache._MEMORY_ENTRIES``) at ~16 KB a typical text (~15 KB measured at
# 10,000 tools): room for the largest catalog the product is sized for and as much again
# of edited or added tools before a new generation rewrites the texts still in use. Less
# would start generations while the old ones are still held by live resolutions, so the
# same texts would sit on disk twice sooner; more would keep texts no index uses longer.
_GENERATION_BYTES = 2 * 10_000 * 16_384


class _Generation:
    """One append-only unnamed file; ``end`` is where the next text goes (every byte before
    it written in full). Its fields but ``file`` change only under the store's lock."""

    def __init__(self, file: Any, directory: Path | None, tag: str) -> None:
        self.file = file
        self.descriptor: int = file.fileno()
        self.directory = directory
        self.tag = tag
        self.end = 0
        self.width = 0
        self.broken = False
        self.where: dict[str, tuple[int, int]] = {}

    @classmethod
    def made(cls, directory: Path | None, tag: str) -> _Generation | None:
        try:
            return cls(tempfile.TemporaryFile(dir=directory), directory, tag)
        except OSError:
            logger.exception("no token file for an index: reading the encoding cache instead")
            return None

    def append(self, np: Any, text: str, item: Encoding) -> tuple[int, int]:
        """``text``'s offset and number of vectors, writing them if it is not here yet."""
        found = self.where.get(text)
        if found is not None:
            return found
        if item.scales is None or item.tokens.dtype != np.int8:
            raise ValueError("a tool text's token vectors are int8, with scales")
        width = self.width or item.tokens.shape[1]
        if item.tokens.shape[1] != width:
            raise ValueError("a tool text's token vectors are as wide as the store's")
        tokens = np.ascontiguousarray(item.tokens)
        scales = np.ascontiguousarray(item.scales, dtype=np.float32)
        if os.pwritev(self.descriptor, [tokens, scales], self.end) != tokens.nbytes + scales.nbytes:
            raise OSError("a short write to the token store")
        self.width = width
        place = (self.end, len(tokens))
        self.end += tokens.nbytes + scales.nbytes
        self.where[text] = place
        return place


class TokenStore:
    """The process's generations: the current one, which indexes about to build share."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: _Generation | None = None

    def size(self) -> int:
        """Bytes written to the current generation (tests)."""
        with self._lock:
            return self._current.end if self._current is not None else 0

    def generation(self, directory: Path | None, tag: str) -> _Generation | None:
        """The generation an index about to build places its texts in; None (logged) when
        a new one was needed and its file cannot be made."""
        with self._lock:
            current = self._current
            if (
                current is None
                or current.broken
                or current.directory != directory
                or current.tag != tag
                or current.end >= _GENERATION_BYTES
            ):
                current = _Generation.made(directory, tag)
                if current is None:
                    return None
                self._current = current
            return current

    def place(
        self, np: Any, generation: _Generation, texts: Sequence[str], chunk: Sequence[Encoding]
    ) -> list[tuple[int, int]]:
        """Each text's offset and number of vectors in ``generation``, appending those not
        in it yet. Raises OSError or ValueError (nothing half-written is ever handed out)."""
        with self._lock:
            return [
                generation.append(np, text, item) for text, item in zip(texts, chunk, strict=True)
            ]


_store = TokenStore()


def store() -> TokenStore:
    return _store


class TokenRows:
    """An index's documents in one generation of the store: each one's offset and number of
    vectors, filled a chunk at a time as the index builds."""

    def __init__(self, np: Any, generation: _Generation) -> None:
        self._np = np
        self.generation = generation
        self._places: list[tuple[int, int]] = []
        self.offsets: Any = None
        self.sizes: Any = None

    @classmethod
    def begin(cls, np: Any, cache_file: Path | None, tag: str) -> TokenRows | None:
        directory = cache_file.parent if cache_file is not None else None
        generation = store().generation(directory, tag)
        return cls(np, generation) if generation is not None else None

    def add(self, texts: Sequence[str], chunk: Sequence[Encoding]) -> bool:
        """Place ``texts``; False (logged) when that failed: the index reads the cache."""
        try:
            self._places += store().place(self._np, self.generation, texts, chunk)
        except (OSError, ValueError):
            logger.exception("token file write failed; reading the encoding cache instead")
            return False
        return True

    def finished(self) -> TokenRows:
        np = self._np
        places = np.array(self._places, dtype=np.int64).reshape(-1, 2)
        self._places = []
        self.offsets = places[:, 0].copy()
        self.sizes = places[:, 1].astype(np.intp)
        return self

    def read(self, rows: Any) -> tuple[Any, Any, Any]:
        """Distinct documents ``rows``' token vectors one after another, each vector's
        scale, and each document's number of vectors. Raises OSError, or ValueError for a
        short read (a file cut short under the index), which retires the generation."""
        np = self._np
        rows = np.asarray(rows, dtype=np.intp)
        sizes = self.sizes[rows]
        total = int(sizes.sum())
        width = self.generation.width
        tokens = np.empty((total, width), np.int8)
        scales = np.empty(total, np.float32)
        into_tokens = memoryview(tokens).cast("B")
        into_scales = memoryview(scales).cast("B")
        descriptor = self.generation.descriptor
        at = 0
        for offset, size in zip(self.offsets[rows].tolist(), sizes.tolist(), strict=True):
            length = size * width
            parts = [into_tokens[at * width : at * width + length]]
            parts.append(into_scales[at * 4 : (at + size) * 4])
            if os.preadv(descriptor, parts, offset) != length + size * 4:
                self.generation.broken = True
                raise ValueError("the token file is shorter than its index")
            at += size
        return tokens, scales, sizes
