"""The environment of a Celery worker the tests start (tests/conftest.celery_worker).

Kept apart from ``worker_tools``: importing that module registers its tools in this
process's registry, which must happen only where a test asks for them."""

from __future__ import annotations

from pathlib import Path


def worker_env(**extra: str) -> tuple[Path, dict[str, str]]:
    """A worker's var directory and environment: the test database (PostgreSQL, shared
    with this process) and this process's Redis as its broker, these tools loaded."""
    import tempfile

    from django.conf import settings

    from tests.conftest import app_env, need

    database = settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.postgresql":
        need("PostgreSQL", "the worker tests share the test database with a worker process")
    if settings.CELERY_TASK_ALWAYS_EAGER:
        need("Redis", "REDIS_URL is not set, so there is no broker for a worker")
    password = f":{database['PASSWORD']}" if database.get("PASSWORD") else ""
    url = (
        f"postgres://{database['USER']}{password}@{database['HOST']}:{database['PORT']}"
        f"/{database['NAME']}"
    )
    # Outside pytest's temporary root, which is private to whoever runs the tests: the
    # bash sandbox's user must be able to reach the worker's workspaces.
    var_dir = Path(tempfile.mkdtemp(prefix="toolhub-worker-"))
    var_dir.chmod(0o711)
    env = app_env(
        var_dir,
        DATABASE_URL=url,
        REDIS_URL=settings.CELERY_BROKER_URL,
        TOOLHUB_TOOL_MODULES="tests.integration.worker_tools",
        TOOLHUB_RUN_HEARTBEAT="0.5",
        TOOLHUB_SEMANTIC_SEARCH="0",
        **extra,
    )
    return var_dir, env
