"""A chat's workspace files taken out by its owner: the Files panel's list and previews, a
file's download and the whole workspace as a zip, for the chat page and the API alike.

The disk rules are ``toolhub.lib.workspace_fs``'s (no symlink followed at any step, only
regular files read, paths refused before any disk access); this module adds who may read
and how it is served:

- Only the chat's owner, through a chat that is not binned: the views fetch the chat with
  ``session_get_for_user`` first, so another person's chat, a binned one and a made-up id
  are the same 404 before the disk is touched.
- A download is always an attachment (an RFC 6266 name), ``nosniff``, sandboxed, private;
  its type is one of the four raster images told by its bytes, else
  ``application/octet-stream``: a ``<script>.html`` saves, it never renders.
- Only an image preview is served inline, and only a PNG, JPEG, GIF or WebP told by its
  bytes (never SVG), with ``nosniff`` and ``Content-Security-Policy: sandbox``. A text
  preview is the file's first ``PREVIEW_TEXT_BYTES`` as UTF-8, escaped by the template.
- Lists show ``TOOLHUB_WORKSPACE_LIST_MAX`` entries and say how many more; a walk looks
  at ``SCAN_MAX`` entries at most. A zip is refused, saying why, past
  ``TOOLHUB_WORKSPACE_ZIP_MAX_FILES`` files or ``TOOLHUB_WORKSPACE_ZIP_MAX_BYTES`` bytes
  (sizes as the disk reports them, so a sparse file counts at its full size), and is
  streamed as it is built. Bodies are sent a chunk at a time from the server's loop
  (``_streamed``): Django would read a sync iterator whole before sending it under ASGI.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import StreamingHttpResponse
from django.utils.http import content_disposition_header

from sessions_app.models import ChatSession
from sessions_app.uploads import workspace_of
from toolhub.lib.downloads import SANDBOX
from toolhub.lib.errors import Invalid, NotFound, ServiceError
from toolhub.lib.workspace_fs import (
    Entry,
    Listing,
    NotAFile,
    OpenFile,
    RefusedPath,
    file_open,
    raster_type,
    utf8_text,
    workspace_walk,
    zip_chunks,
)
from toolhub.tools.files import OCTET_STREAM, clean_name, size_in_words

PREVIEW_TEXT_BYTES = 64 * 1024
# A walk stops after this many entries: the list says "more", the zip is refused.
SCAN_MAX = 20_000
_SIGNATURE_BYTES = 16


class ZipRefused(ServiceError):
    """The workspace is past a zip's bounds; the message says which and what to do."""

    code = "too_large"
    status = 409


@dataclass(frozen=True, slots=True)
class ShownEntry:
    """One line of the Files panel and of the API's list."""

    path: str
    kind: str
    size: int
    modified: datetime
    servable: bool

    @property
    def size_words(self) -> str:
        return size_in_words(self.size)

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "kind": self.kind,
            "size": self.size,
            "modified": self.modified.isoformat(),
            "downloadable": self.servable,
        }


@dataclass(frozen=True, slots=True)
class WorkspaceList:
    """The panel's list: the newest ``entries`` first, how many more there are (``more``;
    at least that many when ``complete`` is False), and why a zip would be refused."""

    entries: tuple[ShownEntry, ...]
    more: int
    complete: bool
    exists: bool
    zip_refusal: str


def _shown(entry: Entry) -> ShownEntry:
    modified = datetime.fromtimestamp(max(entry.modified, 0), tz=UTC)
    return ShownEntry(entry.path, entry.kind, entry.size, modified, entry.servable)


def _zip_refusal(listing: Listing) -> str:
    files = listing.files
    most_files = settings.TOOLHUB_WORKSPACE_ZIP_MAX_FILES
    most_bytes = settings.TOOLHUB_WORKSPACE_ZIP_MAX_BYTES
    if not listing.exists or not files:
        return "There are no files to zip yet."
    if not listing.complete or len(files) > most_files:
        return (
            f"The workspace holds more than {most_files:,} files, the most a zip takes. "
            "Download the files you need one at a time."
        )
    total = sum(entry.size for entry in files)
    if total > most_bytes:
        return (
            f"The workspace's files come to {size_in_words(total)}, more than the "
            f"{size_in_words(most_bytes)} a zip takes. Download the files you need one "
            "at a time."
        )
    return ""


def workspace_list(*, session: ChatSession) -> WorkspaceList:
    """The workspace's files and links, newest first, bounded (module docstring)."""
    listing = workspace_walk(workspace_of(session_id=session.pk), most=SCAN_MAX)
    most = settings.TOOLHUB_WORKSPACE_LIST_MAX
    shown = tuple(_shown(entry) for entry in listing.entries[:most])
    more = max(0, len(listing.entries) - most)
    return WorkspaceList(shown, more, listing.complete, listing.exists, _zip_refusal(listing))


