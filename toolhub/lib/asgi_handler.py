"""Django's ASGI handler for HTTP, with a request's sync work done in one hop on a kept thread.

Django's own handler gives every request a new thread (a ``ThreadSensitiveContext`` of its
own) and crosses between the server's loop and that thread five times: the request_started
signal, into the sync middleware, back out for the view's async wrapper, into the view, and
the response's close. On this machine a crossing costs about 0.2 ms and a new thread about
0.5 ms: more than the profiles list's queries (docs/architecture.md, "Request path").

Here a request takes an idle single-thread executor (or makes one) and does everything sync
in one call on it: the request_started signal, the request's creation, the middleware chain
loaded in sync mode (as under WSGI) with the view, and, for a response whose body is already
bytes, its ``close()`` (request_finished: the thread's database connection goes back to the
pool). Then the loop sends the bytes.

Invariants:
- Everything sync in one request runs on one thread, as under Django's handler: the
  database connection a view used is the one its request_finished returns.
- One request at a time per thread: an executor goes back to the idle list only once its
  request is done, and is dropped instead if the request was cancelled mid-call.
- A streaming response (a static file) is sent as Django sends one, and closed afterwards on
  the same thread.
- A request's body is bounded before it is read (``body_cap``): a declared length past
  the bound is refused on its headers, and a body that runs past it while it is read is
  refused there, so a 2 GB upload never reaches the disk Django spools bodies to.
- Nothing async runs in the middleware chain: an async-only middleware or an async view
  would be adapted with ``async_to_sync`` per request. There is none; a test checks so.
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.base import BaseHandler
from django.http import HttpResponseBase, JsonResponse
from django.urls import set_script_prefix

from toolhub.tools.files import size_in_words

# Idle threads kept for the next requests; a burst beyond this makes threads that end after.
_IDLE_KEPT = 64


# Any request's body; the upload paths take a message's files.
BODY_MAX = 16 * 2**20
_UPLOAD_PATH = re.compile(r"^/(chat|api/sessions)/[0-9a-fA-F-]{32,36}/attachments/$")
# Room for a multipart body's boundaries and headers around the files.
_MULTIPART_SLACK = 2**20


class _TooLarge(Exception):
    pass


def upload_path(path: str) -> bool:
    """Whether ``path`` takes a message's files (its body may pass ``BODY_MAX``)."""
    return bool(_UPLOAD_PATH.match(path))


def body_cap(path: str, *, signed_in: bool = True) -> int:
    """The most bytes a request to ``path`` may send: a message's files to an upload path
    from someone who may be signed in (a session cookie or credentials), else
    ``BODY_MAX``, so nobody unknown makes the server spool 100 MB."""
    if signed_in and upload_path(path):
        return settings.TOOLHUB_UPLOAD_MESSAGE_MAX_BYTES + _MULTIPART_SLACK
    return BODY_MAX


def _signed_in(scope: dict[str, Any]) -> bool:
    """A request that carries a session cookie or an Authorization header (checked
    properly later: this only decides how much body it may send)."""
    cookie = settings.SESSION_COOKIE_NAME.encode() + b"="
    return any(
        name == b"authorization" or (name == b"cookie" and cookie in value)
        for name, value in scope.get("headers", ())
    )


def _declared_length(scope: dict[str, Any]) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


def _too_large(cap: int) -> JsonResponse:
    message = f"That request is too large: at most {size_in_words(cap)} can be sent at once."
    return JsonResponse({"code": "too_large", "message": message}, status=413)


class OneHopASGIHandler(ASGIHandler):
    def __init__(self) -> None:
        # Not ASGIHandler's own: that loads the chain in async mode.
        BaseHandler.__init__(self)
        self.load_middleware(is_async=False)
        self._idle: list[ThreadPoolExecutor] = []
        self._idle_lock = threading.Lock()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self._take()
        finished = False
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
            finished = True
        finally:
            self._give_back(executor, reuse=finished)

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        cap = body_cap(scope.get("path", ""), signed_in=_signed_in(scope))
        try:
            if _declared_length(scope) > cap:
                raise _TooLarge
            body_file = await self._read_bounded(receive, cap)
        except RequestAborted:
            return
        except _TooLarge:
            await self.send_response(_too_large(cap), send)
            return
        with closing(body_file):
            response = await sync_to_async(self._respond)(scope, body_file)
            await self.send_response(response, send)
            if response.streaming:
                await sync_to_async(response.close)()

    async def _read_bounded(self, receive: Any, cap: int) -> Any:
        """Django's ``read_body``, stopped once the body passes ``cap`` bytes."""
        read = 0

        async def counted() -> dict[str, Any]:
            nonlocal read
            message: dict[str, Any] = await receive()
            read += len(message.get("body", b""))
            if read > cap:
                raise _TooLarge
            return message

        return await self.read_body(counted)

    def _respond(self, scope: dict[str, Any], body_file: Any) -> HttpResponseBase:
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=ASGIHandler, scope=scope)
        request, refusal = self.create_request(scope, body_file)
        response = self.get_response(request) if request is not None else refusal
        assert response is not None  # create_request gives a request or a refusal
        if not response.streaming:
            response.close()
        return response

    def _take(self) -> ThreadPoolExecutor:
        with self._idle_lock:
            if self._idle:
                return self._idle.pop()
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def _give_back(self, executor: ThreadPoolExecutor, *, reuse: bool) -> None:
        if reuse:
            with self._idle_lock:
                if len(self._idle) < _IDLE_KEPT:
                    self._idle.append(executor)
                    return
        # Cancelled mid-call (its thread may still be busy) or one too many: it ends once
        # its work is done.
        executor.shutdown(wait=False)
