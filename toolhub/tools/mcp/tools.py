"""An MCP server's listing as toolhub ``Tool`` objects: names, untrusted text cut and
cleaned, schemas checked, annotations read into plan-mode and approval rules, and call
results turned into text, images for the model and files for the person."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from toolhub.tools.context import ToolContext
from toolhub.tools.files import ToolFile, not_offered_line, offer, offered_line
from toolhub.tools.images import MAX_IMAGES, ToolImage, image_marker, sendable_image
from toolhub.tools.mcp.config import (
    CONFLICTING_HINT,
    CONTROL_CHARS,
    DEFER_META_KEY,
    HINTS,
    MAX_DESCRIPTION_CHARS,
    MAX_LABEL_CHARS,
    MAX_SCHEMA_CHARS,
    NOT_SEEN,
    PLAN,
    McpPrompt,
    McpPromptArgument,
    McpResource,
    McpServerConfig,
    tool_name,
    untrusted_text,
)
from toolhub.tools.registry import Skipped
from toolhub.tools.schema import canonical_json, check_schema
from toolhub.tools.tool import Tool, ToolResult

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Effect:
    """What a tool's annotations say it does to the world, and why that is believed.

    ``kind`` is ``read-only``, ``additive`` (changes things, never destroys),
    ``destructive`` or ``unknown`` (the server said nothing). ``reason`` completes
    "hidden in plan mode: …" for every kind but ``read-only``."""

    kind: str
    reason: str = ""

    @property
    def read_only(self) -> bool:
        return self.kind == "read-only"

    @property
    def destructive(self) -> bool:
        return self.kind == "destructive"


READ_ONLY = Effect("read-only")
UNANNOTATED = Effect("unknown", "the server does not mark it read-only (it has no annotations)")
ADDITIVE = Effect("additive", "the server does not mark it read-only (it changes things)")
DESTRUCTIVE = Effect("destructive", "the server marks it destructive")
DESTRUCTIVE_BY_DEFAULT = Effect(
    "destructive",
    "the server does not mark it read-only, and by MCP's defaults that makes it destructive",
)
MALFORMED = Effect(
    "destructive", "the server's annotations are not plain booleans, so it counts as destructive"
)
CONFLICTING = Effect(
    "destructive",
    "the server lists it twice with different annotations, so it counts as destructive",
)


def tool_effect(annotations: Any, wire: Any = NOT_SEEN) -> Effect:
    """The effect of a tool from its parsed annotations (an ``mcp_types.ToolAnnotations``
    or ``None``) and, when the listing was read off the wire, the ``annotations`` value
    exactly as it arrived (``None`` when absent). Any doubt lands on destructive: a hint
    that is not a boolean, or that the SDK's parsing changed, never makes a tool
    read-only."""
    if wire is CONFLICTING_HINT:
        return CONFLICTING
    if annotations is None:
        if wire is NOT_SEEN or wire is None:
            return UNANNOTATED
        return MALFORMED
    parsed = [getattr(annotations, attribute, None) for attribute, _key in HINTS]
    if any(value is not None and not isinstance(value, bool) for value in parsed):
        return MALFORMED
    if wire is not NOT_SEEN:
        if not isinstance(wire, Mapping):
            return MALFORMED
        # ``is``: the JSON values true, false and null are the only ones believed as such.
        if any(
            wire.get(key) is not value
            for (_attribute, key), value in zip(HINTS, parsed, strict=True)
        ):
            return MALFORMED
    read_only, destructive = parsed
    if read_only is True:
        return READ_ONLY
    if destructive is False:
        return ADDITIVE
    return DESTRUCTIVE if destructive is True else DESTRUCTIVE_BY_DEFAULT


@dataclass(frozen=True, eq=False)
class McpTool(Tool):
    """A server's tool: a ``Tool`` that also carries what its annotations said."""

    effect: Effect = UNANNOTATED

    @property
    def unsafe_reason(self) -> str:
        """Why plan mode hides it (read by layer 3 after "hidden in plan mode: ")."""
        return self.effect.reason


