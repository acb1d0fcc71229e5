"""HTTP through the ASGI handler (toolhub.lib.asgi_handler): a request's sync work runs on
one thread, kept for the next request, and every response (bytes or a streamed file) ends
its request on the thread that began it, so its database connection goes back."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from django.conf import settings
from django.core import signals
from django.utils.module_loading import import_string

from tests.conftest import asgi_get
from toolhub.lib.asgi_handler import OneHopASGIHandler

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def threads_of_requests():
    """(thread that began, thread that finished) per request, in order."""
    began: list[int] = []
    finished: list[int] = []

    def on_start(**kwargs: Any) -> None:
        began.append(threading.get_ident())

    def on_finish(**kwargs: Any) -> None:
        finished.append(threading.get_ident())

    signals.request_started.connect(on_start, weak=False)
    signals.request_finished.connect(on_finish, weak=False)
    yield began, finished
    signals.request_started.disconnect(on_start)
    signals.request_finished.disconnect(on_finish)


@pytest.fixture
def token(owner):
    from rest_framework.authtoken.models import Token

    return Token.objects.create(user=owner).key


def test_requests_one_after_another_run_on_one_kept_thread(token, threads_of_requests):
    app = OneHopASGIHandler()
    headers = [(b"authorization", f"Token {token}".encode())]

    async def twenty() -> list[int]:
        return [(await asgi_get(app, "/api/profiles/", headers))[0] for _ in range(20)]

    assert asyncio.run(twenty()) == [200] * 20
    began, finished = threads_of_requests
    assert began == finished
    assert len(set(began)) == 1
    assert threading.get_ident() not in began


def test_requests_in_flight_together_each_keep_to_a_thread_of_their_own(token, threads_of_requests):
    app = OneHopASGIHandler()
    headers = [(b"authorization", f"Token {token}".encode())]

    async def together() -> list[int]:
        batch = [asgi_get(app, "/api/profiles/", headers) for _ in range(6)]
        return [status for status, _ in await asyncio.gather(*batch)]

    assert asyncio.run(together()) == [200] * 6
    began, finished = threads_of_requests
    assert sorted(began) == sorted(finished)
    assert 1 <= len(set(began)) <= 6


def test_a_static_file_is_streamed_and_its_request_ends_on_its_thread(
    tmp_path, settings, threads_of_requests
):
    (tmp_path / "hello.txt").write_bytes(b"static bytes " * 1000)
    settings.STATIC_ROOT = tmp_path
    app = OneHopASGIHandler()  # WhiteNoise lists STATIC_ROOT as it starts

    status, body = asyncio.run(asgi_get(app, "/static/hello.txt", []))

    assert (status, body) == (200, b"static bytes " * 1000)
    began, finished = threads_of_requests
    assert began == finished
    assert len(began) == 1


def test_an_unknown_path_is_a_404_page():
    status, body = asyncio.run(asgi_get(OneHopASGIHandler(), "/no/such/page/", []))
    assert status == 404
    assert b"<html" in body.lower()


def test_no_middleware_would_send_a_request_back_to_the_loop():
    # An async-only middleware would be wrapped in async_to_sync: a crossing per request.
    for path in settings.MIDDLEWARE:
        assert getattr(import_string(path), "sync_capable", True), path
