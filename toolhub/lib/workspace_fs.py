"""A chat's workspace read from outside the agent: listed, a file read, the whole zipped,
without ever following a symlink the agent made. Django-free; ``sessions_app.workspace_files``
serves it to the chat's owner.

The agent writes in its workspace with bash, so anything in it may be hostile: a symlink to
/etc, a symlink swapped in for a directory between a check and a read, a FIFO, a loop, a
sparse file of terabytes, a million files, a name with control characters. What stays true:

- A path is relative and made of plain names: never empty, absolute, with a NUL or control
  character or a ``..`` segment (``path_parts``); ``.`` and empty segments are dropped.
- A file is opened by walking from the workspace's own directory one name at a time, each
  opened relative to the directory before it (``dir_fd``, as openat) with ``O_NOFOLLOW``:
  a symlink anywhere on the path, even one swapped in after the listing, fails the open
  and is never followed. The workspace directory itself is opened the same way.
- Only a regular file is read (``fstat`` after the open, ``S_ISREG``); a FIFO cannot hold
  the open up (``O_NONBLOCK``). A read never passes the size the open saw.
- A walk never descends into a symlink (it is listed as a link), goes at most ``MAX_DEPTH``
  directories deep and looks at most at the entries it is given; it says when it stopped.
- A zip holds only what a walk found as regular files, each cut at the size the walk saw,
  and is built as it is sent, a chunk at a time, never whole in memory.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import stat
import time
import unicodedata
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

MAX_DEPTH = 64
CHUNK = 64 * 1024
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
# Raster images a browser draws without running anything, told by their first bytes.
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


class RefusedPath(ValueError):
    """A path that can never name a workspace file; the message says why."""


class NotAFile(LookupError):
    """No regular file there: missing, a directory, a symlink (never followed) or another
    kind of file."""


def path_parts(path: str) -> tuple[str, ...]:
    """The names ``path`` is made of, or ``RefusedPath`` (module docstring)."""
    if not path or len(path) > 4096:
        raise RefusedPath("give a file's path inside the workspace")
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in path):
        raise RefusedPath("a path may not hold control characters")
    if path.startswith(("/", "\\")):
        raise RefusedPath("give a path inside the workspace, not an absolute one")
    parts = tuple(part for part in path.split("/") if part not in ("", "."))
    if ".." in parts:
        raise RefusedPath("a path may not go up a folder ('..')")
    if not parts:
        raise RefusedPath("give a file's path inside the workspace")
    return parts


def raster_type(head: bytes) -> str:
    """PNG, JPEG, GIF or WebP by their signature, else "" (SVG never: it can run script)."""
    for signature, media_type in _SIGNATURES:
        if head.startswith(signature):
            return media_type
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return ""


def utf8_text(head: bytes, *, cut: bool) -> str | None:
    """``head`` as text when it is UTF-8 without NUL bytes (a character cut at the end of a
    partial read is dropped), else None."""
    if b"\x00" in head:
        return None
    try:
        return codecs.getincrementaldecoder("utf-8")().decode(head, final=not cut)
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True, slots=True)
class Entry:
    """One thing a walk found: ``kind`` is "file" (regular), "link" (never followed) or
    "other" (a FIFO, socket or device). ``path`` is safe to show; ``servable`` says it
    names a regular file that ``path_parts`` takes as it is."""

    path: str
    kind: str
    size: int
    modified: float
    servable: bool = False


@dataclass(frozen=True, slots=True)
class Listing:
    """A workspace's files and links, newest first (then by path). ``complete`` is False
    when the walk stopped at its bound; ``exists`` False when there is no workspace."""

    entries: tuple[Entry, ...] = ()
    complete: bool = True
    exists: bool = False

    @property
    def files(self) -> tuple[Entry, ...]:
        """The regular files that can be served."""
        return tuple(entry for entry in self.entries if entry.servable)


def _open_root(root: Path) -> int:
    try:
        return os.open(root, _OPEN_DIR)
    except FileNotFoundError:
        raise NotAFile("this chat has no files yet") from None
    except OSError:
        raise NotAFile("this chat's workspace can not be read") from None


def _open_dir(root_fd: int, parts: Sequence[str]) -> int:
    """The directory ``parts`` under ``root_fd``, opened a name at a time, never following
    a symlink; the caller closes it."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            next_fd = os.open(part, _OPEN_DIR, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    except OSError:
        os.close(fd)
        raise NotAFile("no such file") from None
    return fd


