"""The demo model: offline, deterministic, and honest about being a demo.

It drives the real machinery rather than faking it. Asked to "use <tool>" it calls that
tool; when the tool is deferred (listed in the catalog, not in the array) it first loads
it with ``tool_search`` ("select:<tool>"), then calls it (through ``call_tool`` when the
array has it). Text after a colon ("use calculate: 2 * 21") becomes the tool's single
required string argument. Anything else gets a short text answer that says how to see a
tool call. Replies stream word by word; the same request always gives the same reply.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from agent_app.history import ATTACHED
from agent_app.providers.base import (
    ProviderEvent,
    ProviderRequest,
    Stop,
    TextDelta,
    ToolUse,
    Usage,
    WireTools,
    plain_wire_tools,
)

FENCED = re.compile(r"```([A-Za-z0-9_+-]*)\n(.*?)\n?```", re.DOTALL)
USE = re.compile(r"\buse\s+`?([A-Za-z0-9_\-]+)`?(?:\s*:\s*(.+))?", re.IGNORECASE | re.DOTALL)
CATALOG_LINE = re.compile(r"^- ([A-Za-z0-9_\-]+)", re.MULTILINE)
SEARCH = "tool_search"
CALL_TOOL = "call_tool"
HELP = (
    "I am the demo model: I run offline and follow a script. Ask me to "
    '"use current_time" or "use calculate: 6 * 7" and I will call that tool.'
)


class DemoProvider:
    name = "demo"
    default_model = "demo"
    supports_native = False
    is_demo = True
    origin = "demo"

    def __init__(self, *, delay: float = 0.01) -> None:
        self.delay = delay

    async def model_window(self, model: str) -> int | None:
        # The demo has no window of its own: the agent's setting, or the assumed one.
        return None

    async def list_models(self) -> list[dict[str, Any]]:
        return [{"id": self.default_model, "window": None}]

    def wire_tools(self, tools_json: str, deferred: frozenset[str]) -> WireTools:
        # Nothing goes over a wire: the demo reads the array as resolution laid it out.
        return plain_wire_tools(tools_json, deferred)

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        text, call = _decide(request)
        words = re.findall(r"\S+\s*", text)
        for index, word in enumerate(words):
            if index and self.delay:
                await asyncio.sleep(self.delay)
            yield TextDelta(word)
        if call is not None:
            yield ToolUse(f"demo_{_count_calls(request.messages) + 1}", call[0], call[1])
        size = len(request.tools_json) + len(json.dumps(request.messages)) + len(request.system)
        yield Usage(input_tokens=size // 4, output_tokens=max(1, len(text) // 4))
        yield Stop("tool_use" if call else "end_turn")


def _decide(request: ProviderRequest) -> tuple[str, tuple[str, Any] | None]:
    asked, since = _last_request(request.messages)
    if asked is None:
        return _reply(request.messages), None
    name, argument_text = asked
    array = {tool["name"]: tool for tool in json.loads(request.tools_json)}
    deferred = set(CATALOG_LINE.findall(request.catalog)) | set(request.deferred)
    calls = [block for block in since if block["type"] == "tool_use"]
    if any(_real_name(block) == name and _real_name(block) != SEARCH for block in calls) or (
        name == SEARCH and calls
    ):
        return _reply(request.messages), None
    schema = array.get(name, {}).get("input_schema") or _found_schema(since, name)
    arguments = _arguments(schema, argument_text)
    if name in array and name not in request.deferred:
        return f"Calling {name}.\n", (name, arguments)
    if name in deferred and name not in request.deferred:
        loaded = any(_real_name(block) == SEARCH for block in calls)
        if not loaded and SEARCH in array:
            return f"{name} is deferred; loading it first.\n", (SEARCH, {"query": f"select:{name}"})
        if CALL_TOOL in array:
            return f"Calling {name}.\n", (CALL_TOOL, {"name": name, "arguments": arguments})
        return f"Calling {name}.\n", (name, arguments)
    if name in request.deferred:
        return f"Calling {name}.\n", (name, arguments)
    return f"I cannot see a tool named {name} here, so I will not call it.\n\n{HELP}", None


def _last_request(
    messages: list[dict[str, Any]],
) -> tuple[tuple[str, str] | None, list[dict[str, Any]]]:
    """The tool the person's latest message asks for, and the blocks since that message."""
    since: list[dict[str, Any]] = []
    for message in reversed(messages):
        blocks = _blocks(message)
        texts = (
            [b["text"] for b in blocks if b["type"] == "text"] if message["role"] == "user" else []
        )
        if texts:
            match = USE.search(texts[-1])
            asked = (match.group(1), (match.group(2) or "").strip()) if match else None
            return asked, since
        since[:0] = blocks
    return None, since


