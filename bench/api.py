"""Requests per second through the ASGI app on PostgreSQL, and queries per request.

Creates (or reuses) the database ``toolhub_bench`` on the PostgreSQL at BENCH_DATABASE_URL
(default postgres://postgres@127.0.0.1:5432/toolhub_bench), migrates it, makes a user with
50 profiles and a session, then drives ``toolhub.asgi.application`` in-process with the
ASGI messages daphne would hand it (8 requests in flight; no HTTP client in the process,
whose time is not the product's) for:
- GET /api/profiles/ (default, presets, 50 own profiles);
- beside it, the yardstick: a bare DRF endpoint (DRF's TokenAuthentication, IsAuthenticated)
  running the profiles list's query and answering its rows as dicts (``bench/_bare_api.py``,
  mounted for this process only), in turns with the profiles list (three rounds each, the
  median printed); ``profiles_vs_bare`` is the profiles list's time per request over the
  bare endpoint's (the issue's bound: 1.5);
- GET /api/sessions/<uuid>/toolset/ (resolution, token counts and hidden reasons).
Prints requests per second, p50 latency and the query count of one request once warm (the
process's caches filled), and the floor the issue measures it against, from the same run: a
``SELECT 1`` round trip on a kept connection, and the rendering the profiles list must do
(its 50+ profiles built and encoded as JSON, no query). ``x_select1`` is (time per request -
rendering) / SELECT 1.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _django import django_setup  # noqa: E402

DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolhub_bench"
)
REQUESTS = 400
IN_FLIGHT = 8
# Rounds of the profiles list and the bare endpoint, in turn (each prints its median).
ROUNDS = 3


def _setup() -> tuple[str, str]:
    django_setup(DATABASE_URL)
    from django.conf import settings

    # The product's URLs with the bare endpoint in front, for this process only.
    settings.ROOT_URLCONF = "_bare_api"
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from profiles_app import services as profiles
    from profiles_app.models import ToolProfile
    from sessions_app import services as sessions

    user, _ = get_user_model().objects.get_or_create(username="bench")
    ToolProfile.objects.filter(owner=user).delete()
    for index in range(50):
        profiles.profile_create(user=user, name=f"Profile {index:02d}", tools=["bash"])
    session = sessions.session_create(user=user, intent={"disabled": ["grep"]})
    token, _ = Token.objects.get_or_create(user=user)
    return token.key, str(session.pk)


def _per_call_ms(fn: Any, calls: int = 300) -> float:
    for _ in range(20):
        fn()
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls * 1000


def _select1_ms() -> float:
    """The median of five runs: one round trip is short enough for a pause to double it."""
    from django.db import connection

    with connection.cursor() as cursor:
        return statistics.median(
            _per_call_ms(lambda: (cursor.execute("SELECT 1"), cursor.fetchone()), calls=200)
            for _ in range(5)
        )


def _render_ms(views: list[Any]) -> float:
    """The profiles list's rendering: each profile's JSON object, then the body's bytes."""
    from rest_framework.renderers import JSONRenderer

    from profiles_app.api.profiles import profile_json

    renderer = JSONRenderer()
    return _per_call_ms(lambda: renderer.render([profile_json(view) for view in views]))


def _queries(path: str, token: str) -> int:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_AUTHORIZATION=f"Token {token}", HTTP_HOST="localhost")
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path, secure=True)
    assert response.status_code == 200, response.content
    return len(captured)


async def _drive(path: str, token: str) -> tuple[float, float]:
    """GETs through the ASGI application as daphne hands them over once it has parsed the
    HTTP request (no HTTP client in this process: its time is not the product's)."""
    from tests.conftest import asgi_get
    from toolhub.asgi import application

    headers = [(b"authorization", f"Token {token}".encode())]

    async def get() -> int:
        status, _ = await asgi_get(application, path, headers)
        return status

    latencies: list[float] = []
    for _ in range(20):
        assert await get() == 200
    queue = list(range(REQUESTS))

    async def worker() -> None:
        while queue:
            queue.pop()
            started = time.perf_counter()
            status = await get()
            latencies.append(time.perf_counter() - started)
            assert status == 200, status

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    elapsed = time.perf_counter() - started
    return REQUESTS / elapsed, statistics.median(latencies) * 1000


def main() -> None:
    token, session_id = _setup()
    from django.contrib.auth import get_user_model

    from profiles_app.services import profiles_for_user

    select1 = _select1_ms()
    render = _render_ms(profiles_for_user(user=get_user_model().objects.get(username="bench")))
    print(
        f"api-bench floor    SELECT 1 round trip={select1:.3f}ms profiles rendering={render:.3f}ms"
    )
    from _bare_api import BARE_PATH

    paths = {
        "profiles": "/api/profiles/",
        "bare": BARE_PATH,
        "toolset": f"/api/sessions/{session_id}/toolset/",
    }
    runs: dict[str, list[tuple[float, float]]] = {label: [] for label in paths}
    # The profiles list and its yardstick take turns, so a drift of the machine's speed
    # moves both alike; each prints its median round.
    for _ in range(ROUNDS):
        for label in ("profiles", "bare"):
            runs[label].append(asyncio.run(_drive(paths[label], token)))
    runs["toolset"].append(asyncio.run(_drive(paths["toolset"], token)))
    per_request: dict[str, float] = {}
    for label, path in paths.items():
        queries = _queries(path, token)
        rps, p50 = statistics.median(runs[label])
        # Served one at a time per process (the GIL): a request's own cost is 1/rps.
        per_request[label] = 1000 / rps
        if label == "profiles":
            floor = f" x_select1={(per_request[label] - render) / select1:.1f}"
        elif label == "bare":
            floor = f" profiles_vs_bare={per_request['profiles'] / per_request['bare']:.2f}x"
        else:
            floor = ""
        print(
            f"api-bench {label:<8} GET {path} rps={rps:.0f} p50={p50:.1f}ms "
            f"per_request={per_request[label]:.2f}ms in_flight={IN_FLIGHT} queries={queries}{floor}"
        )


if __name__ == "__main__":
    main()
