"""web_fetch refuses internal addresses and reads public pages; web_search needs its key."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from toolhub.tools import RuntimeSettings, ToolContext, agent_tools, get
from toolhub.tools.builtin.web_fetch import html_to_text, is_public_address

PAGE = b"""<html><head><title>Hello  page</title><style>p{color:red}</style></head>
<body><h1>Welcome</h1><script>alert('x')</script><p>First &amp; second.</p></body></html>"""


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "fc00::1",
        "224.0.0.1",
        "::7f00:1",
        "::127.0.0.1",
        "64:ff9b::a9fe:a9fe",
        "64:ff9b::a00:1",
        "2002:7f00:1::",
        "2002:a00:1::1",
        "fec0::1",
    ],
)
def test_private_loopback_link_local_and_mapped_addresses_are_not_public(address):
    assert not is_public_address(address)


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "64:ff9b::101:101"]
)
def test_public_addresses_are_public(address):
    assert is_public_address(address)


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "localhost", "[::1]", "2130706433", "[::ffff:127.0.0.1]"]
)
async def test_web_fetch_refuses_loopback_however_it_is_spelt(local_http, host):
    port = local_http.base.rsplit(":", 1)[1]
    local_http["/"] = (200, "text/plain", b"internal data", {})

    result = await get("web_fetch").execute({"url": f"http://{host}:{port}/"}, ToolContext())

    assert result.is_error
    assert "private or local address" in result.content
    assert local_http.requests == []


async def test_web_fetch_reads_a_page_as_text_when_private_addresses_are_allowed(local_http):
    local_http["/page"] = (200, "text/html; charset=utf-8", PAGE, {})
    ctx = ToolContext(settings=RuntimeSettings(allow_private_fetch=True))

    result = await get("web_fetch").execute({"url": f"{local_http.base}/page"}, ctx)

    assert not result.is_error
    assert result.content == f"Hello page\n{local_http.base}/page\n\nWelcome\nFirst & second."


async def test_web_fetch_stops_reading_at_the_byte_limit(local_http):
    local_http["/big"] = (200, "text/plain", b"a" * 50_000, {})
    ctx = ToolContext(settings=RuntimeSettings(allow_private_fetch=True, fetch_max_bytes=1000))

    result = await get("web_fetch").execute({"url": f"{local_http.base}/big"}, ctx)

    assert "a" * 1000 in result.content
    assert "a" * 1001 not in result.content
    assert "stopped reading at 1,000 bytes" in result.content


async def test_web_fetch_reports_an_http_error_status_as_an_error(local_http):
    ctx = ToolContext(settings=RuntimeSettings(allow_private_fetch=True))

    result = await get("web_fetch").execute({"url": f"{local_http.base}/missing"}, ctx)

    assert result.is_error
    assert "404" in result.content


async def test_web_fetch_refuses_other_schemes():
    result = await get("web_fetch").execute({"url": "file:///etc/passwd"}, ToolContext())

    assert result.is_error
    assert "http://" in result.content


def test_html_to_text_drops_scripts_and_styles():
    title, text = html_to_text(PAGE.decode())

    assert title == "Hello page"
    assert "alert" not in text
    assert "color" not in text


def test_web_search_is_unavailable_without_its_key_and_says_which():
    selection = agent_tools(ctx=ToolContext(env={}))

    assert selection.reason_for("web_search").reason == "needs BRAVE_API_KEY"


async def test_web_search_queries_the_provider_with_the_key_and_lists_results(local_http):
    body = {
        "web": {
            "results": [
                {"title": "Django", "url": "https://djangoproject.com", "description": "Web"},
                {"title": "Channels", "url": "https://channels.rtfd.io", "description": "ASGI"},
            ]
        }
    }
    local_http["/search"] = (200, "application/json", json.dumps(body).encode(), {})
    ctx = ToolContext(
        user_id="u1",
        env={"BRAVE_API_KEY": "k-123"},
        settings=replace(RuntimeSettings(), search_url=f"{local_http.base}/search"),
    )

    result = await get("web_search").execute({"query": "django async", "count": 2}, ctx)

    assert result.content == (
        "1. Django\nhttps://djangoproject.com\nWeb\n\n2. Channels\nhttps://channels.rtfd.io\nASGI"
    )
    path, headers = local_http.requests[0]
    assert "q=django+async" in path
    assert headers["X-Subscription-Token"] == "k-123"


async def test_web_search_reports_a_provider_failure(local_http):
    ctx = ToolContext(
        env={"BRAVE_API_KEY": "k"},
        settings=RuntimeSettings(search_url=f"{local_http.base}/down"),
    )

    result = await get("web_search").execute({"query": "x"}, ctx)

    assert result.is_error
    assert "404" in result.content


class _NeverConnect:
    """The inner network backend: any call means the guard let a connection through."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def connect_tcp(self, host, port, **kwargs):
        self.calls.append(host)
        raise AssertionError(f"connected to {host}")


@pytest.mark.parametrize("host", ["10.1.2.3", "169.254.169.254", "192.168.0.10", "localhost"])
async def test_the_connection_guard_refuses_internal_hosts_before_any_connection(host):
    import httpcore

    from toolhub.tools.netguard import PUBLIC, guarded_backend

    inner = _NeverConnect()
    backend = guarded_backend(httpcore)

    with pytest.raises(backend.Blocked, match="resolves to a refused address"):
        await backend(inner, PUBLIC).connect_tcp(host, 80)
    assert inner.calls == []
