"""The one small interface every model provider implements.

A provider turns a ``ProviderRequest`` into an async stream of ``ProviderEvent`` values:
text deltas, complete tool calls, usage, and one stop reason at the end. It never stores
or sends anything itself; the turn runner does. Errors come out as ``ProviderError`` with
a stable ``code`` and whether a retry can help, so retries and ``turn_failed`` frames are
decided in one place.

Messages use one neutral shape, the Anthropic content-block form (``text``, ``tool_use``,
``tool_result`` blocks in ``user``/``assistant`` messages), rebuilt from stored events for
every turn; providers with another wire form convert from it.

What is counted is what is sent (docs/accounting.md): a provider's ``wire_tools`` gives its
tools array as the exact text its request body carries (its wrapper, its cache marker), the
body embeds that very text (``json_body``), and the turn runner and the inspector count it.
``wire_tools`` is a pure function of the request's array, so both sides get the same text.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import weakref
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from toolhub.lib.model_windows import believable
from toolhub.lib.storable import json_loads_bounded
from toolhub.tools.tokens import count_cached
from toolhub.tools.wire import layout_array


@dataclass(frozen=True, slots=True)
class ProviderRequest:
    model: str
    system: str
    catalog: str
    messages: list[dict[str, Any]]
    # The turn's canonical tools array (JSON text), exactly as resolution laid it out.
    tools_json: str
    # Names of tools in ``tools_json`` that carry ``defer_loading`` (native strategy).
    deferred: frozenset[str] = field(default_factory=frozenset)
    max_tokens: int = 4096


@dataclass(frozen=True)
class WireTools:
    """A tools array exactly as a provider's request body carries it.

    ``texts`` are the tools' JSON as sent, in array order; the array is laid out as
    resolution lays it out (``[\\n``, ``,\\n`` between tools, ``\\n]``), so every
    tool's text ends on a tokenizer boundary. ``deferred`` names the entries sent with
    ``defer_loading``, which the provider does not bill until the model loads them."""

    names: tuple[str, ...]
    texts: tuple[str, ...]
    deferred: frozenset[str] = frozenset()

    @functools.cached_property
    def pieces(self) -> tuple[str, ...]:
        return layout_array(list(self.texts))

    @functools.cached_property
    def text(self) -> str:
        """The bytes after ``"tools":`` in the body, decoded."""
        return "".join(self.pieces)

    def billed(self, loaded: Iterable[str] = ()) -> tuple[str, ...]:
        """The pieces of the array the provider bills: all of it, but for the deferred
        entries the model has not loaded (they cost nothing until then)."""
        if not self.deferred:
            return self.pieces
        unloaded = self.deferred - frozenset(loaded)
        pairs = zip(self.names, self.texts, strict=True)
        return layout_array([text for name, text in pairs if name not in unloaded])

    def billed_names(self, loaded: Iterable[str] = ()) -> tuple[str, ...]:
        unloaded = self.deferred - frozenset(loaded)
        return tuple(name for name in self.names if name not in unloaded)

    def tokens(self, loaded: Iterable[str] = ()) -> int:
        """Tokens of the billed array: each piece ends on a tokenizer boundary, so the
        sum of the pieces' cached counts is the count of the whole text."""
        pieces = self.billed(loaded)
        if pieces == ("[]",):
            # Nothing billed: no array is sent, or every entry in it is deferred.
            return 0
        return sum(count_cached(piece) for piece in pieces)


def split_array(tools_json: str) -> list[str]:
    """The tools' texts of an array laid out by ``layout_array`` (JSON text holds no raw
    newline, so each tool is one line)."""
    if tools_json == "[]":
        return []
    if not tools_json.startswith("[\n") or not tools_json.endswith("\n]"):
        raise ValueError("the tools array is not laid out by layout_array")
    return [line.removesuffix(",") for line in tools_json[2:-2].split("\n")]


