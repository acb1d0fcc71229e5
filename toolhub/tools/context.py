"""What a tool call runs with: who and where (``ToolContext``), how it is stopped
(``CancelToken``), how it streams (``TailAccumulator``) and what the apps plug in.

The runtime imports nothing from Django. Everything persistent reaches tools through the
small protocols below (notes, other sessions, agents, asking the person, plan mode, the
result cache, the full-result store); the apps implement them, and a tool whose interface
is missing is unavailable (layer 4) rather than failing at run time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from toolhub.tools.mcp.asks import Elicitor, Sampler
    from toolhub.tools.mcp.config import CredentialStore
    from toolhub.tools.search import SearchHits
    from toolhub.tools.tool import Tool


class CancelToken:
    """A cancellation flag that works from the event loop and from worker threads.

    ``cancel()`` may be called from any thread; async waiters are woken through their own
    loop, and sync tools running in a thread can poll ``cancelled``.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._children: weakref.WeakSet[CancelToken] = weakref.WeakSet()

    def child(self) -> CancelToken:
        """A token cancelled with this one, that can also be cancelled alone (one call's
        timeout must not cancel the rest of the turn)."""
        token = CancelToken()
        with self._lock:
            if not self._event.is_set():
                self._children.add(token)
                return token
        token.cancel()
        return token

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        with self._lock:
            self._event.set()
            waiters, self._waiters = self._waiters, []
            children = list(self._children)
        for loop, future in waiters:
            loop.call_soon_threadsafe(_resolve, future)
        for child in children:
            child.cancel()

    async def wait(self) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._event.is_set():
                return
            self._waiters.append((loop, future))
        try:
            await future
        finally:
            with self._lock:
                if (loop, future) in self._waiters:
                    self._waiters.remove((loop, future))


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class TailAccumulator:
    """The last ``capacity`` characters of a stream; older text is evicted, never buffered.

    Memory stays bounded whatever a tool prints; ``total_chars`` counts everything seen.
    Appends and reads may come from different threads (a sync tool prints, the loop
    reads); ``text`` is joined only when read, once per change.
    """

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self.total_chars = 0
        self._chunks: deque[str] = deque()
        self._size = 0
        self._lock = threading.Lock()
        self._joined: str | None = ""
        # When text last arrived (monotonic): a call's progress, read by an idle timeout.
        self.updated = time.monotonic()
        # Waits for a person (an MCP server's form or sampling request) under way: the
        # call is not idle while somebody is deciding (``ToolContext.waiting_for_person``).
        self._held = 0

    def append(self, text: str) -> None:
        if not text:
            return
        with self._lock:
            self._joined = None
            self.updated = time.monotonic()
            self.total_chars += len(text)
            if len(text) >= self.capacity:
                self._chunks.clear()
                self._chunks.append(text[-self.capacity :])
                self._size = self.capacity
                return
            self._chunks.append(text)
            self._size += len(text)
            while self._size > self.capacity:
                overflow = self._size - self.capacity
                oldest = self._chunks[0]
                if len(oldest) <= overflow:
                    self._chunks.popleft()
                    self._size -= len(oldest)
                else:
                    self._chunks[0] = oldest[overflow:]
                    self._size -= overflow

    @property
    def idle_since(self) -> float:
        """When the call last showed life: now while a person is being waited for."""
        with self._lock:
            return time.monotonic() if self._held else self.updated

    def hold(self) -> None:
        with self._lock:
            self._held += 1

    def release(self) -> None:
        with self._lock:
            self._held -= 1
            self.updated = time.monotonic()

    @property
    def text(self) -> str:
        with self._lock:
            if self._joined is None:
                self._joined = "".join(self._chunks)
            return self._joined

    @property
    def dropped_chars(self) -> int:
        return self.total_chars - self._size


@dataclass(frozen=True, slots=True)
class TailUpdate:
    """What ``on_update`` receives: the chunk just printed, how much has streamed so far,
    and ``tail``, the current tail when it is read (never older than this update). The
    tail is not copied per update: a tool printing a line at a time would otherwise pay
    for the whole tail on every line."""

    chunk: str
    total_chars: int
    elapsed_ms: int
    source: TailAccumulator = field(repr=False, compare=False)

    @property
    def tail(self) -> str:
        return self.source.text


class ResultCache(Protocol):
    def get(self, key: str) -> str | None: ...
    def set(self, key: str, value: str, ttl: float) -> None: ...


class FullResultStore(Protocol):
    def put(self, *, tool: str, text: str, ctx: ToolContext) -> str:
        """Keep ``text`` and return a reference a person can follow (a URL or an id)."""
        ...


