"""The plumbing both fake LLM servers share: a real HTTP server on loopback, scripted
replies, and a record of what clients sent.

A fake is a `FakeServer` subclass that turns one recorded request into one response through
an `Exchange`. The invariants every fake keeps:

- It listens on 127.0.0.1 on a port the kernel picked, serves each connection from a daemon
  thread, and speaks HTTP/1.1 with keep-alive, as the real APIs do.
- Every request is appended to `requests` before it is answered, so a test that saw
  `wait_for_requests(n)` return knows the n-th request has arrived (not that it is answered).
- A model call takes the next `Reply` from `replies`; only when that deque is empty does
  `responder` decide. Requests that fail authentication or validation, and token counts,
  take no reply, so a script lines up with the model calls a client makes.
- A streamed body is sent with chunked transfer encoding, one chunk per event, each written
  straight to the socket, so the client sees an event as soon as it is written.
- A stream the client closes before its end counts once in `disconnects`; `stop()` ends the
  streams still open (held ones included) without counting them.
"""

from __future__ import annotations

import contextlib
import json
import re
import select
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import urlsplit

__all__ = ["Exchange", "FakeServer", "Reply", "Seen", "canonical", "split_json", "split_text"]

# How often a held stream looks at its socket for a client that went away.
_HOLD_POLL_SECONDS = 0.02

_CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


