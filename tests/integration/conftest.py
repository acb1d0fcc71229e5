"""Fixtures for in-process Django tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _static_without_manifest(settings) -> None:
    # The manifest storage needs `collectstatic`; in-process tests render templates without it.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture
def api():
    """An API client per persona, authenticated the way API clients are: a DRF token."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    def client_for(user=None) -> APIClient:
        client = APIClient()
        if user is not None:
            token, _ = Token.objects.get_or_create(user=user)
            client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return client_for


@pytest.fixture
def registry_state():
    """Restore the process tool registry after a test registers tools."""
    from toolhub.tools import registry

    state = registry.snapshot()
    yield registry
    registry.restore(state)


@pytest.fixture(autouse=True)
def _fresh_channel_layer_and_cache():
    """Each test runs on its own event loop (the in-memory layer's queues belong to one),
    and what one test cached (tails, tool results) must not reach the next."""
    from channels.layers import channel_layers
    from django.core.cache import cache

    from toolhub.lib.model_windows import windows_forget

    channel_layers.backends.clear()
    cache.clear()
    # Fake model servers come and go on reused ports: no window one reported outlives it.
    windows_forget()


@pytest.fixture(autouse=True)
def _thread_connections_closed():
    """Turns keep a connection per database thread, and async tests open one on asgiref's
    shared sync thread; close them so the test database can be flushed and dropped."""
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    from agent_app.turns import close_db_connections

    close_db_connections()
    SyncToAsync.single_thread_executor.submit(connections.close_all).result()


@pytest.fixture
def model(settings):
    """The fake Anthropic Messages API, answering every turn's model calls over real HTTP
    through the real SDK (script it with ``model.replies``)."""
    from tests.fakes import FakeAnthropic

    with FakeAnthropic() as server:
        settings.TOOLHUB_PROVIDER = "anthropic"
        settings.ANTHROPIC_BASE_URL = server.url
        settings.ANTHROPIC_API_KEY = "test-key"
        settings.TOOLHUB_PROVIDER_BACKOFF = 0.01
        yield server
