"""Where toolhub's outgoing HTTP may connect: checked at each connection, on the address
the socket then uses.

A host is resolved once; every address it resolves to must be allowed by the ``Reach``
of the caller, and the socket connects to that same checked address, so neither a
redirect nor a DNS answer that changes between check and connect (rebinding) reaches a
refused address. The classes of address:

- **public**: routable on the internet (IPv4 inside IPv6, mapped, 6to4, Teredo or NAT64,
  is judged as the IPv4 address it carries);
- **private**: loopback, private ranges, shared address space, unique local (toolhub's
  own database, Redis and daphne live here), reached only when ``Reach.private``;
- **link-local** and the cloud metadata addresses (169.254.169.254 and its kind, where
  a machine's credentials are handed out): never, whatever the reach.

``web_fetch`` uses it with ``PUBLIC`` (its setting lifts the check entirely), MCP
connections and OAuth discovery with ``Reach(private=TOOLHUB_MCP_ALLOW_PRIVATE)``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
# Cloud instance metadata services: AWS, GCP and Azure (link-local anyway), AWS's IPv6
# endpoint, Alibaba's and Oracle's.
METADATA = frozenset(
    ipaddress.ip_address(address)
    for address in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "192.0.0.192")
)


@dataclass(frozen=True, slots=True)
class Reach:
    """Which addresses a caller may connect to beyond public ones."""

    private: bool = False


PUBLIC = Reach()


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, compatible, 6to4, Teredo, NAT64)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if int(ip) >> 32 == 0 or any(ip in network for network in _NAT64):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def is_public_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.is_site_local:
            return False
        inner = _embedded_ipv4(ip)
        if inner is not None and not (inner.is_global and not inner.is_multicast):
            return False
    return ip.is_global and not ip.is_multicast


def address_refusal(address: str, reach: Reach) -> str | None:
    """Why ``address`` may not be reached, or ``None``."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    inner = _embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    for candidate in (ip, inner):
        if candidate is None:
            continue
        if candidate in METADATA:
            return f"{address} is a cloud metadata address"
        if candidate.is_link_local:
            return f"{address} is a link-local address"
    if is_public_address(address):
        return None
    if reach.private and not ip.is_multicast and not ip.is_unspecified:
        return None
    return f"{address} is a private or local address"


def url_refusal(url: str, reach: Reach) -> str | None:
    """Why a configured URL may not be used, judged without resolving its name: its
    scheme, and its host when that is an address (or ``localhost``). A name is checked
    again, resolved, at every connection."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "the URL must be http:// or https:// with a host"
    host = parts.hostname
    if host == "localhost" or host.endswith(".localhost"):
        host = "127.0.0.1"
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    return address_refusal(host, reach)


def _backend_class(core: ModuleType) -> type:
    """A network backend for ``core`` (httpcore, or httpcore2 under the MCP SDK's httpx2)
    that checks each address before it connects."""

    class Blocked(core.ConnectError):  # type: ignore[name-defined,misc]
        """The host resolves to an address this caller may not reach."""

    class Guarded(core.AsyncNetworkBackend):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any, reach: Reach) -> None:
            self._inner = inner
            self._reach = reach

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Any = None,
        ) -> Any:
            loop = asyncio.get_running_loop()
            try:
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except socket.gaierror as exc:
                raise core.ConnectError(f"cannot resolve {host}: {exc}") from exc
            addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
            for address in addresses:
                why = address_refusal(address, self._reach)
                if why is not None:
                    raise Blocked(f"{host} resolves to a refused address: {why}")
            return await self._inner.connect_tcp(
                addresses[0],
                port,
                timeout=timeout,
                local_address=local_address,
                socket_options=socket_options,
            )

        async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
            raise Blocked("unix sockets are not reachable")

        async def sleep(self, seconds: float) -> None:
            await self._inner.sleep(seconds)

    Guarded.Blocked = Blocked
    return Guarded


_backends: dict[str, type] = {}


def guarded_backend(core: ModuleType) -> type:
    """The guarded backend class for ``core``; its ``Blocked`` is the error it raises."""
    if core.__name__ not in _backends:
        _backends[core.__name__] = _backend_class(core)
    return _backends[core.__name__]


def guard(client: Any, core: ModuleType, reach: Reach) -> Any:
    """``client`` (an httpx or httpx2 ``AsyncClient`` on its default transport) with every
    connection checked against ``reach``; returned for chaining. The clients have no
    public hook for the network backend, so the pool's is swapped once, here."""
    pool = client._transport._pool
    pool._network_backend = guarded_backend(core)(pool._network_backend, reach)
    return client
