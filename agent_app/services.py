"""The notes the remember/recall tools keep, one person at a time (the ``NotesAdapter``
of the runtime's ``ToolServices``)."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from agent_app.models import Note


class NotesAdapter:
    """remember / recall: a person's notes, searched by words (case-insensitive)."""

    def add(self, *, user_id: str, text: str) -> str:
        return str(Note.objects.create(owner_id=int(user_id), text=text[:4_000]).pk)

    def search(self, *, user_id: str, query: str, limit: int) -> list[dict[str, Any]]:
        words = [word for word in query.split() if word][:10]
        notes = Note.objects.filter(owner_id=int(user_id))
        if words:
            match = Q()
            for word in words:
                match |= Q(text__icontains=word)
            notes = notes.filter(match)
        return [{"id": str(note.pk), "text": note.text} for note in notes[: max(1, limit)]]
