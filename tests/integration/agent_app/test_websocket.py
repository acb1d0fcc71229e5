"""The session socket's handshake: cookie or token authentication, the Origin check for
cookies, and ownership, all decided before any frame."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from channels.db import database_sync_to_async as sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings

from tests.integration.chat import CONNECT_SECONDS, receive, send, token_for, token_socket
from toolhub.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

# The Origin validator reads ALLOWED_HOSTS as configured (localhost).
SAME_ORIGIN = "http://localhost"


@sync_to_async
def _session_of(user):
    from sessions_app.services import session_create

    return session_create(user=user)


def _cookie_headers(*, origin: str | None, client=None) -> list[tuple[bytes, bytes]]:
    headers = [(b"host", b"localhost")]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if client is not None:
        session_key = client.cookies[settings.SESSION_COOKIE_NAME].value
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={session_key}".encode()))
    return headers


async def _close_code(communicator: WebsocketCommunicator) -> int | None:
    connected, code = await communicator.connect(timeout=CONNECT_SECONDS)
    if not connected:
        return code
    output = await communicator.receive_output(timeout=5)
    assert output["type"] == "websocket.close"
    return output["code"]


async def test_a_signed_in_browser_connects_to_its_own_session(async_client, owner):
    session = await _session_of(owner)
    await async_client.aforce_login(owner)
    socket = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/",
        headers=_cookie_headers(origin=SAME_ORIGIN, client=async_client),
    )
    connected, _ = await socket.connect(timeout=CONNECT_SECONDS)
    assert connected

    await send(socket, {"type": "cancel"})
    assert (await receive(socket))["code"] == "no_turn"
    await socket.disconnect()


async def test_a_foreign_origin_is_refused_even_with_a_valid_cookie(async_client, owner):
    session = await _session_of(owner)
    await async_client.aforce_login(owner)
    socket = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/",
        headers=_cookie_headers(origin="https://evil.example", client=async_client),
    )

    connected, _ = await socket.connect(timeout=CONNECT_SECONDS)

    assert not connected


async def test_an_anonymous_socket_is_closed_as_not_authenticated(owner):
    session = await _session_of(owner)
    socket = WebsocketCommunicator(
        application, f"/ws/sessions/{session.pk}/", headers=_cookie_headers(origin=SAME_ORIGIN)
    )

    assert await _close_code(socket) == 4401


async def test_another_users_session_and_a_missing_one_are_refused_alike(owner, other_user):
    theirs = await _session_of(other_user)
    key = await token_for(owner)
    codes = []
    for session_id in (theirs.pk, uuid.uuid4()):
        socket = token_socket(session_id, key)
        codes.append(await _close_code(socket))

    assert codes == [4404, 4404]


async def test_an_api_client_authenticates_with_a_token_header_and_no_origin(owner):
    session = await _session_of(owner)
    key = await token_for(owner)
    socket = token_socket(session.pk, key)
    connected, _ = await socket.connect(timeout=CONNECT_SECONDS)
    assert connected

    await send(socket, {"type": "approve", "call_id": "nope", "allow": True})
    assert (await receive(socket))["code"] == "unknown_call"
    await socket.disconnect()


async def test_a_wrong_token_or_a_token_in_the_url_does_not_authenticate(owner):
    session = await _session_of(owner)
    key = await token_for(owner)
    wrong = token_socket(session.pk, "not-a-real-key")
    in_url = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/?token={key}",
        headers=_cookie_headers(origin=SAME_ORIGIN),
    )

    assert await _close_code(wrong) == 4401
    assert await _close_code(in_url) == 4401


async def _opened(session, key) -> tuple[WebsocketCommunicator, int | None, dict | None]:
    """A socket, and how it ended if it was refused: its close code and error frame."""
    socket = token_socket(session.pk, key)
    connected, code = await socket.connect(timeout=CONNECT_SECONDS)
    assert connected, code
    # A socket that was let in answers this with unknown_type; a refused one said why
    # before anything was sent, and closed.
    await send(socket, {"type": "dance"})
    said = await socket.receive_json_from(timeout=5)
    if said["code"] == "unknown_type":
        return socket, None, None
    closed = await socket.receive_output(timeout=5)
    return socket, closed["code"], said


async def test_sockets_beyond_a_chats_and_a_persons_limit_are_refused_saying_which(owner, settings):
    settings.TOOLHUB_SOCKETS_PER_CHAT = 3
    settings.TOOLHUB_SOCKETS_PER_PERSON = 4
    key = await token_for(owner)
    chat, other = await _session_of(owner), await _session_of(owner)

    # Opened all at once: exactly the chat's limit get in, whatever the interleaving.
    rush = await asyncio.gather(*(_opened(chat, key) for _ in range(6)))
    kept = [socket for socket, code, _ in rush if code is None]
    refused = [(code, said) for _, code, said in rush if code is not None]
    elsewhere, person_ok, _ = await _opened(other, key)
    _, person_code, person_said = await _opened(other, key)
    await kept[0].disconnect()
    again, again_code, _ = await _opened(chat, key)

    assert len(kept) == 3
    assert {code for code, _ in refused} == {4429}
    assert {said["code"] for _, said in refused} == {"too_many_sockets"}
    assert "This chat is open in 3 places already" in refused[0][1]["message"]
    assert person_ok is None
    assert person_code == 4429
    assert "You have 4 chat connections open already" in person_said["message"]
    # A closed socket frees its place at once.
    assert again_code is None
    for socket in [*kept[1:], elsewhere, again]:
        await socket.disconnect()


async def test_sockets_opened_together_rejoin_at_different_moments_within_the_interval(
    owner, monkeypatch
):
    # Rejoining together, hundreds of sockets' group adds and slot renewals at once held
    # the turns' database threads and the loop for a few hundred ms every interval.
    from agent_app import consumers

    monkeypatch.setattr(consumers, "REJOIN_SECONDS", 1.0)
    calls: dict[int, list[float]] = {}
    join = consumers.SessionConsumer._join

    async def recorded(self):
        calls.setdefault(id(self), []).append(time.monotonic())
        await join(self)

    monkeypatch.setattr(consumers.SessionConsumer, "_join", recorded)
    key, session = await token_for(owner), await _session_of(owner)
    sockets = [token_socket(session.pk, key) for _ in range(6)]
    for socket in sockets:
        assert (await socket.connect(timeout=CONNECT_SECONDS))[0]
    deadline = time.monotonic() + 10
    while sum(len(times) >= 2 for times in calls.values()) < 6 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    for socket in sockets:
        await socket.disconnect()

    rejoins = [times[1] - times[0] for times in calls.values()]
    assert len(rejoins) == 6
    # Each within the interval (its second half), and not all at the same point of it.
    # Each socket's delay is counted from its own join, so how far apart the sockets
    # connected does not count; a fixed interval spreads them by the loop's jitter alone
    # (about 0.01 s); six random points of a 0.5 s half lie within 0.05 s of each other
    # about once in 18,000 runs.
    assert all(0.5 - 0.01 <= after <= 1.0 + 1.0 for after in rejoins)
    assert max(rejoins) - min(rejoins) > 0.05