@dataclass(slots=True)
class OpenFile:
    """A regular file opened for reading, and its size when opened."""

    fd: int
    size: int
    modified: float

    def chunks(self, *, most: int | None = None) -> Iterator[bytes]:
        """Its bytes, ``CHUNK`` at a time, never more than its size when opened (or
        ``most``): a file that grows meanwhile is cut there."""
        left = self.size if most is None else min(self.size, most)
        while left > 0:
            data = os.read(self.fd, min(CHUNK, left))
            if not data:
                return
            left -= len(data)
            yield data

    def head(self, most: int) -> bytes:
        return b"".join(self.chunks(most=most))


@contextlib.contextmanager
def file_open(root: Path, path: str) -> Iterator[OpenFile]:
    """The regular file at ``path`` in the workspace ``root``: ``RefusedPath`` for a path
    that can name none, ``NotAFile`` when there is none (module docstring: no symlink is
    followed, at any step)."""
    parts = path_parts(path)
    root_fd = _open_root(root)
    try:
        dir_fd = _open_dir(root_fd, parts[:-1])
    finally:
        os.close(root_fd)
    try:
        fd = os.open(parts[-1], _OPEN_FILE, dir_fd=dir_fd)
    except OSError:
        raise NotAFile("no such file") from None
    finally:
        os.close(dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotAFile("not a file")
        yield OpenFile(fd, info.st_size, info.st_mtime)
    finally:
        os.close(fd)


def _shown(path: str) -> tuple[str, bool]:
    """``path`` as it can be shown (names the disk holds may not be UTF-8), and whether it
    is the path itself."""
    shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    shown = "".join("?" if unicodedata.category(char) == "Cc" else char for char in shown)
    return shown, shown == path


def _entry(prefix: str, item: os.DirEntry[str]) -> Entry | None:
    """``item`` as a listing names it, or None for a directory (walked, not listed)."""
    info = item.stat(follow_symlinks=False)
    if stat.S_ISDIR(info.st_mode):
        return None
    kind = (
        "file" if stat.S_ISREG(info.st_mode) else "link" if stat.S_ISLNK(info.st_mode) else "other"
    )
    shown, exact = _shown(prefix + item.name)
    size = info.st_size if kind == "file" else 0
    return Entry(shown, kind, size, info.st_mtime, servable=kind == "file" and exact)


def workspace_walk(root: Path, *, most: int) -> Listing:
    """What the workspace ``root`` holds, looking at ``most`` entries at most (module
    docstring)."""
    try:
        root_fd = _open_root(root)
    except NotAFile:
        return Listing()
    found: list[Entry] = []
    seen, complete = 0, True
    pending: list[tuple[str, ...]] = [()]
    try:
        while pending and complete:
            parts = pending.pop()
            try:
                dir_fd = _open_dir(root_fd, parts)
            except NotAFile:
                continue  # gone, or swapped for a link, since its parent was read
            try:
                with os.scandir(dir_fd) as items:
                    for item in items:
                        seen += 1
                        if seen > most:
                            complete = False
                            break
                        entry = _entry("".join(f"{p}/" for p in parts), item)
                        if entry is not None:
                            found.append(entry)
                        elif len(parts) < MAX_DEPTH:
                            pending.append((*parts, item.name))
                        else:
                            complete = False
            finally:
                os.close(dir_fd)
    finally:
        os.close(root_fd)
    found.sort(key=lambda entry: (-entry.modified, entry.path))
    return Listing(tuple(found), complete, True)


class _Pipe:
    """Where the zip writes: kept until taken, so it is sent a chunk at a time. Not
    seekable, so zipfile writes each entry's sizes after its data."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self.pending = 0

    def write(self, data: bytes) -> int:
        self._chunks.append(bytes(data))
        self.pending += len(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def take(self) -> bytes:
        data = b"".join(self._chunks)
        self._chunks.clear()
        self.pending = 0
        return data


def _date_time(modified: float) -> tuple[int, int, int, int, int, int]:
    # A zip's dates run from 1980 to 2107.
    year_2107 = 4354819199.0
    moment = time.gmtime(min(max(modified, 315532800.0), year_2107))
    return moment[:6]


def zip_chunks(root: Path, files: Sequence[Entry]) -> Iterator[bytes]:
    """The zip of ``files`` (a walk's regular files) in the workspace ``root``, as it is
    written. A file gone, or no longer a regular file, since the walk is left out."""
    pipe = _Pipe()
    with zipfile.ZipFile(pipe, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
        for entry in files:
            try:
                with file_open(root, entry.path) as opened:
                    info = zipfile.ZipInfo(entry.path, _date_time(entry.modified))
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.external_attr = 0o644 << 16
                    big = entry.size >= zipfile.ZIP64_LIMIT
                    with archive.open(info, "w", force_zip64=big) as out:
                        for data in opened.chunks(most=entry.size):
                            out.write(data)
                            if pipe.pending >= CHUNK:
                                yield pipe.take()
            except (NotAFile, RefusedPath):
                continue
    yield pipe.take()