def build_tools(
    config: McpServerConfig,
    listing: Iterable[Any],
    *,
    call: Callable[..., Any],
    check: Callable[[], bool],
    wire: Mapping[str, Any] | None = None,
) -> tuple[list[Tool], list[Skipped]]:
    """``Tool``s for a server's listing (``mcp_types.Tool`` items), sorted by name, after
    the allowlist; tools that cannot be offered safely are skipped with a reason. ``wire``
    maps a remote name to its ``annotations`` as they came over the wire (``None`` when
    absent); without it the parsed annotations are all there is to go by."""
    origin = f"mcp:{config.name}"
    allowed = frozenset(config.allowlist) if config.allowlist is not None else None
    tools: dict[str, Tool] = {}
    skipped: list[Skipped] = []
    # The schema breaks ties: a server listing one name twice keeps the same one always.
    for remote in sorted(listing, key=lambda item: (item.name, _sort_key(item.input_schema))):
        if allowed is not None and remote.name not in allowed:
            continue
        name = tool_name(config.name, remote.name)
        shown = untrusted_text(remote.name, MAX_LABEL_CHARS)
        reason = _schema_problem(remote.input_schema) or _call_problem(remote)
        if reason is None and name in tools:
            reason = f"its name {name} is already used by another of this server's tools"
        if reason is not None:
            skipped.append(Skipped(name, f"MCP tool {shown}: {reason}", origin))
            continue
        annotations = getattr(remote, "annotations", None)
        title = remote.title or (annotations.title if annotations is not None else None)
        meta = remote.meta or {}
        defer = meta.get(DEFER_META_KEY)
        effect = tool_effect(annotations, NOT_SEEN if wire is None else wire.get(remote.name, None))
        tools[name] = McpTool(
            name=name,
            description=untrusted_text(remote.description, MAX_DESCRIPTION_CHARS),
            parameters=dict(remote.input_schema),
            fn=_remote_call(call, config.name, remote.name),
            label=untrusted_text(title or remote.name, MAX_LABEL_CHARS),
            origin=origin,
            timeout=config.timeout,
            timeout_ceiling=config.timeout_ceiling,
            check_fn=check,
            defer=defer if isinstance(defer, bool) else config.defer,
            source="mcp",
            # The model gets one cut with the true count; the person can open the whole.
            persist_full=True,
            unsafe_in=() if effect.read_only else (PLAN,),
            requires_approval=effect.destructive and config.approve_destructive,
            effect=effect,
        )
    return list(tools.values()), skipped


def same_safety(old: Tool, new: Tool) -> bool:
    """Whether ``old`` (registered) and ``new`` agree on plan mode and approval: the
    registry keeps a tool whose wire form is unchanged, and these are not in it."""
    return (
        old.unsafe_in == new.unsafe_in
        and old.requires_approval == new.requires_approval
        and getattr(old, "effect", None) == getattr(new, "effect", None)
    )


def _sort_key(schema: Any) -> str:
    # Only orders a listing: it must not fail on what _schema_problem refuses next.
    return json.dumps(schema, sort_keys=True, default=repr)


def _schema_problem(schema: Any) -> str | None:
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        # Providers refuse any other tool schema, and one bad tool would fail every turn.
        return 'its input schema is not of type "object"'
    try:
        text = canonical_json(schema)
    except ValueError:
        # The SDK parses NaN and Infinity; no provider accepts them in a request body.
        return "its input schema holds NaN or Infinity, which JSON cannot carry"
    if len(text) > MAX_SCHEMA_CHARS:
        return f"its input schema is {len(text):,} characters (the limit is {MAX_SCHEMA_CHARS:,})"
    try:
        check_schema(schema)
    except Exception as exc:
        return f"its input schema is not valid JSON Schema: {str(exc).splitlines()[0][:200]}"
    if "ctx" in (schema.get("properties") or {}):
        return "it has an argument named ctx, which toolhub reserves"
    return None


def _call_problem(remote: Any) -> str | None:
    """Why a plain ``tools/call`` of ``remote`` can never succeed, if it cannot."""
    execution = getattr(remote, "execution", None)
    if getattr(execution, "task_support", None) == "required":
        # The SDK's client has no tasks API (tasks/get, tasks/result): every call would fail.
        return "it runs only as an MCP task, which toolhub does not support"
    return None


def _remote_call(call: Callable[..., Any], server: str, remote: str) -> Callable[..., Any]:
    async def call_mcp_tool(ctx: ToolContext, **arguments: Any) -> ToolResult:
        result: ToolResult = await call(server, remote, arguments, ctx=ctx)
        return result

    call_mcp_tool.__qualname__ = f"mcp:{server}:{remote}"
    return call_mcp_tool


