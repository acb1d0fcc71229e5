"""The one settings file picks its backends from the environment, and passes --deploy."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, app_env, manage

# Each test starts Django in a process of its own, with the environment it checks.
pytestmark = pytest.mark.processes

# A Fernet key made for these tests (Fernet.generate_key()).
SECRETS_KEY = "x6jX7tO8c3Jb0l9b6u2pXm5lQe4Vb1sZr8yK2wN0qHc="

_PROBE = """
import json, django
django.setup()
from django.conf import settings
print(json.dumps({
    "database": settings.DATABASES["default"]["ENGINE"],
    "database_name": str(settings.DATABASES["default"]["NAME"]),
    "cache": settings.CACHES["default"]["BACKEND"],
    "channel_layer": settings.CHANNEL_LAYERS["default"]["BACKEND"],
    "broker": settings.CELERY_BROKER_URL,
    "eager": settings.CELERY_TASK_ALWAYS_EAGER,
    "pool": {
        key: getattr(value, "__qualname__", value)
        for key, value in (settings.DATABASES["default"].get("OPTIONS", {}).get("pool") or {})
        .items()
    } or None,
}))
"""


def _configured(var_dir, **env: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=ROOT,
        env=app_env(var_dir, DJANGO_SETTINGS_MODULE="toolhub.settings", **env),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(result.stdout)


def test_without_urls_the_embedded_default_uses_sqlite_memory_layers_and_inline_tasks(tmp_path):
    config = _configured(tmp_path)

    assert config["database"] == "django.db.backends.sqlite3"
    assert config["database_name"] == str(tmp_path / "toolhub.sqlite3")
    assert config["cache"] == "django.core.cache.backends.locmem.LocMemCache"
    assert config["channel_layer"] == "channels.layers.InMemoryChannelLayer"
    assert config["eager"] is True
    assert config["pool"] is None


def test_with_urls_postgres_redis_cache_redis_channels_and_redis_broker_are_used(tmp_path):
    config = _configured(
        tmp_path,
        DATABASE_URL="postgres://u:p@db.internal:5432/toolhub",
        REDIS_URL="redis://cache.internal:6379/2",
    )

    assert config["database"] == "django.db.backends.postgresql"
    assert config["database_name"] == "toolhub"
    assert config["cache"] == "django.core.cache.backends.redis.RedisCache"
    assert config["channel_layer"] == "toolhub.lib.channel_layer.ToolhubChannelLayer"
    assert config["broker"] == "redis://cache.internal:6379/2"
    assert config["eager"] is False
    assert config["pool"] == {
        "min_size": 2,
        "max_size": 40,
        "timeout": 5.0,
        "check": "check_pooled",
    }


def test_the_database_pool_is_sized_from_the_settings_and_zero_connects_per_request(tmp_path):
    url = "postgres://u:p@db.internal:5432/toolhub"
    sized = _configured(
        tmp_path, DATABASE_URL=url, TOOLHUB_DB_POOL_MIN="8", TOOLHUB_DB_POOL_MAX="4"
    )
    off = _configured(tmp_path, DATABASE_URL=url, TOOLHUB_DB_POOL_MAX="0")

    # A minimum above the maximum is held to it.
    assert sized["pool"] == {"min_size": 4, "max_size": 4, "timeout": 5.0, "check": "check_pooled"}
    assert off["pool"] is None


def test_production_configuration_passes_check_deploy_without_warnings(tmp_path):
    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        env=app_env(
            tmp_path,
            DEBUG="0",
            SECRET_KEY="k3y-" + "s9Vd0qLr7TzX2mWc8HbN4yPj6FgA1eKu5iOt3RwQ" * 2,
            TOOLHUB_SECRETS_KEYS=SECRETS_KEY,
            ALLOWED_HOSTS="toolhub.example.com",
        ),
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_production_without_a_usable_secrets_key_refuses_to_start_and_says_how_to_make_one(
    tmp_path,
):
    said = {}
    for keys in (None, "not-a-key", f"{SECRETS_KEY},short"):
        env = app_env(tmp_path, DEBUG="0", SECRET_KEY="k3y-" + "x" * 50)
        env.pop("TOOLHUB_SECRETS_KEYS", None)
        if keys is not None:
            env["TOOLHUB_SECRETS_KEYS"] = keys
        # Importing the settings is what every process does first.
        result = subprocess.run(
            [sys.executable, "-c", "import toolhub.settings"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        said[keys] = (result.returncode != 0, result.stderr.strip().splitlines()[-1])

    assert {keys: refused for keys, (refused, _) in said.items()} == dict.fromkeys(said, True)
    assert "TOOLHUB_SECRETS_KEYS must be set when DEBUG is off" in said[None][1]
    assert "key 1 is not a Fernet key" in said["not-a-key"][1]
    assert "key 2 is not a Fernet key" in said[f"{SECRETS_KEY},short"][1]
    assert all("Fernet.generate_key()" in line for _, line in said.values())


def test_production_without_a_secret_key_refuses_to_start_with_a_clear_message(tmp_path):
    env = app_env(tmp_path, DEBUG="0")
    env.pop("SECRET_KEY", None)

    result = manage("check", env=env)

    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr


def test_a_debug_value_that_is_not_a_boolean_is_refused(tmp_path):
    result = manage("check", env=app_env(tmp_path, DEBUG="maybe"))

    assert result.returncode != 0
    assert "DEBUG must be a boolean" in result.stderr
