"""What ``toolhub.settings`` is computed with: the environment's strings read as values,
checked, and the backends a URL selects. Defines no setting itself.

Invariants: a value the environment sets but that does not parse (a boolean, a number, a
negative count, a key that is not a Fernet key) is an ``ImproperlyConfigured`` naming the
variable, raised as the settings are imported, so no process starts half-configured; an
unset or empty variable means the default.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dj_database_url
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

_MAKE_A_KEY = (
    "Make one with: python -c 'from cryptography.fernet import Fernet; "
    "print(Fernet.generate_key().decode())'"
)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), not {raw!r}")


def _env_number(name: str, default: float, kind: type) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value: float = kind(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a {kind.__name__}, not {raw!r}") from None
    if value < 0:
        raise ImproperlyConfigured(f"{name} must not be negative")
    return value


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    value = int(_env_number(name, default, int))
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}")
    return value


def env_float(name: str, default: float) -> float:
    return float(_env_number(name, default, float))


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def secrets_keys(*, debug: bool) -> tuple[str, ...]:
    """TOOLHUB_SECRETS_KEYS, each checked to be a Fernet key; required with DEBUG off."""
    keys = tuple(env_list("TOOLHUB_SECRETS_KEYS", ""))
    if not keys and not debug:
        raise ImproperlyConfigured(
            "TOOLHUB_SECRETS_KEYS must be set when DEBUG is off: the key that encrypts stored "
            f"secrets. {_MAKE_A_KEY}"
        )
    for number, key in enumerate(keys, start=1):
        try:
            Fernet(key.encode())
        except ValueError:
            raise ImproperlyConfigured(
                f"TOOLHUB_SECRETS_KEYS: key {number} is not a Fernet key (32 bytes in url-safe "
                f"base64). {_MAKE_A_KEY}"
            ) from None
    return keys


def database(
    url: str, *, var_dir: Path, pool_min: int, pool_max: int, pool_timeout: float
) -> dict[str, Any]:
    """The default database: ``url``, else a SQLite file in ``var_dir``; PostgreSQL's
    connections from a pool of ``pool_min`` to ``pool_max`` (0: no pool)."""
    config: dict[str, Any] = dict(
        dj_database_url.parse(
            url or f"sqlite:///{var_dir / 'toolhub.sqlite3'}",
            # Under ASGI every request may run on a different thread, so persistent
            # connections would pile up: a thread gives its connection back when Django
            # closes it (to the pool below, on PostgreSQL), and a borrowed one is checked.
            conn_max_age=0,
            conn_health_checks=True,
        )
    )
    if config["ENGINE"] == "django.db.backends.postgresql" and pool_max:
        from toolhub.dbpool import check_pooled

        config.setdefault("OPTIONS", {})["pool"] = {
            "min_size": min(pool_min, pool_max),
            "max_size": pool_max,
            "timeout": pool_timeout,
            # The first dead connection found sweeps the others (a restart kills them all).
            "check": check_pooled,
        }
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # WAL lets the chat's event writes and page reads proceed side by side.
        config["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        # Tests get a file too, as the product has: Django's default in-memory test database
        # is shared-cache, where a write beside a read fails at once ("table is locked")
        # instead of waiting, and turns write from several threads (their heartbeat).
        # One per test run, so two runs on one checkout do not share it.
        config["TEST"] = {"NAME": str(var_dir / f"test-{os.getpid()}.sqlite3")}
    return config


def redis_cache(url: str) -> dict[str, Any]:
    """Django's Redis cache at ``url``."""
    return {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": url,
        "KEY_PREFIX": "toolhub",
        "OPTIONS": {
            "socket_connect_timeout": 2,
            "socket_timeout": 5,
            # Never pickle: whatever can write to Redis must not run code here.
            "serializer": "toolhub.lib.redis_codecs.JsonCacheSerializer",
        },
    }


def redis_channel_layer(url: str) -> dict[str, Any]:
    """channels-redis at ``url``."""
    from redis.maint_notifications import MaintNotificationsConfig

    return {
        "BACKEND": "toolhub.lib.channel_layer.ToolhubChannelLayer",
        "CONFIG": {
            # channels-redis blocks in BZPOPMIN for 5 s per receive; redis-py's
            # default read timeout is also 5 s, so an idle socket would die with 1011.
            # redis-py's pool refuses a 101st connection outright: room for every
            # socket's group calls at once.
            # Maintenance notifications (a Redis Enterprise feature) off: while on, even
            # as "auto" against a Redis without them, redis-py's asyncio pool skips its
            # check of an idle connection, so after a Redis restart the first command on
            # each pooled connection failed (the first handshake closed with 1011).
            "hosts": [
                {
                    "address": url,
                    "socket_connect_timeout": 2,
                    "socket_timeout": 15,
                    "max_connections": 1000,
                    "maint_notifications_config": MaintNotificationsConfig(enabled=False),
                }
            ],
            "prefix": "toolhub:asgi",
            # All sockets of a process share one inbox; a busy process must not drop
            # live events at the default 100 (sockets also catch up from the log).
            "capacity": 2000,
            # msgpack that discards what does not decode (toolhub.lib.redis_codecs).
            "serializer_format": "toolhub-msgpack",
        },
    }
