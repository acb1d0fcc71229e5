"""Files a person uploads, streamed into their chat's workspace (docs/files.md).

What stays true:

- **Never whole in memory.** ``WorkspaceUploadHandler`` writes each chunk as it arrives
  to a file of its own under the workspaces' ``.incoming`` folder (Django's own handlers
  would keep small files in memory and large ones in /tmp). The request's body is bounded
  before it is read at all (toolhub.lib.asgi_handler), so a 2 GB upload is refused on its
  headers.
- **Refused before anything is kept.** A file past the per-file bound, a request past the
  message's bounds, or one past what the chat may still hold stops the upload; every
  file it wrote is removed, and the error says which bound and by how much.
- **Never overwrites, never follows a link.** A file joins the workspace under a cleaned
  name (``clean_name``: no folders, no control or direction characters, no leading dot or
  dash) through ``link()`` relative to the workspace's open directory, which fails on any
  existing name, a symlink the agent planted included; a taken name gets " (1)", " (2)"…
  The workspace directory itself is opened with ``O_NOFOLLOW``.
"""

from __future__ import annotations

import contextlib
import mimetypes
import os
import unicodedata
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, StopUpload

from toolhub.lib.errors import ServiceError
from toolhub.lib.workspace_fs import raster_type
from toolhub.tools.files import size_in_words

# The longest name a file keeps (in characters), its extension included.
NAME_MAX = 120
NAME_MAX_BYTES = 200
# Tried before a name counts as taken for good.
_SUFFIXES = 1_000
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def workspace_of(*, session_id: Any) -> Path:
    """The chat's workspace folder, where its path tools and ``bash`` work."""
    return Path(settings.TOOLHUB_WORKSPACE_ROOT) / str(session_id)


def clean_name(raw: str) -> str:
    """A name safe to create in a workspace and to show: the last part of a path, NFC,
    without control, format (bidi overrides, zero widths) or separator characters, no
    leading dot or dash, at most ``NAME_MAX`` characters with its extension kept."""
    name = unicodedata.normalize("NFC", raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(
        " " if unicodedata.category(char).startswith("Z") else char
        for char in name
        if unicodedata.category(char) not in ("Cc", "Cf", "Cs", "Co", "Cn")
    )
    name = " ".join(name.split()).lstrip(".-").strip()
    if not name:
        return "file"
    stem, dot, extension = name.rpartition(".")
    if not (dot and 0 < len(extension) <= 16 and stem):
        stem, extension = name, ""
    stem = stem[: NAME_MAX - len(extension) - 1]
    # A name is at most 255 bytes on disk: room is kept for " (999)".
    while len(f"{stem}.{extension}".encode()) > NAME_MAX_BYTES:
        stem = stem[:-1]
    stem = stem.rstrip() or "file"
    return f"{stem}.{extension}" if extension else stem


def _numbered(name: str, number: int) -> str:
    if not number:
        return name
    stem, dot, extension = name.rpartition(".")
    if dot and stem:
        return f"{stem} ({number}).{extension}"
    return f"{name} ({number})"


def media_type_of(name: str, head: bytes) -> str:
    """An image's type from its first bytes, anything else's from its name's extension;
    what the model is told, never what the client claimed."""
    image = raster_type(head)
    if image:
        return image
    guessed, _ = mimetypes.guess_type(name, strict=False)
    if guessed is None or guessed.startswith("image/"):
        # An "image" whose bytes are not one of the four is not shown as one.
        return "application/octet-stream"
    return guessed


class UploadRefused(ServiceError):
    """An upload past a bound: nothing of it was kept."""

    code = "too_large"
    status = 413


class UploadMalformed(ServiceError):
    code = "bad_upload"


@dataclass
class Incoming:
    """One uploaded file, written under ``.incoming`` and not yet in the workspace."""

    path: Path
    name: str
    size: int = 0
    head: bytes = b""


@dataclass(frozen=True)
class Room:
    """What a chat may still take in one request: files and bytes."""

    files: int
    bytes: int
    # Which bound each is ("this message", "this chat"), for the error.
    files_bound: str
    bytes_bound: str


class WorkspaceUploadHandler(FileUploadHandler):
    """Streams a request's files to disk as they arrive, within ``room``; ``refused``
    says why it stopped one (the parse then ends, and ``discard`` removes what it wrote)."""

    def __init__(self, request: Any, *, room: Room) -> None:
        super().__init__(request)
        self.room = room
        self.files: list[Incoming] = []
        self.refused: str = ""
        self._handle: Any = None
        self._total = 0

    def new_file(self, field_name: str, file_name: str, *args: Any, **kwargs: Any) -> None:
        super().new_file(field_name, file_name, *args, **kwargs)
        if len(self.files) >= self.room.files:
            self._stop(f"{self.room.files_bound} can take {self.room.files} more files at most")
        incoming = Path(settings.TOOLHUB_WORKSPACE_ROOT) / ".incoming"
        incoming.mkdir(parents=True, exist_ok=True)
        part = Incoming(path=incoming / f"{uuid.uuid4().hex}.part", name=clean_name(file_name))
        self.files.append(part)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        self._handle = os.fdopen(os.open(part.path, flags, 0o600), "wb")

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        part = self.files[-1]
        part.size += len(raw_data)
        self._total += len(raw_data)
        if part.size > settings.TOOLHUB_UPLOAD_FILE_MAX_BYTES:
            most = size_in_words(settings.TOOLHUB_UPLOAD_FILE_MAX_BYTES)
            self._stop(f"{part.name} is larger than {most}, the most one file may be")
        if self._total > self.room.bytes:
            self._stop(
                f"{self.room.bytes_bound} can take {size_in_words(self.room.bytes)} more at most"
            )
        if len(part.head) < 16:
            part.head = (part.head + raw_data)[:16]
        self._handle.write(raw_data)
        return

    def file_complete(self, file_size: int) -> Incoming:  # type: ignore[override]
        self._close()
        return self.files[-1]

    def upload_interrupted(self) -> None:
        self._close()

    def discard(self) -> None:
        """Remove every file this upload wrote (a refused or broken request)."""
        self._close()
        for part in self.files:
            with contextlib.suppress(FileNotFoundError):
                part.path.unlink()

    def _stop(self, reason: str) -> None:
        self.refused = reason
        self._close()
        raise StopUpload(connection_reset=False)

    def _close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def workspace_place(*, session_id: Any, part: Incoming) -> str:
    """Move ``part`` into the chat's workspace under its name or the first free numbered
    one, never over an existing entry; the name it took."""
    folder = workspace_of(session_id=session_id)
    folder.mkdir(parents=True, exist_ok=True)
    directory = os.open(folder, _DIRECTORY)
    try:
        for number in range(_SUFFIXES):
            name = _numbered(part.name, number)
            try:
                os.link(part.path, name, dst_dir_fd=directory, follow_symlinks=False)
            except FileExistsError:
                continue
            part.path.unlink()
            return name
    finally:
        os.close(directory)
    raise UploadRefused(
        f"Nothing was attached: the workspace already holds {_SUFFIXES} files named like "
        f"{part.name}."
    )


def workspace_unlink(*, session_id: Any, name: str) -> None:
    """Remove ``name`` from the chat's workspace if it is there (a link is removed, never
    followed; a folder the agent put under the name stays)."""
    try:
        directory = os.open(workspace_of(session_id=session_id), _DIRECTORY)
    except OSError:
        return
    try:
        os.unlink(name, dir_fd=directory)
    except OSError:
        pass
    finally:
        os.close(directory)
