"""``remember`` and ``recall``: the person's own notes, kept across sessions."""

from __future__ import annotations

from toolhub.tools.context import ToolContext, present
from toolhub.tools.decorator import function


def _has_notes(ctx: ToolContext) -> bool:
    return ctx.services.notes is not None and ctx.user_id is not None


@function(can_use=_has_notes, defer=True, label="Remember")
def remember(text: str, *, ctx: ToolContext) -> str:
    """Save a note for this person, to recall in later conversations.

    Args:
        text: What to remember, self-contained.
    """
    if not text.strip():
        raise ValueError("text must not be empty")
    notes = present(ctx.services.notes, "notes")
    note_id = notes.add(user_id=present(ctx.user_id, "a person"), text=text.strip())
    return f"remembered (note {note_id})"


@function(can_use=_has_notes, defer=True, label="Recall")
def recall(query: str, limit: int = 5, *, ctx: ToolContext) -> str:
    """Find this person's saved notes that match a query.

    Args:
        query: Words to look for.
        limit: Most notes to return.
    """
    store = present(ctx.services.notes, "notes")
    notes = store.search(user_id=present(ctx.user_id, "a person"), query=query, limit=limit)
    if not notes:
        return f"no notes match {query!r}"
    return "\n".join(f"- {note['text']} (note {note['id']})" for note in notes)
