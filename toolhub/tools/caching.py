"""In-process implementations of the result cache and the full-result store.

The apps plug in Django's cache and a database-backed store; these serve the runtime used
on its own (scripts, tests, benchmarks). Both are bounded: the oldest entries go first.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable

from toolhub.tools.context import ToolContext


class MemoryResultCache:
    def __init__(self, *, max_entries: int = 1024, clock: Callable[[], float] = time.monotonic):
        self._entries: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._max = max_entries
        self._clock = clock
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            expires, value = entry
            if self._clock() >= expires:
                del self._entries[key]
                return None
            return value

    def set(self, key: str, value: str, ttl: float) -> None:
        with self._lock:
            self._entries[key] = (self._clock() + ttl, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)


class MemoryResultStore:
    def __init__(self, *, max_entries: int = 256) -> None:
        self._texts: OrderedDict[str, str] = OrderedDict()
        self._max = max_entries
        self._lock = threading.Lock()

    def put(self, *, tool: str, text: str, ctx: ToolContext) -> str:
        ref = f"result:{tool}:{uuid.uuid4().hex}"
        with self._lock:
            self._texts[ref] = text
            while len(self._texts) > self._max:
                self._texts.popitem(last=False)
        return ref

    def get(self, ref: str) -> str | None:
        with self._lock:
            return self._texts.get(ref)
