"""/healthz names every part and its state: 200 when all are reachable, 503 otherwise."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import app_env, closed_port_url

ALL_PARTS = {"database", "cache", "channel_layer", "broker"}


@pytest.mark.django_db
def test_healthz_is_ok_for_the_configured_backends_and_needs_no_login(client):
    response = client.get("/healthz")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["failing"] == []
    assert set(body["checks"]) == ALL_PARTS
    assert all(part["ok"] for part in body["checks"].values())
    assert response["Cache-Control"].startswith("max-age=0")


@pytest.mark.processes
def test_healthz_on_real_postgres_and_redis_reports_each_backend(
    serve, postgres_url, redis_url, tmp_path
):
    with serve(app_env(tmp_path, DATABASE_URL=postgres_url, REDIS_URL=redis_url)) as base:
        response = httpx.get(f"{base}/healthz", timeout=15)

    assert response.status_code == 200, response.text
    checks = response.json()["checks"]
    assert checks["database"]["detail"] == "postgresql"
    assert checks["cache"]["detail"] == "RedisCache"
    assert checks["channel_layer"]["detail"] == "RedisChannelLayer"
    assert checks["broker"]["detail"] == "redis"


@pytest.mark.processes
def test_healthz_is_503_naming_cache_channel_layer_and_broker_when_redis_is_unreachable(
    serve, tmp_path
):
    env = app_env(
        tmp_path,
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        REDIS_URL=closed_port_url("redis"),
    )
    with serve(env) as base:
        response = httpx.get(f"{base}/healthz", timeout=15)

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["failing"] == ["cache", "channel_layer", "broker"]
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["cache"]["detail"]


@pytest.mark.processes
def test_healthz_is_503_naming_the_database_when_postgres_is_unreachable_and_leaks_no_credentials(
    serve, tmp_path
):
    url = closed_port_url("postgres").replace("127.0.0.1", "secretuser:hunter2@127.0.0.1")
    with serve(app_env(tmp_path, DATABASE_URL=url)) as base:
        response = httpx.get(f"{base}/healthz", timeout=15)

    assert response.status_code == 503
    assert response.json()["failing"] == ["database"]
    assert "hunter2" not in response.text
    assert "secretuser" not in response.text
