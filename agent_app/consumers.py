"""WebSocket consumers.

``PingConsumer`` proves the WebSocket stack end to end (daphne, the Origin check, session
authentication) until the chat consumer replaces it. It accepts only signed-in users,
answers ``{"type": "ping"}`` with ``{"type": "pong", "user": <username>}``, and answers any
other frame with an ``error`` frame while keeping the socket open.
"""

from __future__ import annotations

import json

from channels.generic.websocket import AsyncWebsocketConsumer

# 4401 mirrors HTTP 401 in the application range of WebSocket close codes.
CLOSE_NOT_AUTHENTICATED = 4401


class PingConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_NOT_AUTHENTICATED)
            return
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            frame = json.loads(text_data if text_data is not None else b"")
        except ValueError:
            await self._send({"type": "error", "code": "bad_json", "message": "not JSON"})
            return
        if isinstance(frame, dict) and frame.get("type") == "ping":
            await self._send({"type": "pong", "user": self.scope["user"].get_username()})
            return
        await self._send(
            {"type": "error", "code": "unknown_type", "message": "only ping is understood here"}
        )

    async def _send(self, frame: dict[str, object]) -> None:
        await self.send(text_data=json.dumps(frame))
