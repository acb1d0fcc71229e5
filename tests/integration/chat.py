"""Helpers for chat-turn tests: a token-authenticated socket and frame readers, and a turn
over REST followed to its end."""

from __future__ import annotations

import json
import time
from typing import Any

from channels.db import database_sync_to_async as sync_to_async
from channels.testing import WebsocketCommunicator

TERMINAL = ("turn_finished", "turn_failed")


@sync_to_async
def token_for(user: Any) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.get_or_create(user=user)[0].key


def token_socket(session_id: Any, key: str) -> WebsocketCommunicator:
    """A session socket that authenticates the way API clients do (not yet connected)."""
    from toolhub.asgi import application

    return WebsocketCommunicator(
        application,
        f"/ws/sessions/{session_id}/",
        headers=[(b"authorization", f"Token {key}".encode())],
    )


# A handshake reads the database and Redis: on a loaded two-core runner it can take more
# than the test client's default second, which would fail a test that is not about speed.
CONNECT_SECONDS = 10.0


async def open_socket(session_id: Any, user: Any) -> WebsocketCommunicator:
    socket = token_socket(session_id, await token_for(user))
    connected, _ = await socket.connect(timeout=CONNECT_SECONDS)
    assert connected
    return socket


async def send(socket: WebsocketCommunicator, frame: dict[str, Any]) -> None:
    await socket.send_to(text_data=json.dumps(frame))


async def receive(socket: WebsocketCommunicator, timeout: float = 10) -> dict[str, Any]:
    return json.loads(await socket.receive_from(timeout=timeout))


async def until(
    socket: WebsocketCommunicator, kinds: tuple[str, ...] = TERMINAL, timeout: float = 15
) -> list[dict[str, Any]]:
    """Every frame up to and including the first event of one of ``kinds``."""
    frames = []
    while True:
        frame = await receive(socket, timeout)
        frames.append(frame)
        if frame["type"] == "event" and frame["kind"] in kinds:
            return frames


def events(frames: list[dict[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] == "event" and (kind is None or f["kind"] == kind)]


def rest_events_until_done(client: Any, session_id: Any, *, after: int = 0) -> list[dict[str, Any]]:
    """The session's events after ``after``, read over REST until a turn's end is among
    them (20 seconds at most)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        events = client.get(f"/api/sessions/{session_id}/events/?after={after}").json()["events"]
        if any(event["kind"] in TERMINAL for event in events):
            return events
        time.sleep(0.05)
    raise AssertionError("the turn did not end")


def rest_turn(client: Any, session_id: Any, text: str = "hello") -> list[dict[str, Any]]:
    """Send ``text`` over REST and return the events of the turn it started."""
    seen = client.get(f"/api/sessions/{session_id}/events/?after=0").json()["events"]
    after = seen[-1]["seq"] if seen else 0
    started = client.post(f"/api/sessions/{session_id}/messages/", {"text": text}, format="json")
    assert started.status_code == 202, started.content
    return rest_events_until_done(client, session_id, after=after)
