"""Requests per second through the ASGI app on PostgreSQL, and queries per request.

Creates (or reuses) the database ``toolhub_bench`` on the PostgreSQL at BENCH_DATABASE_URL
(default postgres://postgres@127.0.0.1:5432/toolhub_bench), migrates it, makes a user with
50 profiles and a session, then drives ``toolhub.asgi.application`` in-process with httpx
(8 requests in flight) for:
- GET /api/profiles/ (default, presets, 50 own profiles);
- GET /api/sessions/<uuid>/toolset/ (resolution, token counts and hidden reasons).
Prints requests per second, p50 latency and the query count of one request.
"""

from __future__ import annotations

import asyncio
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _django import django_setup  # noqa: E402

DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolhub_bench"
)
REQUESTS = 400
IN_FLIGHT = 8


def _setup() -> tuple[str, str]:
    django_setup(DATABASE_URL)
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
    import httpx

    from toolhub.asgi import application

    transport = httpx.ASGITransport(app=application)
    headers = {"Authorization": f"Token {token}"}
    latencies: list[float] = []
    async with httpx.AsyncClient(transport=transport, base_url="https://localhost") as client:
        for _ in range(20):
            (await client.get(path, headers=headers)).raise_for_status()
        queue = list(range(REQUESTS))

        async def worker() -> None:
            while queue:
                queue.pop()
                started = time.perf_counter()
                response = await client.get(path, headers=headers)
                latencies.append(time.perf_counter() - started)
                response.raise_for_status()

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        elapsed = time.perf_counter() - started
    return REQUESTS / elapsed, statistics.median(latencies) * 1000


def main() -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    token, session_id = _setup()
    for label, path in (
        ("profiles", "/api/profiles/"),
        ("toolset", f"/api/sessions/{session_id}/toolset/"),
    ):
        queries = _queries(path, token)
        rps, p50 = asyncio.run(_drive(path, token))
        print(
            f"api-bench {label:<8} GET {path} rps={rps:.0f} p50={p50:.1f}ms "
            f"in_flight={IN_FLIGHT} queries={queries}"
        )


if __name__ == "__main__":
    main()
