"""Fixtures for the Django-free tool runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolhub.tools import ToolContext, ToolRegistry, registry


@pytest.fixture
def reg() -> ToolRegistry:
    """A registry of the test's own, so tests never see each other's tools."""
    return ToolRegistry()


@pytest.fixture
def global_registry():
    """The process registry, restored after the test."""
    state = registry.snapshot()
    yield registry
    registry.restore(state)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    return root


@pytest.fixture
def ctx(workspace: Path) -> ToolContext:
    return ToolContext(user_id="u1", session_id="s1", workspace=workspace, env={})


class _Routes(dict):
    """path -> (status, content type, body bytes, extra headers); records requests."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[str, dict[str, str]]] = []


@pytest.fixture
def local_http():
    """A real HTTP server on loopback serving whatever the test puts in its routes."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    routes = _Routes()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            routes.requests.append((self.path, dict(self.headers)))
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                self.send_error(404)
                return
            status, kind, body, headers = route
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    routes.base = f"http://127.0.0.1:{server.server_address[1]}"
    yield routes
    server.shutdown()
    server.server_close()
