"""Where MCP connections and OAuth discovery may go (toolhub.tools.netguard).

The servers here are small HTTP servers on loopback in this process's threads, counting
what reaches them: the test asserts on what arrived, not on what the client meant to do.
A name that resolves to loopback is made with a patched resolver, as a DNS answer would.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from toolhub.tools.mcp import McpServerConfig
from toolhub.tools.mcp.oauth import McpOAuthError
from toolhub.tools.mcp.oauth_sign_in import oauth_sign_in_begin
from toolhub.tools.netguard import PUBLIC, Reach, address_refusal, url_refusal


class _Counting(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, answer) -> None:
        self.paths: list[str] = []
        self.answer = answer
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    def _any(self) -> None:
        self.server.paths.append(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        status, headers = self.server.answer(self.path)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _any

    def log_message(self, *args) -> None:
        return None


@contextmanager
def _server(answer=lambda path: (404, {})) -> Iterator[_Counting]:
    server = _Counting(answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("address", "private_allowed", "refused"),
    [
        ("169.254.169.254", True, "cloud metadata"),
        ("::ffff:169.254.169.254", True, "cloud metadata"),
        ("fd00:ec2::254", True, "cloud metadata"),
        ("100.100.100.200", True, "cloud metadata"),
        ("169.254.10.1", True, "link-local"),
        ("fe80::1", True, "link-local"),
        ("127.0.0.1", False, "private or local"),
        ("10.0.0.5", False, "private or local"),
        ("::1", False, "private or local"),
        ("127.0.0.1", True, None),
        ("192.168.1.10", True, None),
        ("93.184.216.34", False, None),
    ],
)
def test_link_local_and_metadata_are_refused_always_and_private_unless_allowed(
    address, private_allowed, refused
):
    why = address_refusal(address, Reach(private=private_allowed))

    assert (why is None) == (refused is None)
    if refused is not None:
        assert refused in why


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://169.254.169.254/latest/meta-data/", False),
        ("http://[fe80::1]:8080/mcp", False),
        ("http://127.0.0.1:6379/", False),
        ("http://localhost:5432/mcp", False),
        ("https://mcp.example.com/mcp", True),
        ("ftp://mcp.example.com/mcp", False),
    ],
)
def test_a_server_url_is_judged_when_it_is_saved(url, allowed):
    def config(allow_private: bool) -> McpServerConfig:
        return McpServerConfig(
            name="remote", transport="streamable_http", url=url, allow_private=allow_private
        )

    if allowed:
        assert config(False).url == url
    else:
        with pytest.raises(ValueError, match="the URL cannot be used"):
            config(False)
    assert (url_refusal(url, PUBLIC) is None) == allowed


def test_with_private_allowed_loopback_is_accepted_but_metadata_still_is_not():
    kept = McpServerConfig(
        name="local", transport="streamable_http", url="http://127.0.0.1:9/mcp", allow_private=True
    )

    assert kept.allow_private
    with pytest.raises(ValueError, match="cloud metadata"):
        McpServerConfig(
            name="meta",
            transport="streamable_http",
            url="http://169.254.169.254/mcp",
            allow_private=True,
        )


def _machine_name() -> str:
    """This machine's own name, which /etc/hosts points at loopback here."""
    name = socket.gethostname()
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(name, 80)}
    except socket.gaierror:
        pytest.skip(f"{name} does not resolve on this machine")
    if not all(address.startswith("127.") or address == "::1" for address in addresses):
        pytest.skip(f"{name} does not resolve to loopback on this machine")
    return name


@pytest.mark.parametrize("host", ["machine name", "127.1", "2130706433", "0x7f.0.0.1"])
async def test_a_name_that_resolves_to_loopback_is_never_connected_to(host):
    """A name the URL check cannot judge (the machine's own name, spellings of loopback
    a URL parser does not read as an address): judged at the connection, on the address
    the resolver gives."""
    if host == "machine name":
        host = _machine_name()
    with _server(lambda path: (401, {"WWW-Authenticate": "Bearer"})) as target:
        port = target.server_address[1]
        config = McpServerConfig(
            name="remote",
            transport="streamable_http",
            url=f"http://{host}:{port}/mcp",
            auth="oauth",
        )

        with pytest.raises(McpOAuthError) as refused:
            await oauth_sign_in_begin(
                config, redirect_uri="https://toolhub.example/cb", client_info=None
            )

    assert "resolves to a refused address" in str(refused.value)
    assert target.paths == []


async def test_sign_in_discovery_never_follows_metadata_to_another_origin():
    with _server() as elsewhere:

        def challenge(path):
            if path == "/mcp":
                metadata = f"{elsewhere.origin}/.well-known/oauth-protected-resource"
                return 401, {"WWW-Authenticate": f'Bearer resource_metadata="{metadata}"'}
            return 404, {}

        with _server(challenge) as mcp:
            config = McpServerConfig(
                name="remote",
                transport="streamable_http",
                url=f"{mcp.origin}/mcp",
                auth="oauth",
                allow_private=True,
            )
            with pytest.raises(McpOAuthError, match="publishes no OAuth metadata"):
                await oauth_sign_in_begin(
                    config, redirect_uri="https://toolhub.example/cb", client_info=None
                )

    assert elsewhere.paths == []
    # Its own origin was asked, as the specification's well-known paths say.
    assert any(path.startswith("/.well-known/oauth-protected-resource") for path in mcp.paths)


def test_a_connection_to_a_name_that_resolves_to_loopback_is_refused_and_says_why(tmp_path):
    from tests.integration.tools.test_mcp_client import make_manager
    from tests.mcp import wait_for
    from toolhub.tools import ToolRegistry

    host = _machine_name()
    with _server(lambda path: (200, {})) as target:
        manager = make_manager(ToolRegistry(), tmp_path)
        config = McpServerConfig(
            name="inside",
            transport="streamable_http",
            url=f"http://{host}:{target.server_address[1]}/mcp",
        )
        try:
            manager.reconcile([config], wait=10)
            status = wait_for(
                lambda: manager.statuses()["inside"].error and manager.statuses()["inside"],
                what="the connection to fail",
            )
        finally:
            manager.stop()
            manager.errlog.close()

    assert status.state != "connected"
    assert "refused address" in status.error
    assert target.paths == []
