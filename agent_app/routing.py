"""WebSocket URL routes, mounted by toolhub.asgi behind the Origin check and session auth."""

from __future__ import annotations

from django.urls import path

from agent_app.consumers import PingConsumer

websocket_urlpatterns = [
    path("ws/ping/", PingConsumer.as_asgi()),
]
