"""Encodings of tool texts, each made once: in memory, in a shared SQLite file, else by the model.

``Encoder`` holds a process's model and its two caches. Encodings are kept by the hash of
the model's tag (the model and its packages' versions) and the text, in memory (bounded)
and in a SQLite file that restarts and other processes share; a process runs one batch
through the model at a time.

The process's memory stays bounded: texts are encoded shortest first in batches of
similar length, padded only to the longest of their batch, and what a batch freed is
given back to the system when it ends. A tool text's token vectors are kept as int8 (one
scale per vector, ``Encoding.compact``). With a disk cache, memory keeps fewer encodings
(``_MEMORY_ENTRIES_WITH_DISK``): an index reads the rows a search scores from the
process's token store (``token_store``), and from here only if that file fails.

Invariants: a cache failure never raises into a search (a read that fails encodes
instead, a write that fails keeps the encoding in memory only, a file that cannot be
opened is skipped, each with one log line); a cached encoding is exactly what encoding
its text again would give, because its key is the model and the text.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import hashlib
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from toolhub.tools.embedding_model import Encoding, Model

logger = logging.getLogger(__name__)

# A batch holds at most this many texts and this many tokens (texts x longest): a run's
# working set grows with its tokens (~60 MB at 1,024).
_BATCH = 32
_BATCH_TOKENS = 512
# A text's encoding in memory is ~16 KB for a typical description, so at most this many;
# with a disk cache to read them from again, fewer: those read or encoded last (an index
# holds its sentence vectors itself and reads the token vectors it scores from the
# process's token store, ``token_store``).
_MEMORY_ENTRIES = 10_000
_MEMORY_ENTRIES_WITH_DISK = 1_024


class _DiskCache:
    """Encodings by key in one SQLite file, shared by every process that names it."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=10, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # The float16 table of an earlier release: its rows are never read again.
        self._db.execute("DROP TABLE IF EXISTS encoding")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS encodings (key TEXT PRIMARY KEY,"
            " vector BLOB NOT NULL, scales BLOB NOT NULL, tokens BLOB NOT NULL)"
        )
        self._db.commit()

    def get(self, np: Any, keys: Sequence[str]) -> dict[str, Encoding]:
        found: dict[str, Encoding] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT key, vector, scales, tokens FROM encodings WHERE key IN ({marks})",  # noqa: S608 (only placeholders)
                    chunk,
                ).fetchall()
                for key, vector, scales, tokens in rows:
                    vector = np.frombuffer(vector, dtype=np.float32)
                    scales = np.frombuffer(scales, dtype=np.float32)
                    tokens = np.frombuffer(tokens, dtype=np.int8).reshape(len(scales), -1)
                    if tokens.shape[1] != len(vector):
                        raise ValueError(f"encoding {key} has the wrong shape")
                    found[key] = Encoding(vector, tokens, scales)
        return found

    def put(self, items: Iterable[tuple[str, Encoding]]) -> None:
        with self._lock:
            self._db.executemany(
                "INSERT OR IGNORE INTO encodings (key, vector, scales, tokens) VALUES (?, ?, ?, ?)",
                [
                    (key, item.vector.tobytes(), item.scales.tobytes(), item.tokens.tobytes())
                    for key, item in items
                ],
            )
            self._db.commit()


