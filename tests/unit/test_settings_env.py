"""Settings read from the environment: a value out of range is refused as the settings are
imported, naming the variable, so no process starts half-configured."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from toolhub.settings_env import env_int
from toolhub.tools import ToolRegistry
from toolhub.tools.mcp import McpManager


def test_a_count_below_its_minimum_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("TOOLHUB_MCP_CHAT_CONNECTIONS", "0")

    with pytest.raises(
        ImproperlyConfigured, match="TOOLHUB_MCP_CHAT_CONNECTIONS must be at least 1"
    ):
        env_int("TOOLHUB_MCP_CHAT_CONNECTIONS", 20, minimum=1)


def test_a_count_at_its_minimum_or_unset_is_taken(monkeypatch):
    monkeypatch.setenv("TOOLHUB_MCP_CHAT_CONNECTIONS", "1")
    at_minimum = env_int("TOOLHUB_MCP_CHAT_CONNECTIONS", 20, minimum=1)
    monkeypatch.delenv("TOOLHUB_MCP_CHAT_CONNECTIONS")

    assert at_minimum == 1
    assert env_int("TOOLHUB_MCP_CHAT_CONNECTIONS", 20, minimum=1) == 20


def test_an_mcp_manager_with_no_room_for_a_chats_connection_is_refused():
    """With none, every chat's call to a handshake-era stdio server would wait forever."""
    with pytest.raises(ValueError, match="at least one own connection"):
        McpManager(ToolRegistry(), max_chats=0)
