"""What an MCP server sends back, as a ``ToolResult``: a call's result
(``result_text``) and a resource read (``resource_text``). Text comes exactly as sent;
images go to the model as images where they are sendable (``toolhub.tools.images``);
audio and other binary contents are files offered to the person, never to the model,
with a line each telling it.

Invariants: text is never cleaned or cut here (a file read with CR, ZWJ or bidi marks
must come back as it is for an edit to match it; the tool's own cap makes the one cut,
with the true count); everything else a server names (types, titles, kinds) is untrusted
text; a result carries at most ``MAX_IMAGES`` images, and structured content is kept
beside the text only while it is JSON of at most ``MAX_STRUCTURED_CHARS``.
"""

from __future__ import annotations

import json
from typing import Any

from toolhub.tools.files import ToolFile, not_offered_line, offer, offered_line
from toolhub.tools.images import MAX_IMAGES, ToolImage, image_marker, sendable_image
from toolhub.tools.mcp.config import MAX_LABEL_CHARS, untrusted_text
from toolhub.tools.tool import ToolResult

# Structured content larger than this is not kept beside the text (the text still is).
MAX_STRUCTURED_CHARS = 100_000


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
    images: list[ToolImage] = []
    files: list[ToolFile] = []
    parts = [_content_line(item, images, files, reader) for item in result.content or ()]
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


def _content_line(item: Any, images: list[ToolImage], files: list[ToolFile], reader: str) -> str:
    """One content block of a call's result as the model reads it; an image or a file it
    carries is appended to ``images`` or ``files``."""
    kind = getattr(item, "type", "")
    if kind == "text":
        text: str = item.text
        return text
    if kind == "image":
        return _image_line(item, images)
    if kind == "audio":
        return _file_of(None, item.mime_type, item.data, files, default="audio")
    if kind == "resource":
        return _embedded(item.resource, images, files)
    if kind == "resource_link":
        name = untrusted_text(item.title or item.name, MAX_LABEL_CHARS)
        mime = f", {_mime(item.mime_type)}" if item.mime_type else ""
        how = f"; read it with {reader}" if reader else ""
        return f"[resource {name}{mime} at {item.uri}{how}]"
    return f"[{untrusted_text(kind, 40) or 'unknown'} content]"


def _embedded(resource: Any, images: list[ToolImage], files: list[ToolFile]) -> str:
    """An embedded resource: its text as sent, an image blob as an image, any other blob
    as a file offered to the person."""
    text = getattr(resource, "text", None)
    raw_mime = getattr(resource, "mime_type", None)
    mime = _mime(raw_mime)
    if isinstance(text, str):
        return f"[resource {resource.uri} ({mime})]\n{text}"
    blob = getattr(resource, "blob", "") or ""
    if (mime or "").lower().startswith("image/"):
        # An image the server sent as a blob: to the model as the image it is.
        return f"[resource {resource.uri}]\n" + _image_of(mime, blob, images)
    file = _file_of(str(resource.uri), raw_mime, blob, files)
    return f"[resource {resource.uri}]\n" + file


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