class Encoder:
    """The process's model and its caches. ``cache_path`` is asked at each read, so a
    later ``embeddings.configure`` names the file this encoder uses from then on."""

    def __init__(self, model: Model, *, cache_path: Callable[[], Path | None]) -> None:
        self.model = model
        self.np = model.np
        self._cache_path = cache_path
        self._memory: collections.OrderedDict[str, Encoding] = collections.OrderedDict()
        self._memory_lock = threading.Lock()
        # Held while the model runs: one run at a time per process.
        self._run_lock = threading.Lock()
        self._disk: _DiskCache | None = None
        self._disk_path: Path | None = None

    def _disk_cache(self) -> _DiskCache | None:
        with self._memory_lock:
            cache_path = self._cache_path()
            if cache_path != self._disk_path:
                self._disk_path = cache_path
                self._disk = None
                if cache_path is not None:
                    try:
                        self._disk = _DiskCache(cache_path)
                    except (OSError, sqlite3.Error):
                        logger.exception("embedding cache %s cannot be opened", cache_path)
            return self._disk

    def _remembered(self, keys: Sequence[str]) -> dict[str, Encoding]:
        with self._memory_lock:
            found = {key: self._memory[key] for key in keys if key in self._memory}
            for key in found:
                self._memory.move_to_end(key)
        return found

    def forget(self) -> None:
        with self._memory_lock:
            self._memory.clear()

    @property
    def persistent(self) -> bool:
        """Whether encodings can be read again from a disk cache."""
        return self._disk_cache() is not None

    def _remember(self, items: dict[str, Encoding]) -> None:
        bound = _MEMORY_ENTRIES if self._disk is None else _MEMORY_ENTRIES_WITH_DISK
        with self._memory_lock:
            self._memory.update(items)
            while len(self._memory) > bound:
                self._memory.popitem(last=False)

    def documents(
        self, texts: Sequence[str], *, stop: Callable[[], bool] = lambda: False
    ) -> list[Encoding]:
        """Each text's encoding: from memory, else the disk, else the model (once).
        ``stop`` is asked between batches; once it says so, nothing more is encoded and
        the texts left have no encoding (only the background passes one)."""
        keys = {text: self._key(text) for text in texts}
        found = self._remembered(list(keys.values()))
        missing = [text for text, key in keys.items() if key not in found]
        disk = self._disk_cache() if missing else None
        if disk is not None:
            try:
                stored = disk.get(self.np, [keys[text] for text in missing])
            except (sqlite3.Error, ValueError):
                # ValueError: a row whose bytes are not an encoding of this model's shape.
                logger.exception("embedding cache read failed; encoding instead")
                stored = {}
            self._remember(stored)
            found |= stored
            missing = [text for text in missing if keys[text] not in found]
        for batch in self._batches(missing):
            if stop():
                return []
            with self._run_lock:
                # Another thread may have encoded some of these while this one waited.
                done = self._remembered([keys[text] for text in batch])
                todo = [text for text in batch if keys[text] not in done]
                encoded = self.model.encode(todo) if todo else []
                fresh = {
                    keys[text]: item.compact(self.np)
                    for text, item in zip(todo, encoded, strict=True)
                }
                # Remembered before the next waiter looks.
                self._remember(fresh)
                give_back_freed_memory()
            found |= done | fresh
            if fresh and disk is not None:
                try:
                    disk.put(fresh.items())
                except sqlite3.Error:
                    logger.exception("embedding cache write failed; kept in memory only")
        return [found[keys[text]] for text in texts]

    def _key(self, text: str) -> str:
        return hashlib.sha256(f"{self.model.tag}\0{text}".encode()).hexdigest()

    def _batches(self, texts: Sequence[str]) -> Iterable[list[str]]:
        """Shortest first, so each batch pads little; bounded in texts and in tokens."""
        if not texts:
            return
        lengths = {text: self.model.token_count(text) for text in texts}
        batch: list[str] = []
        for text in sorted(texts, key=lambda text: (lengths[text], text)):
            # Sorted, so this text is the longest of the batch it would join.
            longest = lengths[text]
            if batch and (len(batch) >= _BATCH or (len(batch) + 1) * longest > _BATCH_TOKENS):
                yield batch
                batch = []
            batch.append(text)
        yield batch

    def query(self, text: str) -> Encoding:
        with self._run_lock:
            return self.model.encode([text])[0]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def give_back_freed_memory() -> None:
    """Return the pages a batch freed to the system (glibc only; elsewhere a no-op).

    A batch's buffers are freed between the long-lived token arrays allocated beside
    them, so the heap cannot shrink from its top: without this, encoding 1,000 tools
    left ~140 MB resident that nothing used (measured; docs/tool-search.md)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
