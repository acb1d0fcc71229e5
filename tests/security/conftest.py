"""The attack suite runs against the same real services and fixtures as the integration
tests (the per-test cleanup of the channel layer, cache and database threads included)."""

from tests.integration.conftest import (  # noqa: F401 (fixtures)
    _fresh_channel_layer_and_cache,
    _static_without_manifest,
    _thread_connections_closed,
    api,
    model,
    registry_state,
)
