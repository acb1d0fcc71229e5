"""What the database benches share: a PostgreSQL database of their own, and Django set up
on it in production shape (DEBUG off), optionally with Redis for cache and channels."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

# The benches run in production shape (DEBUG off), where stored secrets need a key: this
# fixed one is a bench's own (its databases are made and dropped by the bench).
BENCH_SECRETS_KEY = "YmVuY2gtc2VjcmV0cy1rZXktb2YtMzItYnl0ZXMhISE="


def ensure_database(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = url.replace(parts.path, "/postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(url: str) -> None:
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    admin = url.replace(parts.path, "/postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        conn.execute(drop.format(sql.Identifier(parts.path.lstrip("/"))))


def recreate_database(url: str) -> None:
    """A fresh database: a run never inherits the rows or seqs of an earlier one."""
    drop_database(url)
    ensure_database(url)


def flush_redis(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


def django_setup(database_url: str, *, redis_url: str | None = None) -> None:
    ensure_database(database_url)
    os.environ.update(
        DATABASE_URL=database_url,
        DEBUG="0",
        SECRET_KEY="bench-" + "x" * 60,
        TOOLHUB_SECRETS_KEYS=BENCH_SECRETS_KEY,
        ALLOWED_HOSTS="localhost",
        DJANGO_SETTINGS_MODULE="toolhub.settings",
    )
    if redis_url:
        os.environ["REDIS_URL"] = redis_url
    else:
        os.environ.pop("REDIS_URL", None)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