class NotesStore(Protocol):
    def add(self, *, user_id: str, text: str) -> str: ...
    def search(self, *, user_id: str, query: str, limit: int) -> list[dict[str, Any]]: ...


class SessionMessenger(Protocol):
    def send(self, *, user_id: str, from_session: str | None, to_session: str, text: str) -> str:
        """Post ``text`` to another session of ``user_id``; raise LookupError if not theirs."""
        ...


class AgentDirectory(Protocol):
    def list(self, *, user_id: str) -> list[dict[str, Any]]: ...


class QuestionAsker(Protocol):
    async def ask(self, *, question: str, options: list[str]) -> str: ...


class PlanModeSwitch(Protocol):
    def set_plan_mode(self, *, session_id: str, on: bool, plan: str | None = None) -> None: ...


class DeferredIndex(Protocol):
    """What ``tool_search`` searches: a turn's deferred tools (``TurnTools.index``, which
    records what it loads)."""

    @property
    def names(self) -> list[str]: ...

    @property
    def sources(self) -> dict[str, str]: ...

    def select(self, names: list[str]) -> tuple[list[Tool], list[str]]: ...

    def search(self, query: str, limit: int = 5) -> SearchHits: ...


@dataclass(frozen=True, slots=True)
class ToolServices:
    notes: NotesStore | None = None
    messenger: SessionMessenger | None = None
    agents: AgentDirectory | None = None
    asker: QuestionAsker | None = None
    plan_mode: PlanModeSwitch | None = None
    tool_index: DeferredIndex | None = None
    # What an MCP server may ask mid-call: a form for the person, a completion from the
    # chat's model (toolhub/tools/mcp/asks.py). None where nobody can answer.
    elicitor: Elicitor | None = None
    sampler: Sampler | None = None
    # A person's own credentials for MCP servers that take one (``user_credential``).
    mcp_credentials: CredentialStore | None = None


@dataclass(frozen=True, slots=True)
class RuntimeSettings:
    """Process-wide knobs the apps fill from Django settings."""

    allow_private_fetch: bool = False
    fetch_max_bytes: int = 2_000_000
    fetch_timeout: float = 20.0
    search_url: str = "https://api.search.brave.com/res/v1/web/search"


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who is calling, where, and the plugged-in interfaces. One per call (``for_call``)."""

    user_id: str | None = None
    session_id: str | None = None
    channel: str = "web"
    mode: str | None = None
    attended: bool = True
    workspace: Path | None = None
    context_window_tokens: int | None = None
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    services: ToolServices = field(default_factory=ToolServices)
    settings: RuntimeSettings = field(default_factory=RuntimeSettings)
    cache: ResultCache | None = None
    store: FullResultStore | None = None
    on_update: Callable[[TailUpdate], None] | None = None
    cancel: CancelToken = field(default_factory=CancelToken)
    tail: TailAccumulator | None = None
    started: float = field(default_factory=time.monotonic)

    def for_call(self, *, stream_capacity: int) -> ToolContext:
        """A fresh per-call copy: its own tail, its own clock, and a child cancel token."""
        return replace(
            self,
            tail=TailAccumulator(stream_capacity),
            started=time.monotonic(),
            cancel=self.cancel.child(),
        )

    @contextlib.contextmanager
    def waiting_for_person(self) -> Iterator[None]:
        """While a person decides, the call's idle timeout does not run (its ceiling
        still does)."""
        if self.tail is None:
            yield
            return
        self.tail.hold()
        try:
            yield
        finally:
            self.tail.release()

    def without_host_paths(self, text: str) -> str:
        """``text`` with the host directory of the workspace taken out (a path inside it
        reads as workspace-relative): errors reach the model and the person, who have no
        business with the server's filesystem layout."""
        if self.workspace is None:
            return text
        roots = {str(self.workspace), str(self.workspace.resolve())}
        for root in sorted(roots, key=len, reverse=True):
            text = text.replace(root + "/", "").replace(root, ".")
        return text

    def update(self, chunk: str) -> None:
        """Stream progress: feed the bounded tail and tell ``on_update`` (if any)."""
        if self.tail is None or not chunk:
            return
        self.tail.append(chunk)
        if self.on_update is not None:
            self.on_update(
                TailUpdate(
                    chunk=chunk,
                    total_chars=self.tail.total_chars,
                    elapsed_ms=int((time.monotonic() - self.started) * 1000),
                    source=self.tail,
                )
            )


def present[T](value: T | None, what: str) -> T:
    """``value``, which the tool's ``can_use`` gate found there before the call; a caller
    that skipped the gate gets an error result naming ``what``, not an AttributeError."""
    if value is None:
        raise RuntimeError(f"{what} is not available here")
    return value
