"""Files a person attaches to their messages: uploaded into the chat's workspace, then
named by the message that sends them (docs/files.md).

What stays true:

- **Bounded three ways**, each refused with the bound in words and nothing kept: one file
  (``TOOLHUB_UPLOAD_FILE_MAX_BYTES``), one message (``TOOLHUB_UPLOAD_MESSAGE_MAX_FILES``
  and ``_BYTES``: the files waiting in the composer and those of the request together),
  one chat (``TOOLHUB_UPLOAD_CHAT_MAX_FILES`` and ``_BYTES``, every file it was ever given).
  The bounds are checked while the upload streams and again under the chat's row lock
  before anything joins the workspace, so two uploads at once cannot pass them together.
- **The owner's only.** The upload's room is worked out from the person the request is
  from: another person's chat, a binned one or a made-up id takes no byte and is a 404.
- **A message names files of its own chat**: ids of another chat, unknown ids and repeats
  are refused before the turn begins. An image among them also goes to the model as an
  image block, read from the workspace without following a link and checked by its bytes.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q, Sum
from django.http import HttpRequest

from sessions_app.models import Attachment, ChatSession, SessionEvent
from sessions_app.services.chats import sessions_of
from sessions_app.uploads import (
    Incoming,
    Room,
    UploadMalformed,
    UploadRefused,
    WorkspaceUploadHandler,
    media_type_of,
    workspace_of,
    workspace_place,
    workspace_unlink,
)
from toolhub.lib.errors import Invalid, NotFound
from toolhub.lib.workspace_fs import NotAFile, RefusedPath, file_open
from toolhub.tools.files import size_in_words
from toolhub.tools.images import MAX_IMAGE_BYTES, MAX_IMAGES, ToolImage, sendable_image


def _owned(user: Any, session_id: Any) -> ChatSession | None:
    if not getattr(user, "is_authenticated", False):
        return None
    return sessions_of(user).filter(pk=session_id).first()


def attachment_room(*, session_id: Any) -> Room:
    """What the chat may still take: the next message's room less what already waits in
    the composer, within what the chat may hold in all."""
    held = Attachment.objects.filter(session_id=session_id).aggregate(
        files=Count("pk"),
        bytes=Sum("size"),
        waiting=Count("pk", filter=Q(sent=False)),
        waiting_bytes=Sum("size", filter=Q(sent=False)),
    )
    message_files = settings.TOOLHUB_UPLOAD_MESSAGE_MAX_FILES - held["waiting"]
    chat_files = settings.TOOLHUB_UPLOAD_CHAT_MAX_FILES - held["files"]
    message_bytes = settings.TOOLHUB_UPLOAD_MESSAGE_MAX_BYTES - (held["waiting_bytes"] or 0)
    chat_bytes = settings.TOOLHUB_UPLOAD_CHAT_MAX_BYTES - (held["bytes"] or 0)
    return Room(
        files=max(0, min(message_files, chat_files)),
        bytes=max(0, min(message_bytes, chat_bytes)),
        files_bound="this message" if message_files <= chat_files else "this chat",
        bytes_bound="this message" if message_bytes <= chat_bytes else "this chat",
    )


class _ChatUploadHandler(WorkspaceUploadHandler):
    """Finds its room once the request's person is known: a session's person when the
    body is first read (a CSRF check), an API token's after DRF authenticated it."""

    def __init__(self, request: HttpRequest, *, session_id: Any) -> None:
        super().__init__(request, room=Room(0, 0, "this chat", "this chat"))
        self.session_id = session_id
        self.missing = False

    def handle_raw_input(self, *args: Any, **kwargs: Any) -> None:
        request = self.request
        if _owned(getattr(request, "user", None), self.session_id) is None:
            self.missing = True
        else:
            self.room = attachment_room(session_id=self.session_id)
        return

    def new_file(self, field_name: str, file_name: str, *args: Any, **kwargs: Any) -> None:
        if self.missing:
            self._stop("no such chat")
        super().new_file(field_name, file_name, *args, **kwargs)


def upload_handler_install(*, request: HttpRequest, session_id: Any) -> None:
    """Stream this request's files into ``session_id``'s workspace (read only once the
    request is known to be its owner's). Call before anything reads the request's body."""
    request.upload_handlers = [_ChatUploadHandler(request, session_id=session_id)]


def upload_discard(*, request: HttpRequest) -> None:
    """Remove what an upload wrote and did not place: its request was refused after its
    body was read (a failed CSRF check reads it first)."""
    for handler in request.upload_handlers:
        if isinstance(handler, WorkspaceUploadHandler):
            handler.discard()


def attachments_upload(*, request: HttpRequest, session: ChatSession) -> list[Attachment]:
    """The files of ``request`` (installed with ``upload_handler_install``) joined to
    ``session``'s workspace, in the order sent; ``UploadRefused`` or ``NotFound`` with
    nothing kept."""
    [handler] = request.upload_handlers
    assert isinstance(handler, _ChatUploadHandler)
    try:
        # The handler's own objects, not Django's UploadedFile (its stubs know only those).
        given: list[Any] = request.FILES.getlist("file")
        parts = [part for part in given if isinstance(part, Incoming)]
        if handler.missing:
            raise NotFound("no such session")
        if handler.refused:
            raise UploadRefused(f"Nothing was attached: {handler.refused}.")
        if not parts:
            raise UploadMalformed("Send the files as multipart form data, each named file.")
        return _stored(session=session, parts=parts)
    finally:
        handler.discard()