@dataclass(frozen=True, slots=True)
class Preview:
    """What the panel shows of one file: ``text`` (its start, ``cut`` when there is more),
    an ``image`` type, or neither, with ``why``."""

    path: str
    size: int
    text: str | None = None
    cut: bool = False
    image: str = ""
    why: str = ""

    @property
    def size_words(self) -> str:
        return size_in_words(self.size)


@contextlib.contextmanager
def _opened(session: ChatSession, path: str) -> Iterator[OpenFile]:
    """The file, with the disk's refusals as the service errors views answer."""
    try:
        with file_open(workspace_of(session_id=session.pk), path) as opened:
            yield opened
    except RefusedPath as exc:
        raise Invalid(str(exc), fields={"path": [str(exc)]}) from None
    except NotAFile:
        raise NotFound("no such file in this chat's workspace") from None


def workspace_preview(*, session: ChatSession, path: str) -> Preview:
    """The start of a text file, or an image's type, or why neither can be shown."""
    with _opened(session, path) as opened:
        head = opened.head(PREVIEW_TEXT_BYTES)
        image = raster_type(head[:_SIGNATURE_BYTES])
        if image:
            return Preview(path, opened.size, image=image)
        cut = opened.size > len(head)
        text = utf8_text(head, cut=cut)
        if text is None:
            return Preview(path, opened.size, why="It is not text or a picture the page can show.")
        return Preview(path, opened.size, text=text, cut=cut)


async def _streamed(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """``chunks`` read a chunk at a time on a worker thread, and closed however the
    sending ends (a person who cancels the download closes the files it holds)."""
    step = sync_to_async(lambda: next(chunks, b""), thread_sensitive=False)
    close = sync_to_async(getattr(chunks, "close", lambda: None), thread_sensitive=False)
    try:
        while chunk := await step():
            yield chunk
    finally:
        await close()


def _served(chunks: Iterator[bytes], *, media_type: str, name: str = "") -> StreamingHttpResponse:
    response = StreamingHttpResponse(_streamed(chunks), content_type=media_type)
    if name:
        # Cleaned: a name from the disk reaches a header.
        response["Content-Disposition"] = content_disposition_header(
            as_attachment=True, filename=clean_name(name)
        )
    response["X-Content-Type-Options"] = "nosniff"
    # Set here, so the site's own policy (which lets its pages run) is not added.
    response["Content-Security-Policy"] = SANDBOX
    response["Cross-Origin-Resource-Policy"] = "same-origin"
    response["Cache-Control"] = "private, no-store"
    return response


def _file_chunks(
    session: ChatSession, path: str, *, image_only: bool
) -> tuple[str, int, Iterator[bytes]]:
    """The file's type (a raster image's, else octet-stream), its size and its bytes; the
    file stays open until the bytes are read or closed."""
    held = contextlib.ExitStack()
    opened = held.enter_context(_opened(session, path))
    head = opened.head(_SIGNATURE_BYTES)
    media_type = raster_type(head)
    if image_only and not media_type:
        held.close()
        raise NotFound("not a picture the page can show")

    def chunks() -> Iterator[bytes]:
        with held:
            yield head
            yield from opened.chunks(most=opened.size - len(head))

    return media_type or OCTET_STREAM, opened.size, chunks()


def workspace_download(*, session: ChatSession, path: str) -> StreamingHttpResponse:
    """The file as an attachment (module docstring)."""
    media_type, size, chunks = _file_chunks(session, path, image_only=False)
    response = _served(chunks, media_type=media_type, name=path.rsplit("/", 1)[-1])
    response["Content-Length"] = str(size)
    return response


def workspace_image(*, session: ChatSession, path: str) -> StreamingHttpResponse:
    """A PNG, JPEG, GIF or WebP (told by its bytes) inline, for the panel's preview; any
    other file is "no such picture"."""
    media_type, size, chunks = _file_chunks(session, path, image_only=True)
    response = _served(chunks, media_type=media_type)
    response["Content-Length"] = str(size)
    return response


def workspace_zip(*, session: ChatSession) -> StreamingHttpResponse:
    """Every regular file of the workspace in one zip, or ``ZipRefused`` saying why."""
    listing = workspace_walk(workspace_of(session_id=session.pk), most=SCAN_MAX)
    refusal = _zip_refusal(listing)
    if refusal:
        raise ZipRefused(refusal)
    stem = re.sub(r"[^\w-]+", "-", str(session)).strip("-")[:60] or "chat"
    chunks = zip_chunks(
        workspace_of(session_id=session.pk), sorted(listing.files, key=lambda e: e.path)
    )
    return _served(chunks, media_type="application/zip", name=f"{stem}-files.zip")
