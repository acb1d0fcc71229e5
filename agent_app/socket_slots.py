"""How many session sockets one person, and one chat, may hold open at once.

Each open socket holds a slot of its person and one of its chat: a cache key taken with
an atomic add (``SET NX`` on Redis, so every process counts against the same slots; the
local-memory cache in the embedded default, which is one process). A socket renews its
slots while it lives (``renew``, from the consumer's periodic rejoin) and frees them when
it closes. Slots of a process that died without closing expire after ``SLOT_SECONDS``, so
a crash locks nobody out for longer than that.

A socket over either limit is closed with 4429 after an ``error`` frame that says which
limit and what to do (README, "Limits").

The functions are sync, for the turns' database threads (``on_db_thread``): Django's cache
is per thread there, one client each for the process's life. Its async methods would hop
to the server's one sync thread and, called from a socket's own task, make that socket a
Redis client and connection of its own (the cache handler is per async context).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.cache import cache

# Three of the consumer's renewal rounds (``REJOIN_SECONDS``, 30 s): a socket that misses
# two (a busy loop) keeps its slots.
SLOT_SECONDS = 90


@dataclass
class Slots:
    """The slots one socket holds."""

    owner: str
    keys: list[str] = field(default_factory=list)

    def renew(self) -> None:
        for key in self.keys:
            # A slot Redis forgot (it keeps nothing across a restart) is taken again.
            if not cache.touch(key, SLOT_SECONDS):
                cache.add(key, self.owner, SLOT_SECONDS)

    def release(self) -> None:
        for key in self.keys:
            # Only ours: a slot that expired and was taken by another socket stays theirs.
            if cache.get(key) == self.owner:
                cache.delete(key)
        self.keys.clear()


class TooManySockets(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _take(prefix: str, limit: int, owner: str) -> str | None:
    for number in range(limit):
        key = f"{prefix}:{number}"
        if cache.add(key, owner, SLOT_SECONDS):
            return key
    return None


def socket_slots_take(*, user_id: Any, session_id: Any, owner: str) -> Slots:
    """A slot of the person and one of the chat for the socket ``owner`` (its channel
    name), or ``TooManySockets`` with nothing held."""
    slots = Slots(owner)
    # The chat's slot first: a rush on one chat then never holds the person's slots
    # while it is refused (which could refuse a socket of another chat meanwhile).
    chat = _take(f"sockets:chat:{session_id}", settings.TOOLHUB_SOCKETS_PER_CHAT, owner)
    if chat is None:
        places = _counted(settings.TOOLHUB_SOCKETS_PER_CHAT, "place")
        raise TooManySockets(
            f"This chat is open in {places} already; close it and reload this one."
            if settings.TOOLHUB_SOCKETS_PER_CHAT == 1
            else f"This chat is open in {places} already; close some and reload this one."
        )
    slots.keys.append(chat)
    person = _take(f"sockets:person:{user_id}", settings.TOOLHUB_SOCKETS_PER_PERSON, owner)
    if person is None:
        slots.release()
        connections = _counted(settings.TOOLHUB_SOCKETS_PER_PERSON, "chat connection")
        raise TooManySockets(
            f"You have {connections} open already (tabs or windows); close some and reload "
            "this one."
        )
    slots.keys.append(person)
    return slots


def _counted(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
