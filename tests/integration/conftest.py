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
