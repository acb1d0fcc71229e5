"""The text a resolution sends: the tools array and the catalog block, and what they cost.

Invariants (docs/architecture.md, hard line 2):
- Same inputs, same bytes: JSON is canonical, and the array is laid out as ``[\\n`` +
  pieces joined by ``,\\n`` + ``\\n]`` so each tool's piece ends on a tokenizer boundary
  and counts exactly. The catalog's text is ``toolhub.tools.catalog``'s.
- Counts are kept by text (``tokens.count_cached``) and tools are immutable, so a piece is
  tokenized once per process: ``count_ahead`` does it when tools register, so the first
  resolution after only looks them up.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterable

from toolhub.tools.catalog import catalog_line
from toolhub.tools.schema import canonical_json
from toolhub.tools.tokens import count_cached
from toolhub.tools.tool import Tool

ARRAY_HEAD = "[\n"


def layout_array(texts: list[str]) -> tuple[str, ...]:
    """``[\n`` + each tool's JSON ending in ``,\n`` (the last in ``\n]``)."""
    if not texts:
        return ("[]",)
    return (ARRAY_HEAD, *(text + ",\n" for text in texts[:-1]), texts[-1] + "\n]")


def native_json(tool: Tool, deferred: bool) -> str:
    if not deferred:
        return tool.wire_json
    return canonical_json({**tool.provider_schema(), "defer_loading": True})


def array_frame_tokens() -> int:
    """What an array costs beyond its tools' pieces: the head, and what the last tool's
    closing costs over a separator (every tool's JSON ends in "}", so it is the same)."""
    return count_cached(ARRAY_HEAD) + count_cached("}\n]") - count_cached("},\n")


def tool_tokens(tool: Tool) -> int:
    """What a tool costs resident: its piece of the array (tools are immutable)."""
    return tool.wire_tokens


def count_ahead(tools: Iterable[Tool]) -> int:
    """Count now every piece a resolution may send of each tool: its array piece where it
    may be resident (never for one declared deferred), and its catalog line in either
    form. Tools are immutable and counts are kept by text, so the first resolution after
    tools register only looks them up. Returns how many tools were counted."""
    counted = 0
    for tool in tools:
        count_cached(catalog_line(tool, listed=False))
        if not tool.defer:
            _ = tool.wire_tokens
            count_cached(catalog_line(tool, listed=True))
        counted += 1
    return counted


_stop_counting = threading.Event()
_counting: list[threading.Thread] = []
# How long exit waits for a count in progress (one takes microseconds; loading the
# encoding, about a second): a native call must not be torn down under it.
_EXIT_WAIT_SECONDS = 5.0


def count_ahead_in_background(tools: Iterable[Tool]) -> threading.Thread:
    """``count_ahead`` on a daemon thread: a server starting up counts its registered
    tools while it waits for its first request."""
    todo = list(tools)

    def run() -> None:
        for tool in todo:
            if _stop_counting.is_set():
                return
            count_ahead([tool])

    thread = threading.Thread(target=run, name="toolhub-token-counts", daemon=True)
    _counting.append(thread)
    thread.start()
    return thread


@atexit.register
def _stop_counting_ahead() -> None:
    _stop_counting.set()
    for thread in _counting:
        thread.join(timeout=_EXIT_WAIT_SECONDS)
