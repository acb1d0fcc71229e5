"""WebSocket URL routes, mounted by toolhub.asgi behind the handshake authentication."""

from __future__ import annotations

from django.urls import path

from agent_app.consumers import SessionConsumer

websocket_urlpatterns = [
    path("ws/sessions/<uuid:session_id>/", SessionConsumer.as_asgi()),
]
