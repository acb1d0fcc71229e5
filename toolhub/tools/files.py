"""Files a tool returns for the person, never for the model.

A tool result may carry files beside its text (``ToolResult.files``): bytes an MCP server
sent that no model takes (a PDF, a recording, an archive). The chat stores them and its
card offers each as a download; the model gets only a line saying what was offered
(``offered_line``), never the bytes, which would be noise in its context at best and
instructions to it at worst.

What is kept true here, so that whatever stores or serves a ``ToolFile`` can rely on it:

- its bytes are what the tool sent, decoded from strict base64 (no whitespace inside it,
  no missing padding, no stray characters); anything else is not offered, and a line
  says why;
- at most ``MAX_FILE_BYTES`` each and ``MAX_FILES`` per result;
- its ``name`` is safe to save anywhere: one path segment of at most ``MAX_NAME_CHARS``,
  without control, format (bidi overrides, zero-width) or separator characters, quotes,
  characters Windows refuses, or a leading dot; never empty;
- its ``media_type`` is a well-formed ``type/subtype`` in lower case, or
  ``application/octet-stream``.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import re
import unicodedata
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

MAX_FILE_BYTES = 10_000_000
MAX_FILES = 8
MAX_NAME_CHARS = 120
OCTET_STREAM = "application/octet-stream"

_BASE64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
# RFC 6838's restricted names, without parameters: what a Content-Type may say unquoted.
_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")
# Quotes end a name in headers and shells, and Windows refuses the rest in a name: a file
# must save under the name shown. Only the last of the segments separators make is a name.
_QUOTES = re.compile(r"[\"'`]")
_REFUSED = re.compile(r"[<>:|?*]")
_SEPARATORS = re.compile(r"[\\/]")
# Control, format (bidi overrides, zero-width joiners), line and paragraph separators,
# surrogates, private use and unassigned code points.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_LONGEST_EXTENSION = 16
# The base64 of MAX_FILE_BYTES bytes: anything longer decodes to more.
_LONGEST_BASE64 = (MAX_FILE_BYTES + 2) // 3 * 4
# Audio types MCP servers send that Python's table (3.12) has no extension for.
_AUDIO_EXTENSIONS = {
    "audio/wav": ".wav",
    "audio/wave": ".wav",
    "audio/ogg": ".ogg",
    "audio/flac": ".flac",
    "audio/mp4": ".m4a",
    "audio/webm": ".webm",
}


def _extensions() -> mimetypes.MimeTypes:
    # Python's own table only: the same extension on every machine, whatever
    # /etc/mime.types says there.
    types = mimetypes.MimeTypes()
    for kind, extension in _AUDIO_EXTENSIONS.items():
        types.add_type(kind, extension)
    return types


_TYPES = _extensions()


@dataclass(frozen=True, slots=True)
class ToolFile:
    """One file for the person: a safe name, a well-formed media type, its bytes. Built
    by any tool, not only through ``offer``: the name and type are made safe here."""

    name: str
    media_type: str
    data: bytes

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", clean_name(self.name))
        object.__setattr__(self, "media_type", media_type(self.media_type))

    @property
    def size(self) -> int:
        return len(self.data)


def media_type(value: str | None) -> str:
    """``value`` (parameters dropped, lower case) if it is a well-formed media type, else
    ``application/octet-stream``."""
    essence = (value or "").split(";", 1)[0].strip().lower()
    return essence if _MEDIA_TYPE.fullmatch(essence) else OCTET_STREAM


def file_name(uri: str | None, mime: str | None, *, default: str = "file") -> str:
    """A name to save a file under, from the last path segment of the ``uri`` it came from
    (percent-decoded), else ``default``; with an extension guessed from ``mime`` when the
    name has none."""
    name = _cleaned(_last_segment(uri or ""))
    stem, dot, extension = name.rpartition(".")
    if not dot or not stem or len(extension) > _LONGEST_EXTENSION:
        guessed = _TYPES.guess_extension(media_type(mime)) or ""
        name = (name or default) + guessed
    return _bounded(name)


def clean_name(name: str) -> str:
    """``name`` made safe to save and to show: what ``ToolFile`` keeps (never empty)."""
    return _bounded(_cleaned(_SEPARATORS.split(str(name))[-1])) or "file"


def offer(
    *, uri: str | None, mime: str | None, data: str | None, offered: int = 0, default: str = "file"
) -> ToolFile | str:
    """A ``ToolFile`` for base64 ``data`` sent from ``uri`` as ``mime``, or why it cannot
    be offered; ``offered`` is how many files the result already carries."""
    if offered >= MAX_FILES:
        return f"a result offers at most {MAX_FILES} files"
    text = (data or "").strip()
    if len(text) > _LONGEST_BASE64:
        # Refused before decoding: a huge string costs nothing more than its length.
        return f"it is larger than {MAX_FILE_BYTES:,} bytes"
    if not _BASE64.fullmatch(text) or len(text) % 4:
        return "its data is not base64"
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return "its data is not base64"
    if len(raw) > MAX_FILE_BYTES:
        return f"it is larger than {MAX_FILE_BYTES:,} bytes"
    return ToolFile(file_name(uri, mime, default=default), media_type(mime), raw)


def offered_line(file: ToolFile) -> str:
    """The line the model reads for a file offered to the person."""
    return f"[file offered to the person: {file.name}, {file.media_type}, {file.size:,} bytes]"


def not_offered_line(
    *, uri: str | None, mime: str | None, data: str | None, why: str, default: str = "file"
) -> str:
    """The line the model reads for a file that was not offered, and why."""
    about = len((data or "").strip()) * 3 // 4
    name = file_name(uri, mime, default=default)
    return f"[file {name} ({media_type(mime)}, about {about:,} bytes) not offered: {why}]"


def size_in_words(size: int) -> str:
    """``size`` bytes as a person reads it, in decimal units: "12 KB", "1.5 MB"."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if size >= scale:
            value = size / scale
            shown = f"{value:.0f}" if value >= 10 else f"{value:.1f}".removesuffix(".0")
            return f"{shown} {unit}"
    return "1 byte" if size == 1 else f"{size} bytes"


def _last_segment(uri: str) -> str:
    parts = urlsplit(uri)
    # "blob://pixel" has no path: its host is the only name it has.
    where = parts.path.rstrip("/") or parts.netloc
    # Decoded before splitting again: "..%2F..%2Fetc%2Fpasswd" names "passwd".
    decoded = unquote(where.rsplit("/", 1)[-1], errors="replace")
    return _SEPARATORS.split(decoded)[-1]


def _cleaned(name: str) -> str:
    kept = "".join(
        "" if unicodedata.category(char) in _INVISIBLE else char
        for char in unicodedata.normalize("NFC", name)
    )
    kept = " ".join(_REFUSED.sub("_", _QUOTES.sub("", kept)).split())
    # A leading dot hides a file (or climbs a directory); a trailing one Windows drops.
    return kept.lstrip(". ").rstrip(". ")


def _bounded(name: str) -> str:
    if len(name) <= MAX_NAME_CHARS:
        return name
    stem, dot, extension = name.rpartition(".")
    if not dot or len(extension) > _LONGEST_EXTENSION:
        return name[:MAX_NAME_CHARS].rstrip(". ")
    return stem[: MAX_NAME_CHARS - len(extension) - 1].rstrip(". ") + "." + extension