def _stored(*, session: ChatSession, parts: list[Incoming]) -> list[Attachment]:
    with transaction.atomic():
        ChatSession.objects.select_for_update().filter(pk=session.pk).exists()
        room = attachment_room(session_id=session.pk)
        total = sum(part.size for part in parts)
        if len(parts) > room.files:
            raise UploadRefused(
                f"Nothing was attached: {room.files_bound} can take {room.files} more files."
            )
        if total > room.bytes:
            raise UploadRefused(
                f"Nothing was attached: {room.bytes_bound} can take "
                f"{size_in_words(room.bytes)} more."
            )
        placed: list[str] = []
        try:
            for part in parts:
                placed.append(workspace_place(session_id=session.pk, part=part))
            return [
                Attachment.objects.create(
                    session=session,
                    name=name,
                    media_type=media_type_of(name, part.head),
                    size=part.size,
                )
                for name, part in zip(placed, parts, strict=True)
            ]
        except BaseException as failed:
            # All or nothing: the files this request placed leave with its rows.
            for name in placed:
                workspace_unlink(session_id=session.pk, name=name)
            if isinstance(failed, OSError):
                raise UploadMalformed("Nothing was attached: a file could not be stored.") from None
            raise


def attachments_waiting(*, session: ChatSession) -> list[Attachment]:
    """The files attached in the composer and not sent yet, oldest first."""
    return list(Attachment.objects.filter(session=session, sent=False))


def attachment_remove(*, user: Any, session: ChatSession, attachment_id: Any) -> None:
    """Take a file not sent yet out of the composer and the workspace (a file a message
    sent stays: the conversation speaks of it)."""
    with transaction.atomic():
        found = (
            Attachment.objects.select_for_update()
            .filter(pk=attachment_id, session=session, session__owner=user, sent=False)
            .first()
        )
        if found is None:
            raise NotFound("no such file waiting to be sent")
        found.delete()
        workspace_unlink(session_id=session.pk, name=found.name)


def attachment_entry(attachment: Attachment) -> dict[str, Any]:
    """What a message and the API say of a file: its id, name, type and size."""
    return {
        "id": str(attachment.pk),
        "name": attachment.name,
        "media_type": attachment.media_type,
        "size": attachment.size,
    }


def message_files(*, session_id: Any, ids: Sequence[str]) -> dict[str, Any]:
    """What a message keeps of the files it names (in ``transaction.atomic``): ``files``
    (each ``attachment_entry``) and ``images``, the images among them as the model takes
    them. The files are marked sent. ``Invalid`` for an id not of this chat's files, a
    repeat, or more than a message may carry."""
    if not ids:
        return {}
    if len(set(ids)) != len(ids):
        raise Invalid("a message names each file once", fields={"files": ["repeated"]})
    most, budget = (
        settings.TOOLHUB_UPLOAD_MESSAGE_MAX_FILES,
        settings.TOOLHUB_UPLOAD_MESSAGE_MAX_BYTES,
    )
    if len(ids) > most:
        raise Invalid(f"a message carries at most {most} files", fields={"files": ["too many"]})
    rows = {
        str(row.pk): row
        for row in Attachment.objects.select_for_update().filter(
            session_id=session_id, pk__in=list(ids)
        )
    }
    missing = [given for given in ids if given not in rows]
    if missing:
        raise Invalid(
            "that file is not attached to this chat (remove it and attach it again)",
            fields={"files": ["unknown"]},
        )
    ordered = [rows[given] for given in ids]
    if sum(row.size for row in ordered) > budget:
        raise Invalid(
            f"a message carries at most {size_in_words(budget)} of files",
            fields={"files": ["too large"]},
        )
    Attachment.objects.filter(pk__in=list(rows), sent=False).update(sent=True)
    images = [
        image.to_json()
        for image in (_image(session_id, row) for row in ordered)
        if image is not None
    ][:MAX_IMAGES]
    kept: dict[str, Any] = {"files": [attachment_entry(row) for row in ordered]}
    if images:
        kept["images"] = images
    return kept


def _image(session_id: Any, row: Attachment) -> ToolImage | None:
    """``row``'s image as the workspace holds it now, when it still is one a model takes
    (read as the Files panel reads: no link followed, a regular file only)."""
    if not row.media_type.startswith("image/") or row.size > MAX_IMAGE_BYTES:
        return None
    try:
        with file_open(workspace_of(session_id=session_id), row.name) as opened:
            raw = opened.head(MAX_IMAGE_BYTES + 1)
    except (RefusedPath, NotAFile):
        return None
    image = sendable_image(row.media_type, base64.b64encode(raw).decode("ascii"))
    return image if isinstance(image, ToolImage) else None


def message_said(*, session_id: Any, seq: int) -> dict[str, Any]:
    """The person's message at ``seq`` as stored (its text, its files and their images),
    or ``{}``: a regenerate answers it again."""
    data = (
        SessionEvent.objects.filter(session_id=session_id, seq=seq, kind="user_message")
        .values_list("data", flat=True)
        .first()
    )
    return data if isinstance(data, dict) else {}


def message_file_ids(*, session_id: Any, seq: int) -> list[str]:
    """The ids of the files the person's message at ``seq`` carried: an edit of it
    carries them again."""
    return said_file_ids(message_said(session_id=session_id, seq=seq))


def said_file_ids(said: dict[str, Any]) -> list[str]:
    """The ids of the files a stored message (``message_said``) names."""
    files = said.get("files")
    if not isinstance(files, list):
        return []
    return [str(entry["id"]) for entry in files if isinstance(entry, dict) and "id" in entry]
