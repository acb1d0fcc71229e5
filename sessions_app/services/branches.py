"""A chat's branches: the versions of its edited messages and regenerated answers, and the
person's switch between them (docs/architecture.md, "The event log").

- Read from the log only (``sessions_app.branches``); a switch appends one ``branch``
  event naming the leaf to show, and rewrites nothing.
- A switch happens only while no turn holds the chat. It takes the chat's row lock, as a
  turn's claim does, so a turn never begins on one branch while a switch stores another:
  whichever comes second sees the first.
- Whatever is asked that is not a version of that message stores nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from django.db import transaction
from django.utils import timezone

from sessions_app.branches import Tree
from sessions_app.eventlog import event_append, session_tree
from sessions_app.models import ChatSession
from sessions_app.transcript import session_transcript
from sessions_app.transcript_items import Message
from toolhub.lib.catalog_news import chat_events_stored
from toolhub.lib.errors import Conflict, Invalid, NotFound


class SwitchWhileRunning(Conflict):
    """The chat's turn is running: it stays on the branch it began on."""

    code = "turn_in_progress"


@dataclass(frozen=True, slots=True)
class Branch:
    """One message or answer with several versions, on the path the chat shows."""

    # The seq of the version shown (a message of the person, or an answer's first row).
    message: int
    kind: Literal["message", "answer"]
    # Every version's seq, in seq order (the page numbers them 1, 2, ...).
    versions: tuple[int, ...]
    shown: int

    def to_json(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "kind": self.kind,
            "versions": list(self.versions),
            "shown": self.shown,
        }


def branches_of(tree: Tree) -> list[Branch]:
    """The shown path's messages and answers that have other versions, in page order."""
    return [
        Branch(
            message=seq,
            kind="message" if tree.kinds[seq] == "user_message" else "answer",
            versions=versions.seqs,
            shown=versions.shown,
        )
        for seq, versions in tree.versions().items()
    ]


def session_branches(*, session: ChatSession) -> list[Branch]:
    return branches_of(session_tree(session_id=session.pk, last_seq=session.last_seq))


def session_branch_switch(*, session: ChatSession, message: int, version: int) -> list[Branch]:
    """Show ``version`` of the message or answer ``message`` (the seq of any of its
    versions) and, below it, its most recent leaf; the branches as they are then.

    ``NotFound`` once the chat is binned, ``SwitchWhileRunning`` while a turn holds it,
    ``Invalid`` when ``version`` is not a version of ``message``: nothing is stored then.
    Showing the version shown already stores nothing either."""
    with transaction.atomic():
        locked = (
            ChatSession.objects.select_for_update()
            .filter(pk=session.pk, deleted__isnull=True)
            .first()
        )
        if locked is None:
            raise NotFound("no such session")
        lease = locked.turn_lease
        if locked.turn_id and (lease is None or lease > timezone.now()):
            raise SwitchWhileRunning(
                "The assistant is still answering in this chat: wait for it, or press Stop, "
                "then switch versions."
            )
        tree = session_tree(session_id=locked.pk, last_seq=locked.last_seq)
        if version not in tree.group(message):
            raise Invalid(
                "That is not a version of that message.",
                fields={"version": ["not a version of that message"]},
            )
        if version not in tree.path():
            leaf = tree.leaf_under(version)
            event = event_append(session_id=locked.pk, turn="", kind="branch", data={"to": leaf})
            chat_events_stored(session_id=locked.pk, events=[event])
            tree.add(event.seq, "branch", event.data)
    return branches_of(tree)


def last_user_message(*, session_id: Any) -> tuple[int, str] | None:
    """The seq and text of the last message from the person on the branch the chat shows,
    or ``None``: what a regenerate asks again."""
    transcript = session_transcript(session_id=session_id)
    for key, item in reversed(transcript.items.items()):
        if isinstance(item, Message) and item.role == "user":
            return int(key[1:]), item.text
    return None
