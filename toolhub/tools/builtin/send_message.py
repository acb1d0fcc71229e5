"""``send_message``: post a message to another session of the same person."""

from __future__ import annotations

from toolhub.tools.context import ToolContext, present
from toolhub.tools.decorator import function


def _can_send(ctx: ToolContext) -> bool:
    return ctx.services.messenger is not None and ctx.user_id is not None


@function(can_use=_can_send, unsafe_in=("plan",), defer=True, label="Send message")
def send_message(session_id: str, text: str, *, ctx: ToolContext) -> str:
    """Send a message to another of the person's chat sessions.

    Args:
        session_id: The id of the session to write to.
        text: The message.
    """
    if session_id == ctx.session_id:
        raise ValueError("that is this session; answer here instead")
    try:
        ref = present(ctx.services.messenger, "the messenger").send(
            user_id=present(ctx.user_id, "a person"),
            from_session=ctx.session_id,
            to_session=session_id,
            text=text,
        )
    except LookupError:
        # The same answer for a missing session and someone else's: nothing leaks.
        raise LookupError(f"no session {session_id} of yours") from None
    return f"sent to session {session_id} ({ref})"
