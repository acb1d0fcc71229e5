"""Images a tool returns, checked once so every provider takes them.

A tool result may carry images beside its text (``ToolResult.images``): the providers
send them as image blocks (Anthropic's ``image`` with a base64 source; an OpenAI-style
request, which takes images in user messages only, gets them in a user message after the
tool's answer) and the chat card shows them. Only what every provider accepts is kept:
PNG, JPEG, GIF and WebP whose bytes are what the media type says (providers refuse a
mismatch, and one refused block would fail every later request of the conversation), at
most ``MAX_IMAGE_BYTES`` each and ``MAX_IMAGES`` per result. Anything else stays a line of
text saying why it was not sent.

Where a tool sent an image among its text, the text holds a line for it
(``image_marker``); ``interleave`` puts the image back there for the model, between the
texts around it, without the line.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

# Anthropic's limit is 5 MB of base64 per image: 3.75 MB of bytes.
MAX_IMAGE_BYTES = 3_750_000
MAX_IMAGES = 8
_BASE64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
_SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}


_MARKER = "[image {number}: "


def image_marker(number: int, size: str) -> str:
    """The line that stands for image ``number`` (from 1) in a result's text."""
    return _MARKER.format(number=number) + size + "]"


@dataclass(frozen=True, slots=True)
class ToolImage:
    """One image as providers take it: its media type and its bytes in base64."""

    media_type: str
    data: str

    def to_json(self) -> dict[str, str]:
        return {"media_type": self.media_type, "data": self.data}


def sendable_image(media_type: str | None, data: str | None) -> ToolImage | str:
    """A ``ToolImage`` for base64 ``data`` of ``media_type``, or why it cannot be sent."""
    kind = (media_type or "").strip().lower()
    if kind == "image/jpg":
        kind = "image/jpeg"
    if kind not in _SIGNATURES:
        return f"{kind or 'no type'} is not a type models take (PNG, JPEG, GIF, WebP)"
    text = (data or "").strip()
    if len(text) * 3 // 4 > MAX_IMAGE_BYTES:
        return f"it is larger than {MAX_IMAGE_BYTES:,} bytes"
    if not text or not _BASE64.fullmatch(text):
        return "its data is not base64"
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return "its data is not base64"
    if not raw.startswith(_SIGNATURES[kind]) or (kind == "image/webp" and raw[8:12] != b"WEBP"):
        return f"its bytes are not a {kind.removeprefix('image/').upper()} image"
    return ToolImage(kind, text)


def stored_images(value: object) -> tuple[ToolImage, ...]:
    """The images of a stored result (a list of ``to_json`` dicts), checked again: a row
    written by an older version, or by hand, never reaches a provider or a page unchecked."""
    if not isinstance(value, list):
        return ()
    images = []
    for item in value[:MAX_IMAGES]:
        if isinstance(item, dict):
            image = sendable_image(item.get("media_type"), item.get("data"))
            if isinstance(image, ToolImage):
                images.append(image)
    return tuple(images)


def interleave(text: str, images: tuple[ToolImage, ...]) -> list[str | ToolImage]:
    """``text`` and ``images`` in the order the tool sent them: each image where its line
    was (the line itself dropped), the text between as pieces; an image whose line is not
    there (cut by the result's cap, or a tool that wrote none) comes after the text."""
    pieces: list[str | ToolImage] = []
    rest = text
    trailing: list[ToolImage] = []
    for number, image in enumerate(images, start=1):
        start = rest.find(_MARKER.format(number=number))
        end = rest.find("]", start) if start >= 0 else -1
        line_starts = start == 0 or (start > 0 and rest[start - 1] == "\n")
        line_ends = end >= 0 and (end + 1 == len(rest) or rest[end + 1] == "\n")
        if not (line_starts and line_ends):
            trailing.append(image)
            continue
        before = rest[:start].removesuffix("\n")
        if before:
            pieces.append(before)
        pieces.append(image)
        rest = rest[end + 1 :].removeprefix("\n")
    if rest:
        pieces.append(rest)
    return pieces + trailing
