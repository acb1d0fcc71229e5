"""An OAuth MCP server's configuration as the runtime takes it: what it refuses, what it
compares, and what ``redact`` hides."""

from __future__ import annotations

import dataclasses

import pytest

from toolhub.tools.mcp import McpServerConfig
from toolhub.tools.mcp.oauth import McpSignInNeeded, sign_in_needed


def remote(**fields) -> McpServerConfig:
    return McpServerConfig(
        name="remote",
        transport="streamable_http",
        url="http://127.0.0.1:9/mcp",
        allow_private=True,
        **fields,
    )


def test_a_servers_redact_hides_the_tokens_its_connection_holds_and_its_client_secret():
    config = remote(auth="oauth", oauth_client_id="toolhub", oauth_client_secret="secret-1")
    config.held_secrets.add("access-token-1")

    text = config.redact("Bearer access-token-1 failed; client_secret=secret-1")

    assert text == "Bearer *** failed; client_secret=***"


def test_the_tokens_a_connection_holds_never_make_two_configs_differ():
    held = remote(auth="oauth")
    held.held_secrets.add("access-token-1")

    assert held == remote(auth="oauth")
    assert hash(held) == hash(remote(auth="oauth"))
    assert held != dataclasses.replace(held, oauth_generation=1)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"auth": "basic"}, "auth must be one of"),
        ({"auth": "oauth", "oauth_scopes": "a  b"}, "scope names separated by single spaces"),
        ({"auth": "oauth", "oauth_scopes": 'a"b'}, "scope names separated by single spaces"),
        ({"auth": "oauth", "oauth_client_id": " id"}, "surrounding spaces"),
        ({"auth": "oauth", "oauth_client_secret": "x\n"}, "surrounding spaces"),
    ],
)
def test_an_oauth_configuration_that_cannot_work_is_refused_with_why(fields, problem):
    with pytest.raises(ValueError, match=problem):
        remote(**fields)


def test_oauth_is_refused_for_a_stdio_server():
    with pytest.raises(ValueError, match="OAuth is for streamable HTTP servers"):
        McpServerConfig(name="local", transport="stdio", command="true", auth="oauth")


def test_a_sign_in_needed_deep_in_an_exception_group_is_found():
    inner = McpSignInNeeded("MCP server remote needs sign-in")
    group = BaseExceptionGroup("transport", [ValueError("x"), ExceptionGroup("post", [inner])])

    assert sign_in_needed(group) is inner
    assert sign_in_needed(ValueError("x")) is None