# Structured content larger than this is not kept beside the text (the text still is).
MAX_STRUCTURED_CHARS = 100_000
LIST_RESOURCES = "list_resources"
READ_RESOURCE = "read_resource"
MAX_URI_CHARS = 2_048
_LIST_SCHEMA = {
    "type": "object",
    "properties": {
        "cursor": {
            "type": "string",
            "description": "The cursor an earlier page ended with, for the page after it.",
        }
    },
    "additionalProperties": False,
}
_READ_SCHEMA = {
    "type": "object",
    "properties": {
        "uri": {
            "type": "string",
            "description": "The resource's URI, exactly as listed.",
            "minLength": 1,
            "maxLength": MAX_URI_CHARS,
        }
    },
    "required": ["uri"],
    "additionalProperties": False,
}


def resource_tools(
    config: McpServerConfig, manager: Any, *, check: Callable[[], bool], taken: set[str]
) -> tuple[list[Tool], list[Skipped]]:
    """The two readers of a server that offers resources: ``<server>__list_resources``
    and ``<server>__read_resource``, read-only, deferred like the server's tools, and
    subject to its allowlist. A name the server's own tools hold stays theirs."""
    origin = f"mcp:{config.name}"
    allowed = frozenset(config.allowlist) if config.allowlist is not None else None
    server = config.name

    # The call's context picks the connection: a person's or a chat's own where the
    # server has them (McpManager._connection_for), as for the server's tools.
    async def list_resources(ctx: ToolContext, cursor: str | None = None) -> ToolResult:
        result: ToolResult = await manager.list_resources(server, cursor, ctx=ctx)
        return result

    async def read_resource(ctx: ToolContext, uri: str) -> ToolResult:
        result: ToolResult = await manager.read_resource(server, uri, ctx=ctx)
        return result

    readers: list[tuple[str, Callable[..., Any], dict[str, Any], str]] = [
        (
            LIST_RESOURCES,
            list_resources,
            _LIST_SCHEMA,
            f"List the resources (documents, files, records) MCP server {server} offers, "
            f"a page at a time; read one with {tool_name(server, READ_RESOURCE)}.",
        ),
        (
            READ_RESOURCE,
            read_resource,
            _READ_SCHEMA,
            f"Read one of MCP server {server}'s resources by its URI.",
        ),
    ]
    tools: list[Tool] = []
    skipped: list[Skipped] = []
    for remote, fn, schema, description in readers:
        if allowed is not None and remote not in allowed:
            continue
        name = tool_name(server, remote)
        if name in taken:
            skipped.append(Skipped(name, f"the server's own tool {remote} holds the name", origin))
            continue
        fn.__qualname__ = f"mcp:{server}:{remote}"
        tools.append(
            McpTool(
                name=name,
                description=description,
                parameters=schema,
                fn=fn,
                label=remote.replace("_", " ").capitalize(),
                origin=origin,
                timeout=config.timeout,
                check_fn=check,
                defer=config.defer,
                source="mcp",
                persist_full=True,
                effect=READ_ONLY,
            )
        )
    return tools, skipped


def resource_listing(server: str, result: Any) -> ToolResult:
    """A ``ListResourcesResult`` as lines the model can act on: each URI (exactly, or
    left out when it holds characters no prompt should carry), name, type and summary."""
    reader = tool_name(server, READ_RESOURCE)
    lines = [f"Resources of MCP server {server} (read one with {reader}):"]
    left_out = 0
    for resource in result.resources or ():
        uri = str(resource.uri)
        if CONTROL_CHARS.search(uri) or len(uri) > MAX_URI_CHARS:
            left_out += 1
            continue
        name = untrusted_text(resource.title or resource.name, MAX_LABEL_CHARS)
        mime = f" ({untrusted_text(resource.mime_type, 80)})" if resource.mime_type else ""
        about = untrusted_text(resource.description, 200)
        lines.append(f"- {uri} — {name}{mime}" + (f": {about}" if about else ""))
    if len(lines) == 1:
        lines.append("(none)")
    if left_out:
        lines.append(f"({left_out} left out: their URIs hold control characters or are too long)")
    if result.next_cursor:
        lines.append(f"More: call again with cursor {json.dumps(result.next_cursor)}.")
    return ToolResult(content="\n".join(lines))


