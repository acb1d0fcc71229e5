"""A chat's title written by its model, once, after its first answer.

A new chat is titled from its first message (``toolhub.lib.titles.title_from``). With a
real provider (never the offline demo) and ``TOOLHUB_AUTO_TITLES`` on, the turn that gave
the first answer then asks the same model for a short title, after the session is
released, so nothing waits for it. The title is kept only if the chat still has the
automatic one (a rename by the person wins), and stored as a ``title`` event, so every
open page shows it. Any failure keeps the automatic title: this is a nicety, never an
error a person sees.
"""

from __future__ import annotations

import asyncio
import logging
from uuid import UUID

from agent_app.delivery import notify_events
from agent_app.providers import Provider, ProviderRequest, collect_text
from agent_app.turns.loop import on_db_thread
from sessions_app.services import session_title_from_model

logger = logging.getLogger(__name__)

PROMPT = (
    "Write a title for this conversation: at most six words, in the language of the "
    "question, no quotes and no final period. Answer with the title only."
)
TITLE_SECONDS = 20.0
SHOWN_CHARS = 2_000


async def name_chat(
    *, provider: Provider, model: str, session_id: UUID, turn: str, question: str, answer: str
) -> None:
    request = ProviderRequest(
        model=model,
        system=PROMPT,
        catalog="",
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": f"Question:\n{question[:SHOWN_CHARS]}\n\n"
                        f"Answer:\n{answer[:SHOWN_CHARS]}",
                    }
                ],
            }
        ],
        tools_json="[]",
        max_tokens=40,
    )
    try:
        written = await asyncio.wait_for(collect_text(provider, request), TITLE_SECONDS)
        events = await on_db_thread(
            session_title_from_model,
            session_id=session_id,
            turn=turn,
            question=question,
            title=written,
        )
        await notify_events(session_id, events)
    except Exception as exc:
        logger.info("chat %s keeps its first message as title (%s)", session_id, exc)
