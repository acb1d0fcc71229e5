"""Phrasings: how people ask for a tool, written once per definition by a real model.

A tool's description says what it does in its author's words; people ask in theirs ("DM
priya" for ``chat_send_direct_message``). With a writer configured, each tool definition
goes to the model once, a few at a time, from one background thread per process, and the
answer (short requests a person might type) joins the tool's text in both of tool_search's
rankers. The apps configure a writer only with a real provider and
``TOOLHUB_TOOL_PHRASINGS`` on, never with the offline demo (``agent_app/phrasings.py``).

Invariants:

- A phrasing is keyed by the SHA-256 of the definition's name, title and description: a
  changed definition never keeps an old phrasing, and an unchanged one is never asked
  about again. The store is a SQLite file shared by every process (the embeddings
  cache's), so a restart or another process asks nothing.
- Never on a turn's path: ``want`` queues and ``known`` reads a dict. The dict catches up
  with what other processes wrote at most every ``REFRESH_SECONDS``, reading only rows it
  has not seen.
- One process asks about a definition: it claims the row first. A claim whose process
  died is free again after ``CLAIM_SECONDS``; a failed ask is not repeated for
  ``RETRY_SECONDS``.
- A phrasing is plain text of at most ``MAX_CHARS``: control characters become spaces.
  It adds words to a tool's text and replaces none, so a definition can gain from its
  phrasing only what its author could have written into its description.
- At most ``HOURLY_DEFINITIONS`` definitions per process per hour go to the model: a
  server that lists thousands of tools cannot run up the bill.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from toolhub.tools.tool import Tool

logger = logging.getLogger(__name__)

MAX_CHARS = 600
# Definitions per request to the model.
BATCH = 8
REFRESH_SECONDS = 5.0
CLAIM_SECONDS = 600.0
RETRY_SECONDS = 3600.0
HOURLY_DEFINITIONS = 500
# How many phrasings a request asks for, per tool.
PER_TOOL = 6

PROMPT = (
    "You help a search engine find software tools. For each tool below, write "
    f"{PER_TOOL} short requests, of 2 to 8 words each, that a person might type when they "
    "need it: in everyday words, with the synonyms, product names and abbreviations "
    "people use, and never the tool's own name. Answer with one JSON object only, mapping "
    'each tool\'s number to its list of requests, like {"1": ["...", "..."]}.'
)


@dataclass(frozen=True, slots=True)
class Definition:
    """What the model sees of a tool: its name, its title where it has one, and its
    description (both cut to keep one request small)."""

    key: str
    name: str
    title: str
    description: str


# Given definitions, returns the model's answer text (the writer's one job); raises on
# any failure. ``ask`` is built from the provider by the apps.
Ask = Callable[[str, str], str]


@functools.lru_cache(maxsize=65_536)
def definition_of(tool: Tool) -> Definition:
    title = " ".join(tool.label.split())
    description = " ".join(tool.description.split())
    digest = hashlib.sha256(
        json.dumps([tool.name, title, description], ensure_ascii=False).encode()
    ).hexdigest()
    return Definition(digest, tool.name, title[:200], description[:1500])


def request_text(definitions: list[Definition]) -> str:
    """The user message for ``definitions``: numbered, as JSON (data, never prose)."""
    rows = [
        {
            "number": str(number),
            "name": item.name,
            "title": item.title,
            "description": item.description,
        }
        for number, item in enumerate(definitions, 1)
    ]
    return json.dumps(rows, ensure_ascii=False, indent=1)


def parse(answer: str, definitions: list[Definition]) -> dict[str, str]:
    """Each definition's phrasing from the model's ``answer`` (keys it left out, or
    answered with anything but a list of strings, get none)."""
    start, end = answer.find("{"), answer.rfind("}")
    if start < 0 or end < start:
        return {}
    try:
        data = json.loads(answer[start : end + 1])
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    found: dict[str, str] = {}
    for number, item in enumerate(definitions, 1):
        phrases = data.get(str(number))
        if not isinstance(phrases, list):
            continue
        kept = [clean(phrase) for phrase in phrases[: PER_TOOL * 2] if isinstance(phrase, str)]
        text = "; ".join(phrase for phrase in kept if phrase)[:MAX_CHARS].strip(" ;")
        if text:
            found[item.key] = text
    return found


def clean(text: str) -> str:
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


class _Store:
    """Phrasings and claims by definition key, in one SQLite file."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=10, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # ``text`` is NULL while a process holds the claim (since ``at``) or after its ask
        # failed (``failed`` = 1, at ``at``). ``id`` only grows (AUTOINCREMENT never reuses
        # one), so reading the rows past the last id seen misses no phrasing.
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS phrasing (id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " key TEXT NOT NULL UNIQUE, text TEXT, at REAL NOT NULL,"
            " failed INTEGER NOT NULL DEFAULT 0)"
        )
        self._db.commit()

    def since(self, last_id: int) -> tuple[int, dict[str, str]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, key, text FROM phrasing WHERE id > ? AND text IS NOT NULL",
                (last_id,),
            ).fetchall()
        last = max((row[0] for row in rows), default=last_id)
        return last, {key: text for _, key, text in rows}

    def claim(self, keys: list[str], now: float) -> list[str]:
        """The keys this process now holds: unknown ones, and stale claims or failures."""
        held = []
        with self._lock, self._db:
            for key in keys:
                cursor = self._db.execute(
                    "INSERT INTO phrasing (key, text, at) VALUES (?, NULL, ?)"
                    " ON CONFLICT (key) DO UPDATE SET at = excluded.at, failed = 0"
                    " WHERE phrasing.text IS NULL AND phrasing.at < (CASE phrasing.failed"
                    " WHEN 1 THEN ? ELSE ? END)",
                    (key, now, now - RETRY_SECONDS, now - CLAIM_SECONDS),
                )
                if cursor.rowcount:
                    held.append(key)
        return held

    def settle(self, written: Mapping[str, str], failed: list[str], now: float) -> None:
        with self._lock, self._db:
            # Written rows are deleted and inserted again so that their id is new and
            # every process's incremental read sees them.
            for key, text in written.items():
                self._db.execute("DELETE FROM phrasing WHERE key = ?", (key,))
                self._db.execute(
                    "INSERT INTO phrasing (key, text, at) VALUES (?, ?, ?)", (key, text, now)
                )
            self._db.executemany(
                "UPDATE phrasing SET failed = 1, at = ? WHERE key = ? AND text IS NULL",
                [(now, key) for key in failed],
            )