def json_body(fields: dict[str, Any], tools: WireTools | None) -> bytes:
    """A request body: ``fields`` as compact JSON, then ``"tools"`` holding ``tools.text``
    verbatim, so the bytes counted are the bytes sent."""
    head = json.dumps(fields, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if tools is None or not tools.texts:
        return head.encode()
    joint = "," if fields else ""
    return f'{head[:-1]}{joint}"tools":{tools.text}}}'.encode()


@functools.lru_cache(maxsize=256)
def plain_wire_tools(tools_json: str, deferred: frozenset[str] = frozenset()) -> WireTools:
    """The array as resolution laid it out, each tool's text unchanged."""
    texts = split_array(tools_json)
    names = tuple(json.loads(text)["name"] for text in texts)
    return WireTools(names=names, texts=tuple(texts), deferred=deferred & frozenset(names))


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolUse:
    id: str
    name: str
    # What the model sent; not necessarily an object (a model can send anything).
    input: Any


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    # Counted by toolhub (tiktoken), not reported by the provider, which sent no usage.
    estimated: bool = False


@dataclass(frozen=True, slots=True)
class Stop:
    reason: str


ProviderEvent = TextDelta | ToolUse | Usage | Stop


class ProviderError(Exception):
    """A failed provider call: ``code`` is stable, ``retryable`` says if trying again helps.
    ``window`` is the model's context window when the error is a request that did not fit
    and names the window it did not fit (``window_in``)."""

    def __init__(
        self, code: str, message: str, *, retryable: bool = False, window: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.window = window


# A window is learned from an error only when the error *is* an overflow, in the words a
# server opens it with: text a server merely echoes (a model's own output in a parse
# error) must not set the window every chat on that model is planned for. A number may
# carry thousands separators ("262,144").
_NUMBER = r"(\d{1,3}(?:,\d{3})+|\d+)(?![\d.,]\d)"
_OVERFLOWS = (
    # llama-cpp-python, streamed: "Requested tokens (4486) exceed context window of 2048".
    re.compile(rf"Requested tokens \(\d+\) exceed context window of {_NUMBER}"),
    # OpenAI, vLLM, llama-cpp-python unstreamed.
    re.compile(rf"This model's maximum context length is {_NUMBER} tokens"),
    # Anthropic.
    re.compile(rf"prompt is too long: \d+ tokens > {_NUMBER} maximum"),
)


def window_in(message: str) -> int | None:
    """The window an overflow error's ``message`` names at its start, if it is one."""
    for pattern in _OVERFLOWS:
        found = pattern.match(message.strip()[:1000])
        if found:
            return believable(int(found.group(1).replace(",", "")))
    return None


def body_window(body: str) -> int | None:
    """llama.cpp's server says an overflow in its error's fields: ``type`` is
    ``exceed_context_size_error`` and ``n_ctx`` the window."""
    try:
        parsed = json.loads(body[:100_000])
    except ValueError:
        return None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict) and error.get("type") == "exceed_context_size_error":
        return believable(error.get("n_ctx"))
    return None


def tool_input(text: str) -> Any:
    """A streamed tool call's arguments: JSON, or the text as sent when it is not JSON (the
    runner then answers with an error tool_result and never runs the tool)."""
    if not text.strip():
        return {}
    try:
        return json_loads_bounded(text)
    except ValueError:
        return text


RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


def status_error(status: int, message: str, *, body: str = "") -> ProviderError:
    """Map an HTTP status from any provider to a ``ProviderError``; ``message`` is what
    the error says, ``body`` the response's text (read for llama.cpp's overflow fields)."""
    if status in (401, 403):
        code = "provider_auth"
    elif status == 429:
        code = "provider_rate_limited"
    elif status == 529:
        code = "provider_overloaded"
    elif status >= 500:
        code = "provider_unavailable"
    else:
        code = "provider_rejected"
    # Only a refused request (400, or 413: too large) can be one that did not fit.
    window = (window_in(message) or body_window(body)) if status in (400, 413) else None
    return ProviderError(
        code,
        f"HTTP {status}: {message}"[:500],
        retryable=status in RETRYABLE_STATUS,
        window=window,
    )


class Provider(Protocol):
    name: str
    # Used when neither the agent nor TOOLHUB_MODEL names a model.
    default_model: str
    # Whether deferred tools can travel in the array flagged ``defer_loading``.
    supports_native: bool
    # Shown in the UI: the demo model is labelled as such.
    is_demo: bool

    def wire_tools(self, tools_json: str, deferred: frozenset[str]) -> WireTools:
        """A request's tools array (``ProviderRequest.tools_json``, ``deferred``) as this
        provider's body carries it."""
        ...

    def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]: ...

    # Where the provider's server is (its base URL): reported windows are kept per origin.
    origin: str

    async def model_window(self, model: str) -> int | None:
        """The context window ``model``'s server reports, or ``None`` when it says none.
        May raise anything: the caller bounds it in time and treats a failure as none."""
        ...

    async def list_models(self) -> list[dict[str, Any]]:
        """The models the provider's models endpoint lists: ``{"id", "window"}`` each
        (``window`` ``None`` when the entry names none). Raises ProviderError."""
        ...


async def collect_text(provider: Provider, request: ProviderRequest) -> str:
    """The text of a one-shot request's answer (tool calls and usage ignored)."""
    text = ""
    async for event in provider.stream(request):
        if isinstance(event, TextDelta):
            text += event.text
    return text


class PerLoop[Client]:
    """One HTTP client per event loop: a client's connection pool belongs to the loop it
    was first used on, and keeping it lets every turn on that loop reuse its connections
    (no TCP and TLS handshake per turn)."""

    def __init__(self, make: Callable[[], Client]) -> None:
        self._make = make
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Client] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> Client:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = self._make()
        return client
