"""``web_fetch``: GET a public web page and return its text.

Every connection is checked where it is made (``toolhub.tools.netguard``, with
``PUBLIC``): the host is resolved once, each address must be public (not private,
loopback, link-local, reserved, multicast or unspecified, IPv4 mapped into IPv6
included), and the socket connects to that same checked address. So neither a redirect
nor a DNS answer that changes between check and connect (rebinding) reaches an internal
service. ``RuntimeSettings.allow_private_fetch`` lifts the check.
Bodies are read up to a byte limit under a time limit; proxies from the environment are
ignored, since they would bypass the check.
"""

from __future__ import annotations

import asyncio
from html.parser import HTMLParser

import httpcore
import httpx

from toolhub.tools.context import ToolContext
from toolhub.tools.decorator import function
from toolhub.tools.netguard import PUBLIC, guard, is_public_address

__all__ = ["html_to_text", "is_public_address", "web_fetch"]

MAX_REDIRECTS = 5
USER_AGENT = "toolhub-web-fetch/1.0"


def _client(ctx: ToolContext) -> httpx.AsyncClient:
    client = httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(retries=0),
        timeout=ctx.settings.fetch_timeout,
        follow_redirects=True,
        max_redirects=MAX_REDIRECTS,
        trust_env=False,
        headers={"User-Agent": USER_AGENT},
    )
    if not ctx.settings.allow_private_fetch:
        guard(client, httpcore, PUBLIC)
    return client


class _TextExtractor(HTMLParser):
    _SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head"})
    _BLOCK = frozenset(
        {
            "p",
            "div",
            "br",
            "li",
            "tr",
            "h1",
            "h2",
            "h3",
            "h4",
            "h5",
            "h6",
            "section",
            "article",
            "header",
            "footer",
            "pre",
            "blockquote",
            "table",
            "ul",
            "ol",
        }
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skipping = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in self._SKIP:
            self._skipping += 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in self._SKIP and self._skipping:
            self._skipping -= 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skipping:
            self.parts.append(data)


def html_to_text(html: str) -> tuple[str, str]:
    """(title, readable text) of an HTML document; scripts and styles dropped."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    text = "\n".join(line for line in lines if line)
    return " ".join(parser.title.split()), text


# A page longer than the model gets is kept whole for the person (persist_full).
@function(
    cache=True,
    cache_ttl=300,
    label="Fetch web page",
    max_result_chars=40_000,
    persist_full=True,
)
async def web_fetch(url: str, *, ctx: ToolContext) -> str:
    """Fetch a web page over HTTP(S) and return its readable text.

    Args:
        url: An http:// or https:// address on the public internet.
    """
    parsed = httpx.URL(url)
    if parsed.scheme not in {"http", "https"} or not parsed.host:
        raise ValueError("url must be an http:// or https:// address")
    limit = ctx.settings.fetch_max_bytes
    async with _client(ctx) as client, client.stream("GET", parsed) as response:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body.extend(chunk[: limit - len(body)])
            if len(body) >= limit:
                break
        clipped = len(body) >= limit
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        text = body.decode(response.encoding or "utf-8", errors="replace")
        status = f"{response.status_code} {response.reason_phrase}".strip()
        final_url = str(response.url)
    if kind in {"text/html", "application/xhtml+xml"}:
        # Parsing megabytes of HTML takes long enough to stall the event loop.
        title, text = await asyncio.to_thread(html_to_text, text)
        header = f"{title}\n{final_url}" if title else final_url
    elif kind.startswith("text/") or kind in {"application/json", "application/xml", ""}:
        header = final_url
    else:
        return f"{final_url}: {kind} content ({len(body):,} bytes) is not text"
    note = f"\n[stopped reading at {limit:,} bytes]" if clipped else ""
    if response.status_code >= 400:
        raise RuntimeError(f"{final_url} answered {status}\n{text[:2000]}")
    return f"{header}\n\n{text}{note}"
