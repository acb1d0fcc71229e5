"""The compose file parses and describes the many-machine shape of README, "Deployment"."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tests.conftest import ROOT, app_env, need

pytestmark = pytest.mark.processes


def _compose_config(var_dir) -> dict:
    if (
        shutil.which("docker")
        and subprocess.run(
            ["docker", "compose", "version"], capture_output=True, check=False
        ).returncode
        == 0
    ):
        command = ["docker", "compose"]
    elif shutil.which("docker-compose"):
        command = ["docker-compose"]
    else:
        need("docker compose", "neither `docker compose` nor `docker-compose` is installed")
    result = subprocess.run(
        [*command, "-f", "docker/compose.yaml", "config"],
        cwd=ROOT,
        env=app_env(
            var_dir,
            SECRET_KEY="compose-config-check",
            TOOLHUB_SECRETS_KEYS="Y29tcG9zZS1jb25maWctY2hlY2stMzItYnl0ZXMhISE=",
            REDIS_PASSWORD="s3cret-check",
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


@pytest.fixture(scope="module")
def compose(tmp_path_factory) -> dict:
    return _compose_config(tmp_path_factory.mktemp("compose"))


def test_compose_runs_postgres_redis_web_and_worker_with_health_checks(compose):
    services = compose["services"]

    assert {"postgres", "redis", "web", "worker"} <= set(services)
    for name in ("postgres", "redis", "web", "worker"):
        assert services[name].get("healthcheck"), f"{name} has no health check"


def test_the_worker_reuses_the_web_image_and_runs_celery(compose):
    web, worker = compose["services"]["web"], compose["services"]["worker"]

    assert worker["image"] == web["image"]
    assert worker["command"][:3] == ["celery", "-A", "toolhub"]


def test_web_and_worker_point_at_the_compose_postgres_and_redis(compose):
    for name in ("web", "worker"):
        env = compose["services"][name]["environment"]
        assert env["DATABASE_URL"].startswith("postgres://")
        assert "@postgres:5432/" in env["DATABASE_URL"]
        assert env["REDIS_URL"] == "redis://toolhub:s3cret-check@redis:6379/0"


def test_redis_refuses_clients_without_the_password(compose):
    command = compose["services"]["redis"]["command"]

    # Each --user directive's words are separate arguments, as redis-server reads them.
    users = " ".join(command).split("--user ")[1:]
    assert [user.strip() for user in users] == [
        "default off",
        "toolhub on >s3cret-check ~* &* +@all",
    ]


def test_every_long_running_service_comes_back_when_it_dies_and_the_migration_does_not(compose):
    services = compose["services"]

    for name in ("postgres", "redis", "web", "worker"):
        assert services[name].get("restart") == "unless-stopped", f"{name} is not restarted"
    assert services["migrate"].get("restart", "no") == "no"