@dataclass
class Reply:
    """What the fake model answers to one request.

    `text` is streamed in `chunks` deltas (default: one per word, spaces kept, so the deltas
    join back to `text` exactly). `tool_calls` are `(id, name, input)`; ids are used
    verbatim. `stop_reason` defaults to the provider's "tool use" or "end of turn" value.
    A `status` other than 200 answers with that provider's error body and no stream.
    `delay` is slept between stream events. With `hold`, the stream parks after its first
    content delta until the event is set or the client disconnects. `malformed` sends a
    truncated event at that same point and drops the connection. `usage_output` overrides
    the output token estimate. `stream_error` and `cut` are FakeOpenAI's (its docstring).
    """

    text: str = ""
    chunks: int | None = None
    tool_calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    stop_reason: str | None = None
    status: int = 200
    delay: float = 0.0
    hold: threading.Event | None = None
    malformed: bool = False
    usage_output: int | None = None
    # OpenAI-compatible servers' ways of going wrong inside a 200 stream (FakeOpenAI):
    # an error event after the text so far, or the stream ending with no finish_reason.
    stream_error: str | None = None
    cut: bool = False

    def text_pieces(self) -> list[str]:
        return split_text(self.text, self.chunks)

    def output_tokens(self) -> int:
        if self.usage_output is not None:
            return self.usage_output
        produced = self.text + "".join(canonical(call[2]) for call in self.tool_calls)
        return max(1, len(produced) // 4)


@dataclass
class Seen:
    """One request as the fake received it: `headers` has lower-case keys, `body` is the
    parsed JSON object (empty when the body was not one), `raw` the bytes on the wire.
    `path` excludes the query string, which is kept apart in `query`."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes
    query: str = ""
    method: str = "POST"
    # The client's address and port: one per TCP connection the client opened.
    peer: str = ""


def canonical(value: Any) -> str:
    """The one serialization that token estimates and cache keys are computed from."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def split_text(text: str, chunks: int | None) -> list[str]:
    """Split `text` into deltas that join back to it exactly."""
    if not text:
        return []
    if chunks is None:
        return re.findall(r"\s*\S+\s*", text) or [text]
    count = max(1, min(chunks, len(text)))
    size, extra = divmod(len(text), count)
    pieces, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


def split_json(text: str) -> list[str]:
    """Split serialized JSON into at least two pieces, cutting inside tokens as a model
    does, so a client has to buffer partial JSON."""
    return split_text(text, max(2, min(3, len(text))))


def _say_ok(body: dict[str, Any]) -> Reply:
    return Reply(text="ok")


class _ClientGone(Exception):
    """The client closed the connection while a response was being written."""


class _Stopping(Exception):
    """The fake is stopping; an open stream ends without counting as a disconnect."""


class Exchange:
    """One request and the means to answer it, handed to `FakeServer.handle`."""

    def __init__(self, fake: FakeServer, handler: _Handler, seen: Seen, *, is_json: bool):
        self.fake = fake
        self.seen = seen
        self.is_json = is_json
        self._handler = handler

    @property
    def path(self) -> str:
        return self.seen.path

    @property
    def method(self) -> str:
        return self.seen.method

    @property
    def headers(self) -> dict[str, str]:
        return self.seen.headers

    @property
    def body(self) -> dict[str, Any]:
        return self.seen.body

    def send_json(
        self, status: int, payload: Any, *, headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        handler = self._handler
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
        except _CLIENT_GONE as gone:
            raise _ClientGone from gone

    def stream(
        self,
        frames: list[bytes],
        *,
        reply: Reply,
        pause_after: int,
        broken_frame: bytes,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Send `frames` as a server-sent event stream, applying the reply's `delay`, and
        its `hold` or `malformed` right after frame `pause_after`."""
        handler = self._handler
        try:
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
            handler.send_header("Cache-Control", "no-cache")
            handler.send_header("Transfer-Encoding", "chunked")
            for name, value in (headers or {}).items():
                handler.send_header(name, value)
            handler.end_headers()
            for index, frame in enumerate(frames):
                if index and reply.delay:
                    self._pause(reply.delay)
                self._write_chunk(frame)
                if index != pause_after:
                    continue
                if reply.malformed:
                    self._write_chunk(broken_frame)
                    # Without the terminating chunk the client sees the body cut short.
                    handler.close_connection = True
                    return
                if reply.hold is not None:
                    self._park(reply.hold)
            self._write(b"0\r\n\r\n")
        except _ClientGone:
            handler.close_connection = True
            self.fake._count_disconnect()
        except _Stopping:
            handler.close_connection = True

    def drop_connection(self, *, after: float = 0.1) -> None:
        """Close the connection ``after`` seconds once this response is sent, without
        saying so first: a client that reuses it meanwhile has its next request lost."""
        self._pause(after)
        self._handler.close_connection = True

    def _write(self, data: bytes) -> None:
        try:
            self._handler.wfile.write(data)
            self._handler.wfile.flush()
        except _CLIENT_GONE as gone:
            raise _ClientGone from gone

    def _write_chunk(self, data: bytes) -> None:
        self._write(b"%x\r\n%s\r\n" % (len(data), data))

    def _pause(self, seconds: float) -> None:
        if self.fake._stopping.wait(seconds):
            raise _Stopping

    def _park(self, hold: threading.Event) -> None:
        # An Event cannot be selected on together with the socket, so the two are polled in
        # turn; the poll is what lets a cancelled client end the stream before the test
        # releases the hold.
        while not hold.wait(_HOLD_POLL_SECONDS):
            if self.fake._stopping.is_set():
                raise _Stopping
            if self._peer_closed():
                raise _ClientGone

    def _peer_closed(self) -> bool:
        sock = self._handler.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as real API servers set: with Nagle's algorithm each small chunk after
    # the first waits for the client's delayed ACK, ~40 ms per reply on loopback, and an
    # "instant" fake answer would take longer than most real first tokens.
    disable_nagle_algorithm = True
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.fake._connection_opened(self.connection)

    def finish(self) -> None:
        self.server.fake._connection_closed(self.connection)
        super().finish()

    def do_POST(self) -> None:
        self.server.fake._serve(self, "POST")

    def do_GET(self) -> None:
        self.server.fake._serve(self, "GET")

    def log_message(self, format: str, *args: Any) -> None:
        # Test output stays readable; `requests` is the log.
        pass


class FakeServer:
    """A scripted HTTP server for one provider. Subclasses implement `handle`."""

    def __init__(self, *, responder: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        self.replies: deque[Reply] = deque()
        self.responder: Callable[[dict[str, Any]], Reply] = responder or _say_ok
        self.requests: list[Seen] = []
        self.lookups: list[Seen] = []
        self.disconnects = 0
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        if self._httpd is not None:
            return self
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{type(self).__name__}-{self._httpd.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None or self._stopping.is_set():
            return
        self._stopping.set()
        self._httpd.shutdown()
        # Idle keep-alive connections would keep their threads blocked on a read.
        with self._changed:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> list[Seen]:
        """Block until `n` requests have arrived; return a copy of them all."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.requests) >= n, timeout):
                raise TimeoutError(f"saw {len(self.requests)} of {n} requests in {timeout} s")
            return list(self.requests)

    def wait_for_disconnects(self, n: int, timeout: float = 10.0) -> int:
        """Block until clients have abandoned `n` streams; return the count."""
        with self._changed:
            if not self._changed.wait_for(lambda: self.disconnects >= n, timeout):
                raise TimeoutError(f"saw {self.disconnects} of {n} disconnects in {timeout} s")
            return self.disconnects

    def next_reply(self, body: dict[str, Any]) -> Reply:
        try:
            return self.replies.popleft()
        except IndexError:
            return self.responder(body)

    def handle(self, exchange: Exchange) -> None:
        raise NotImplementedError

    def _serve(self, handler: _Handler, method: str) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        is_json = isinstance(parsed, dict)
        target = urlsplit(handler.path)
        seen = Seen(
            path=target.path,
            headers={name.lower(): value for name, value in handler.headers.items()},
            body=parsed if is_json else {},
            raw=raw,
            query=target.query,
            method=method,
            peer=f"{handler.client_address[0]}:{handler.client_address[1]}",
        )
        with self._changed:
            # A GET asks what the server is (its models, its properties): kept apart, so
            # the requests a test counts are the model calls it scripted.
            (self.lookups if method == "GET" else self.requests).append(seen)
            self._changed.notify_all()
        try:
            self.handle(Exchange(self, handler, seen, is_json=is_json))
        except (_ClientGone, _Stopping):
            handler.close_connection = True

    def _count_disconnect(self) -> None:
        with self._changed:
            self.disconnects += 1
            self._changed.notify_all()

    def _connection_opened(self, connection: socket.socket) -> None:
        with self._changed:
            self._connections.add(connection)

    def _connection_closed(self, connection: socket.socket) -> None:
        with self._changed:
            self._connections.discard(connection)
