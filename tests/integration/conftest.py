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