# A result this short is quoted in the answer; a longer one is left to its card.
SHORT_RESULT = 200


def _reply(messages: list[dict[str, Any]]) -> str:
    last = _blocks(messages[-1]) if messages else []
    results = [block for block in last if block["type"] == "tool_result"]
    # A person's new message after a stopped turn rides in the same user message as that
    # turn's results: what they said comes last, and it is what gets the answer.
    if results and last[-1]["type"] == "tool_result":
        content = results[-1]["content"]
        if isinstance(content, str):
            text = content
        else:
            # Text and images (the text is what is quoted), or tool_search's references.
            parts = [block["text"] for block in content if block.get("type") == "text"]
            text = "\n".join(parts) or "tool schemas loaded"
        verdict = "reported an error" if results[-1].get("is_error") else "returned"
        # The card above shows the result: a short one is quoted, a long one (a command's
        # output) is not shown a second time.
        lines = text.strip().splitlines()
        if len(lines) <= 1 and len(text) <= SHORT_RESULT:
            fence = "``" if "`" in text else "`"
            return f"The tool {verdict}: {fence} {text.strip()} {fence}\n"
        return f"The tool {verdict} {len(lines):,} lines; they are in its card above.\n"
    texts = [str(block["text"]) for block in last if block["type"] == "text"]
    said = next((text for text in reversed(texts) if not text.startswith(ATTACHED)), "")
    reply = f"You said: *{' '.join(said.split())[:200]}*\n\n" if said else ""
    for note in (text for text in texts if text.startswith(ATTACHED)):
        # What the model was told of the files, said back: the person sees they arrived.
        files = note.removeprefix(ATTACHED).removesuffix("]")
        reply += f"You attached {' '.join(files.split())[:400]}\n\n"
    reply += f"{HELP}\n"
    code = FENCED.search(said)
    if code:
        # Code comes back as code, so a person sees how answers show it.
        reply += f"\nYour code, as code:\n\n```{code.group(1)}\n{code.group(2)}\n```\n"
    return reply


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks: list[dict[str, Any]] = content
    return blocks


def _real_name(block: dict[str, Any]) -> str:
    if block["name"] == CALL_TOOL and isinstance(block["input"], dict):
        return str(block["input"].get("name"))
    return str(block["name"])


def _found_schema(blocks: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """A schema tool_search returned (one JSON object per line of its result)."""
    for block in blocks:
        if block["type"] != "tool_result" or not isinstance(block["content"], str):
            continue
        for line in block["content"].splitlines():
            try:
                schema = json.loads(line)
            except ValueError:
                continue
            if isinstance(schema, dict) and schema.get("name") == name:
                return schema.get("input_schema")
    return None


def _arguments(schema: dict[str, Any] | None, text: str) -> dict[str, Any]:
    if not text or not schema:
        return {}
    required = [
        name
        for name in schema.get("required", [])
        if schema.get("properties", {}).get(name, {}).get("type") == "string"
    ]
    return {required[0]: text} if len(required) == 1 else {}


def _count_calls(messages: list[dict[str, Any]]) -> int:
    return sum(
        1 for message in messages for block in _blocks(message) if block["type"] == "tool_use"
    )