class _Phrasings:
    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._known: dict[str, str] = {}
        self._seen_id = 0
        self._refreshed = 0.0
        self._store: _Store | None = None
        self._ask: Ask | None = None
        self._queue: dict[str, Definition] = {}
        self._tools: dict[str, list[Tool]] = {}
        self._asked: list[float] = []
        # Keys this process tried (claimed or found claimed), and when: each turn wants
        # its deferred tools again, and must not touch the store for them every time.
        self._tried: dict[str, float] = {}
        self._thread: threading.Thread | None = None
        self.busy = False
        self.on_written: Callable[[list[Tool]], None] = lambda tools: None

    def configure(self, *, ask: Ask | None, store_file: str | Path | None) -> None:
        """Name the store (None: no phrasings at all) and what asks the model (None:
        phrasings already stored are read, none are written)."""
        store = None
        if store_file:
            try:
                store = _Store(Path(store_file))
            except (OSError, sqlite3.Error):
                logger.exception("tool phrasings store %s cannot be opened", store_file)
        with self._lock:
            self._store = store
            self._ask = ask if store is not None else None
            self._known.clear()
            self._seen_id = 0
            self._refreshed = 0.0
            self._queue.clear()
            self._tools.clear()
            self._tried.clear()

    def known(self, tool: Tool) -> str:
        if self._store is None:
            return ""
        now = time.monotonic()
        if now - self._refreshed >= REFRESH_SECONDS:
            self._refresh(now)
        return self._known.get(definition_of(tool).key, "")

    def _refresh(self, now: float) -> None:
        store = self._store
        self._refreshed = now
        if store is None:
            return
        try:
            last, fresh = store.since(self._seen_id)
        except sqlite3.Error:
            logger.exception("tool phrasings could not be read")
            return
        with self._lock:
            self._seen_id = max(self._seen_id, last)
            self._known.update(fresh)

    def want(self, tools: Iterable[Tool]) -> None:
        if self._ask is None:
            return
        now = time.time()
        with self._lock:
            for tool in tools:
                if not tool.description.strip():
                    continue
                definition = definition_of(tool)
                if definition.key in self._known:
                    continue
                if now - self._tried.get(definition.key, -CLAIM_SECONDS) < CLAIM_SECONDS:
                    continue
                self._queue.setdefault(definition.key, definition)
                self._tools.setdefault(definition.key, []).append(tool)
            if self._queue and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(
                    target=self._run, name="toolhub-phrasings", daemon=True
                )
                self._thread.start()
            self._lock.notify_all()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    self.busy = False
                    self._lock.notify_all()
                    self._lock.wait()
                self.busy = True
                ask, store = self._ask, self._store
                batch = list(self._queue.values())[:BATCH]
                for item in batch:
                    del self._queue[item.key]
            if ask is None or store is None:
                continue
            try:
                self._write(ask, store, batch)
            except Exception:
                logger.exception("tool phrasings for %d definitions failed", len(batch))

    def _write(self, ask: Ask, store: _Store, batch: list[Definition]) -> None:
        now = time.time()
        self._asked = [at for at in self._asked if at > now - 3600]
        if len(self._asked) + len(batch) > HOURLY_DEFINITIONS:
            logger.info("tool phrasings: %d definitions this hour; the rest wait", len(self._asked))
            return
        with self._lock:
            self._tried.update((item.key, now) for item in batch)
        held = set(store.claim([item.key for item in batch], now))
        mine = [item for item in batch if item.key in held]
        if not mine:
            return
        self._asked.extend(now for _ in mine)
        try:
            written = parse(ask(PROMPT, request_text(mine)), mine)
        except Exception as exc:
            logger.info("tool phrasings: the model did not answer (%s); retried in an hour", exc)
            written = {}
        store.settle(written, [item.key for item in mine if item.key not in written], time.time())
        with self._lock:
            self._known.update(written)
            tools = [tool for key in written for tool in self._tools.pop(key, [])]
        if tools:
            self.on_written(tools)

    def wait(self, timeout: float | None = None) -> bool:
        with self._lock:
            return self._lock.wait_for(lambda: not self._queue and not self.busy, timeout=timeout)


_phrasings = _Phrasings()
configure = _phrasings.configure
known = _phrasings.known
want = _phrasings.want
wait_written = _phrasings.wait


def set_on_written(callback: Callable[[list[Tool]], None]) -> None:
    """Called (from the background thread) with the tools whose phrasing just arrived."""
    _phrasings.on_written = callback
