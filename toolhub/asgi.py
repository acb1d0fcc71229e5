"""ASGI entry point served by daphne: Django for HTTP, Channels for WebSockets.

HTTP requests go to Django through ``OneHopASGIHandler`` (toolhub.lib.asgi_handler: a
request's sync work in one hop on a kept thread). WebSocket connections authenticate with
the session cookie after the Origin check against ALLOWED_HOSTS (so another site's page
cannot open a socket with a visitor's cookie), or with a DRF token header
(toolhub.ws_auth). The application records the server's event
loop on its first call (``toolhub.serve`` calls it as the server starts): chat turns
started from sync views run there, and the turn reaper too (agent_app.turns).
Loading this module connects the configured MCP servers (agent_app.mcp), kills bash
sandboxes whose owner process is gone (toolhub.tools.sandbox), and starts building the
default model provider on a thread: nothing a turn needs is imported on the event loop,
where a seconds-long import stalls every socket of the process (agent_app.providers).
"""

from __future__ import annotations

import os

import django
from asgiref.typing import ASGIReceiveCallable, ASGISendCallable, Scope

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolhub.settings")

# Django must be set up before anything imports models (the routing does).
django.setup(set_prefix=False)

from toolhub.lib.asgi_handler import OneHopASGIHandler  # noqa: E402

django_asgi_app = OneHopASGIHandler()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from agent_app.mcp import mcp_start  # noqa: E402
from agent_app.providers import provider_preload  # noqa: E402
from agent_app.routing import websocket_urlpatterns  # noqa: E402
from agent_app.turns import serve_turns_here  # noqa: E402
from toolhub.tools.sandbox import reap_orphan_sandboxes  # noqa: E402
from toolhub.ws_auth import TokenOrSessionAuth  # noqa: E402

# The web process connects its MCP servers as it starts, before the first turn, and tells
# the pages it serves when its tools change.
mcp_start(serves_pages=True)
# Without a broker, bash runs in this process: a previous one may have left boxes behind.
reap_orphan_sandboxes()
provider_preload()

router = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": TokenOrSessionAuth(URLRouter(websocket_urlpatterns)),
    }
)


async def application(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    serve_turns_here()
    await router(scope, receive, send)
