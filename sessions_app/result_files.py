"""Files tools offered the person: stored with the chat, read back by its owner only.

A tool result's files (``ToolResult.files``, toolhub/tools/files.py) are stored when the
turn stores the result, and the ``tool_result`` event names them (``files``: id, name,
type, size; never the bytes), so the card offers each for download. What stays true:

- a chat keeps at most ``TOOLHUB_RESULT_FILES_PER_SESSION`` files and
  ``TOOLHUB_RESULT_FILES_MAX_BYTES`` bytes of them; a file past either is not stored and
  its entry says why (``refused``), for the card and the model alike;
- only the chat's owner reads a file, through the chat it came with: another person's
  file, one of another chat, a made-up id and a binned chat's file are all "no such file".

A store locks the chat's row first, so the count and the total it reads cannot race
another store of the same chat (a turn's calls may finish together).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Sum

from sessions_app.models import ChatSession, ResultFile
from sessions_app.services.results import owned_row
from toolhub.tools.files import MAX_FILE_BYTES, MAX_FILES, ToolFile, size_in_words


def result_files_store(
    *, session_id: Any, turn: str, call_id: str, files: Sequence[ToolFile]
) -> list[dict[str, Any]]:
    """Store ``files`` of one call's result; what the ``tool_result`` event keeps of each,
    in order: ``id``, ``name``, ``media_type`` and ``size``, or instead of ``id`` the
    ``refused`` reason of a file the chat does not keep."""
    entries: list[dict[str, Any]] = []
    with transaction.atomic():
        ChatSession.objects.select_for_update().filter(pk=session_id).exists()
        held = ResultFile.objects.filter(session_id=session_id).aggregate(
            count=Count("pk"), total=Sum("size")
        )
        count, total = held["count"], held["total"] or 0
        for number, file in enumerate(files):
            entry: dict[str, Any] = {
                "name": file.name,
                "media_type": file.media_type,
                "size": file.size,
            }
            refused = _refusal(file, count, total)
            if number >= MAX_FILES:
                # A code tool may build more than ``offer`` lets through: said, not dropped.
                refused = f"a result keeps at most {MAX_FILES} files"
            if refused:
                entry["refused"] = refused
            else:
                row = ResultFile.objects.create(
                    session_id=session_id,
                    turn=turn,
                    call_id=call_id[:200],
                    name=file.name,
                    media_type=file.media_type,
                    size=file.size,
                    data=file.data,
                )
                count, total = count + 1, total + file.size
                entry = {"id": str(row.pk), **entry}
            entries.append(entry)
    return entries


def _refusal(file: ToolFile, count: int, total: int) -> str:
    """Why the chat does not keep ``file``, or "" when it does."""
    most, budget = (
        settings.TOOLHUB_RESULT_FILES_PER_SESSION,
        settings.TOOLHUB_RESULT_FILES_MAX_BYTES,
    )
    if file.size > MAX_FILE_BYTES:
        # A tool may build a ToolFile without ``offer``: its cap holds here too.
        return f"it is larger than {size_in_words(MAX_FILE_BYTES)}, the most a file may be"
    if count >= most:
        return f"this chat already keeps the most files it may ({most})"
    if total + file.size > budget:
        return f"this chat's files would pass {size_in_words(budget)} in all, the most it keeps"
    return ""


def result_file_get(*, user: Any, session_id: Any, file_id: Any) -> ResultFile:
    """A file kept with one of ``user``'s chats (not binned); ``NotFound`` otherwise."""
    return owned_row(ResultFile, user=user, session_id=session_id, pk=file_id, what="file")