def resource_text(result: Any) -> ToolResult:
    """A ``ReadResourceResult``: text exactly as sent; an image blob as an image the model
    sees (its line marks where), other binary contents as files offered to the person (a
    line each tells the model)."""
    images: list[ToolImage] = []
    files: list[ToolFile] = []
    parts = [_contents(item, images, files) for item in result.contents or ()]
    text = "\n".join(parts) if parts else "(the resource is empty)"
    return ToolResult(content=text, images=tuple(images), files=tuple(files))


def _contents(item: Any, images: list[ToolImage], files: list[ToolFile]) -> str:
    text = getattr(item, "text", None)
    if isinstance(text, str):
        return text
    raw_mime = getattr(item, "mime_type", None)
    blob = getattr(item, "blob", "") or ""
    if (raw_mime or "").lower().startswith("image/"):
        return _image_of(raw_mime, blob, images)
    return _file_of(str(item.uri), raw_mime, blob, files)


def result_text(result: Any, *, reader: str = "") -> ToolResult:
    """An MCP ``CallToolResult`` as a ``ToolResult``: text exactly as sent; images the
    models take as images (a line each says so); audio and other binary resources as
    files offered to the person, never to the model (a line each tells it);
    a resource link names the ``reader`` tool that reads it. ``structuredContent`` is kept
    beside the text (``ToolResult.structured``); the model reads it as JSON only when the
    result has no content blocks, since the spec asks servers to send it as text too. An
    image's line marks where it was sent: the model gets it there, between the texts
    around it (``image_marker``; agent_app.history)."""
    parts: list[str] = []
    images: list[ToolImage] = []
    files: list[ToolFile] = []
    for item in result.content or ():
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)
        elif kind == "image":
            parts.append(_image_line(item, images))
        elif kind == "audio":
            parts.append(_file_of(None, item.mime_type, item.data, files, default="audio"))
        elif kind == "resource":
            resource = item.resource
            text = getattr(resource, "text", None)
            raw_mime = getattr(resource, "mime_type", None)
            mime = _mime(raw_mime)
            if isinstance(text, str):
                parts.append(f"[resource {resource.uri} ({mime})]\n{text}")
            elif (mime or "").lower().startswith("image/"):
                # An image the server sent as a blob: to the model as the image it is.
                blob = getattr(resource, "blob", "") or ""
                parts.append(f"[resource {resource.uri}]\n" + _image_of(mime, blob, images))
            else:
                blob = getattr(resource, "blob", "") or ""
                file = _file_of(str(resource.uri), raw_mime, blob, files)
                parts.append(f"[resource {resource.uri}]\n" + file)
        elif kind == "resource_link":
            name = untrusted_text(item.title or item.name, MAX_LABEL_CHARS)
            mime = f", {_mime(item.mime_type)}" if item.mime_type else ""
            how = f"; read it with {reader}" if reader else ""
            parts.append(f"[resource {name}{mime} at {item.uri}{how}]")
        else:
            parts.append(f"[{untrusted_text(kind, 40) or 'unknown'} content]")
    structured = result.structured_content
    if structured is not None and not parts:
        # Only a result with no content blocks at all reads it as text: otherwise it
        # repeats them (an image's base64 a second time, as the SDK's wrapping does).
        # Text for the model, not part of a schema: NaN is shown as such, not refused.
        parts.append(json.dumps(structured, sort_keys=True, ensure_ascii=False))
    # Exactly as sent: a file read with CR, ZWJ or bidi marks must come back as it is for an
    # edit to match it. The tool's own cap makes the one cut, with the true count.
    text = "\n".join(parts)
    if result.is_error:
        return ToolResult(
            content=text or "the MCP server reported an error", is_error=True, status="error"
        )
    return ToolResult(
        content=text, images=tuple(images), files=tuple(files), structured=_kept(structured)
    )


