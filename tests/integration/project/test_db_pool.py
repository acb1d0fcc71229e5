"""PostgreSQL connections come from a pool per process: requests on many threads borrow a
few connections instead of connecting each time, and connections the server dropped are
replaced without a request failing."""

from __future__ import annotations

import asyncio
import os

import psycopg
import pytest
from django.conf import settings
from django.db import connection

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]

IN_FLIGHT = 4


@pytest.fixture
def pool():
    if connection.vendor != "postgresql":
        if os.environ.get("TOOLHUB_REQUIRE_SERVICES") == "1":
            pytest.fail("DATABASE_URL must name PostgreSQL")
        pytest.skip("the pool is PostgreSQL's")
    connection.ensure_connection()
    return connection.pool


@pytest.fixture
def token(owner):
    from rest_framework.authtoken.models import Token

    return Token.objects.create(user=owner).key


def _get_many(token: str, count: int) -> list[int]:
    """``count`` API requests through the ASGI app, ``IN_FLIGHT`` at a time: each request
    runs on a thread of its own, as under daphne."""
    import httpx

    from toolhub.asgi import application

    async def drive() -> list[int]:
        transport = httpx.ASGITransport(app=application)
        headers = {"Authorization": f"Token {token}"}
        statuses: list[int] = []
        async with httpx.AsyncClient(transport=transport, base_url="https://localhost") as client:
            queue = list(range(count))

            async def worker() -> None:
                while queue:
                    queue.pop()
                    statuses.append(
                        (await client.get("/api/profiles/", headers=headers)).status_code
                    )

            await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        return statuses

    return asyncio.run(drive())


def test_requests_on_many_threads_borrow_a_few_pooled_connections(pool, token):
    assert pool.max_size == settings.TOOLHUB_DB_POOL_MAX
    before = pool.get_stats()

    statuses = _get_many(token, 40)

    after = pool.get_stats()
    assert statuses == [200] * 40
    assert after["requests_num"] - before.get("requests_num", 0) >= 40
    # Connecting per request would make 40; the pool makes at most one per request in
    # flight, beyond the ones it keeps.
    assert after.get("connections_num", 0) - before.get("connections_num", 0) <= IN_FLIGHT + 2


def test_connections_the_server_dropped_are_replaced_and_no_request_fails(pool, token):
    assert _get_many(token, 8) == [200] * 8
    connection.close()  # the test's own goes back to the pool too
    name = settings.DATABASES["default"]["NAME"]
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as admin:
        dropped = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchone()[0]
    assert dropped >= 1

    assert _get_many(token, 20) == [200] * 20
