"""What a chat's calls returned, read back: one call's result, a full result kept before it
was cut for the model, and the inspector's recent calls. Only the chat's owner reads them
(another person's, or a binned chat's, is "no such result")."""

from __future__ import annotations

from typing import Any

from django.db import models

from sessions_app.models import ChatSession, FullResult, ProviderCall
from toolhub.lib.errors import NotFound


def call_result_get(*, session: ChatSession, call_seq: int) -> dict[str, Any]:
    """The stored ``tool_result`` of the ``tool_call`` at ``call_seq`` in ``session``:
    the first result with its call id after it (providers reuse call ids across steps,
    so the id alone does not name one call); ``NotFound`` otherwise."""
    call = (
        session.events.filter(kind="tool_call", seq=call_seq).values_list("data", flat=True).first()
    )
    if not isinstance(call, dict):
        raise NotFound("no such call")
    data = (
        session.events.filter(kind="tool_result", seq__gt=call_seq, data__call_id=call["call_id"])
        .order_by("seq")
        .values_list("data", flat=True)
        .first()
    )
    if not isinstance(data, dict):
        raise NotFound("that call has no result yet")
    return {"name": str(data.get("name", "")), "content": str(data.get("content", ""))}


def owned_row[Row: models.Model](
    model: type[Row], *, user: Any, session_id: Any, pk: Any, what: str
) -> Row:
    """The ``model`` row ``pk`` kept with ``session_id``, one of ``user``'s chats that is
    not binned; ``NotFound`` ("no such ``what``") for anything else: another person's, one
    of another chat, a made-up id."""
    found = model._default_manager.filter(
        pk=pk, session_id=session_id, session__owner=user, session__deleted__isnull=True
    ).first()
    if found is None:
        raise NotFound(f"no such {what}")
    return found


def full_result_get(*, user: Any, session_id: Any, result_id: Any) -> FullResult:
    """A stored full result of one of ``user``'s sessions; ``NotFound`` otherwise."""
    return owned_row(FullResult, user=user, session_id=session_id, pk=result_id, what="result")


INSPECTOR_CALLS = 5


def session_recent_calls(*, session: ChatSession) -> list[dict[str, Any]]:
    """The last provider calls of a session, newest first, with the calibration ratio
    (input tokens the provider counted over our own estimate of the same request)."""
    calls = ProviderCall.objects.filter(session=session).order_by("-created", "-id")[
        :INSPECTOR_CALLS
    ]
    return [
        {
            "created": call.created,
            "model": call.model,
            "input": call.input_tokens,
            # No usage from the provider: toolhub's own count of the request.
            "estimated": call.usage_estimated,
            "cache_read": call.cache_read_input_tokens,
            "cache_write": call.cache_creation_input_tokens,
            "ratio": (
                round(call.input_tokens / call.estimated_input_tokens, 2)
                if call.estimated_input_tokens and not call.usage_estimated
                else None
            ),
        }
        for call in calls
    ]