def _kept(structured: Any) -> Any:
    """``structured`` if it is JSON small enough to store beside the text, else None."""
    if structured is None:
        return None
    try:
        size = len(json.dumps(structured, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return None
    return structured if size <= MAX_STRUCTURED_CHARS else None


def _image_line(item: Any, images: list[ToolImage]) -> str:
    return _image_of(item.mime_type, item.data, images)


def _image_of(mime_type: str | None, data: str | None, images: list[ToolImage]) -> str:
    image = sendable_image(mime_type, data)
    size = f"{_mime(mime_type)}, about {_size(data):,} bytes"
    if isinstance(image, str):
        return f"[image: {size}; not sent as an image: {image}]"
    if len(images) >= MAX_IMAGES:
        return f"[image: {size}; not sent as an image: a result carries at most {MAX_IMAGES}]"
    images.append(image)
    return image_marker(len(images), size)


def _file_of(
    uri: str | None,
    mime: str | None,
    data: str | None,
    files: list[ToolFile],
    default: str = "file",
) -> str:
    """A file for the person, appended to ``files``; the line the model reads for it."""
    file = offer(uri=uri, mime=mime, data=data, offered=len(files), default=default)
    if isinstance(file, str):
        return not_offered_line(uri=uri, mime=mime, data=data, why=file, default=default)
    files.append(file)
    return offered_line(file)


def _mime(value: str | None) -> str:
    return untrusted_text(value, 80) or "unknown type"


def _size(data: str | None) -> int:
    return len(data or "") * 3 // 4


MAX_PROMPTS = 200
MAX_PROMPT_ARGUMENTS = 20
MAX_ARGUMENT_CHARS = 10_000
_PROMPT_NAME = re.compile(r"^[A-Za-z0-9_.:/-]{1,128}$")


def prompt_entries(server: str, listed: Iterable[Any]) -> tuple[McpPrompt, ...]:
    """A server's ``prompts/list`` as composer entries, by name; a prompt whose name no
    one could type (or that has too many arguments) is left out."""
    prompts: dict[str, McpPrompt] = {}
    for prompt in listed:
        if not _PROMPT_NAME.fullmatch(prompt.name or "") or prompt.name in prompts:
            continue
        arguments = tuple(
            McpPromptArgument(
                untrusted_text(argument.name, MAX_LABEL_CHARS),
                untrusted_text(argument.description, 200),
                bool(argument.required),
            )
            for argument in prompt.arguments or ()
            if untrusted_text(argument.name, MAX_LABEL_CHARS)
        )
        if len(arguments) > MAX_PROMPT_ARGUMENTS:
            continue
        prompts[prompt.name] = McpPrompt(
            server=server,
            name=prompt.name,
            title=untrusted_text(prompt.title or prompt.name, MAX_LABEL_CHARS),
            description=untrusted_text(prompt.description, 300),
            arguments=arguments,
        )
    return tuple(prompts[name] for name in sorted(prompts)[:MAX_PROMPTS])


def prompt_problem(prompt: McpPrompt, arguments: Mapping[str, Any]) -> str | None:
    """Why ``arguments`` cannot be sent for ``prompt``, if they cannot."""
    known = {argument.name for argument in prompt.arguments}
    unknown = sorted(set(arguments) - known)
    if unknown:
        return f"{prompt.name} takes no argument {unknown[0][:80]!r}"
    for argument in prompt.arguments:
        value = arguments.get(argument.name)
        if value is None or value == "":
            if argument.required:
                return f"{prompt.name} needs {argument.name}"
            continue
        if not isinstance(value, str):
            return f"{argument.name} must be text"
        if len(value) > MAX_ARGUMENT_CHARS:
            return f"{argument.name} is longer than {MAX_ARGUMENT_CHARS:,} characters"
    return None


def prompt_text(result: Any) -> str:
    """What a ``prompts/get`` returned, as one message from the person: each message's
    text as sent, other content in a line each."""
    parts = []
    for message in result.messages or ():
        item = message.content
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)
        elif kind == "resource" and isinstance(getattr(item.resource, "text", None), str):
            parts.append(item.resource.text)
        else:
            parts.append(f"[{untrusted_text(kind, 40) or 'unknown'} content]")
    return "\n\n".join(part for part in parts if part)


MAX_RESOURCES = 500


def resource_entries(server: str, listed: Iterable[Any]) -> tuple[McpResource, ...]:
    """A server's listed resources as composer entries, in its order; a URI no prompt
    should carry is left out, as in ``resource_listing``."""
    entries: list[McpResource] = []
    seen: set[str] = set()
    for resource in listed:
        uri = str(resource.uri)
        if CONTROL_CHARS.search(uri) or len(uri) > MAX_URI_CHARS or uri in seen:
            continue
        seen.add(uri)
        entries.append(
            McpResource(
                server=server,
                uri=uri,
                name=untrusted_text(resource.title or resource.name, MAX_LABEL_CHARS),
                mime_type=untrusted_text(resource.mime_type, 80),
                description=untrusted_text(resource.description, 200),
            )
        )
        if len(entries) == MAX_RESOURCES:
            break
    return tuple(entries)
