"""The WebSocket stack: session authentication and the Origin check in front of consumers."""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings

from toolhub.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


# The Origin validator is built when toolhub.asgi is imported, from ALLOWED_HOSTS as
# configured (localhost), so the test's own origin is the local one.
SAME_ORIGIN = "http://localhost"


def _headers(*, origin: str, client=None) -> list[tuple[bytes, bytes]]:
    headers = [(b"origin", origin.encode()), (b"host", b"localhost")]
    if client is not None:
        session_key = client.cookies[settings.SESSION_COOKIE_NAME].value
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={session_key}".encode()))
    return headers


async def test_a_signed_in_user_connects_and_gets_a_pong(async_client, owner):
    await async_client.aforce_login(owner)
    communicator = WebsocketCommunicator(
        application, "/ws/ping/", headers=_headers(origin=SAME_ORIGIN, client=async_client)
    )

    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from() == {"type": "pong", "user": "owner"}
    await communicator.disconnect()


async def test_a_foreign_origin_is_refused_even_with_a_valid_session(async_client, owner):
    await async_client.aforce_login(owner)
    communicator = WebsocketCommunicator(
        application,
        "/ws/ping/",
        headers=_headers(origin="https://evil.example", client=async_client),
    )

    connected, _ = await communicator.connect()

    assert not connected


async def test_an_anonymous_socket_is_refused():
    communicator = WebsocketCommunicator(
        application, "/ws/ping/", headers=_headers(origin=SAME_ORIGIN)
    )

    connected, code = await communicator.connect()

    assert not connected
    assert code == 4401


async def test_a_malformed_frame_gets_an_error_and_the_socket_stays_open(async_client, owner):
    await async_client.aforce_login(owner)
    communicator = WebsocketCommunicator(
        application, "/ws/ping/", headers=_headers(origin=SAME_ORIGIN, client=async_client)
    )
    connected, _ = await communicator.connect()
    assert connected

    await communicator.send_to(text_data="{not json")
    assert (await communicator.receive_json_from())["code"] == "bad_json"
    await communicator.send_json_to({"type": "dance"})
    assert (await communicator.receive_json_from())["code"] == "unknown_type"
    await communicator.send_json_to({"type": "ping"})
    assert (await communicator.receive_json_from())["type"] == "pong"
    await communicator.disconnect()
