"""Shared fixtures: personas, the real services, and a real daphne server.

Tests that need PostgreSQL, Redis, Chromium or bubblewrap ask for them through a fixture.
On a laptop without them the test skips; with ``TOOLHUB_REQUIRE_SERVICES=1`` (CI) it fails
instead, so a missing service can never pass CI silently.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.workers import redis_db

ROOT = Path(__file__).resolve().parent.parent
REQUIRE_SERVICES = os.environ.get("TOOLHUB_REQUIRE_SERVICES") == "1"
DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
CHROMIUM = "/usr/bin/chromium"


# Tables a flush leaves alone: what migrate wrote and every test reads the same (no test
# writes to them).
_STATIC_TABLES = frozenset({"django_content_type", "auth_permission"})


def pytest_configure(config: pytest.Config) -> None:
    """Empty the database between transactional tests in milliseconds.

    Django's TransactionTestCase empties every table after each test (on PostgreSQL with
    one TRUNCATE, about 90 ms here: it makes new files for 28 tables) and then has
    post_migrate write the content types and permissions back (about 35 ms). The tables
    hold a test's few rows, so DELETE in one transaction (foreign keys are deferred on
    PostgreSQL) empties them in about 5 ms; the static tables, the only ones post_migrate
    writes (django.contrib's receivers are its only ones), are left as migrate made them,
    on every backend. Sequences go on as with TRUNCATE (Django resets them only for a test
    that asks, and then its own statements run, without the static tables)."""
    from django.core.management.commands import flush

    def sql_flush(style, connection, reset_sequences=True, allow_cascade=False):
        tables = [
            table
            for table in connection.introspection.django_table_names(
                only_existing=True, include_views=False
            )
            if table not in _STATIC_TABLES
        ]
        if connection.vendor != "postgresql" or reset_sequences:
            return connection.ops.sql_flush(
                style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        return ["SET CONSTRAINTS ALL DEFERRED"] + [
            f"DELETE FROM {connection.ops.quote_name(table)}"  # noqa: S608 (Django's names)
            for table in tables
        ]

    flush.sql_flush = sql_flush
    flush.emit_post_migrate_signal = lambda *args, **kwargs: None


class UnmarkedProcess(RuntimeError):
    """A test not marked ``processes`` tried to start one."""


def _probe_once_per_process(words: list[str]) -> bool:
    # What the runtime itself starts once and keeps, so a test that renders a page or
    # searches may trigger it without being about processes: the embedding model rewritten
    # to int8 (once per machine, toolhub.tools.embedding_model) and the sandbox's start-up check,
    # a box running `true` (once per process, toolhub.tools.sandbox.unavailable_reason).
    return "toolhub.tools.model_rewrite" in words or (
        words[0].startswith("toolhub-sandbox:") and words[-1] == "true"
    )


_unmarked = pytest.StashKey[list[str]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Keep the ``processes`` marker true: a test without it that starts a process (a
    server, a worker, a browser, a sandbox, an MCP server) fails and says to mark it, so
    ``make test-fast``, which leaves marked tests out, never starts one. The process is
    refused where it starts (perhaps on a thread of the product's) and the test's report
    says so, whatever the code that tried made of the refusal."""
    if item.get_closest_marker("processes") is not None:
        return (yield)
    real = subprocess.Popen._execute_child
    item.stash[_unmarked] = []

    def refuse(self, args, *rest, **kwargs):
        words = [str(arg) for arg in ([args] if isinstance(args, str | bytes) else args)]
        if not _probe_once_per_process(words):
            item.stash[_unmarked].append(" ".join(words)[:200])
            raise UnmarkedProcess(f"{item.nodeid} is not marked `processes`")
        return real(self, args, *rest, **kwargs)

    subprocess.Popen._execute_child = refuse
    try:
        return (yield)
    finally:
        subprocess.Popen._execute_child = real


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    started = item.stash.get(_unmarked, [])
    if started and (report.when == "call" or report.failed):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} starts a process ({started[0]}) but is not marked `processes`: "
            "mark it (pytestmark) so make test-fast leaves it out"
        )
    return report


def need(service: str, reason: str) -> None:
    """Skip for a missing service, or fail when CI says every service must be there."""
    message = f"{service} is not available: {reason}"
    if REQUIRE_SERVICES:
        pytest.fail(f"{message} (TOOLHUB_REQUIRE_SERVICES=1)")
    pytest.skip(message)


def _accepts(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def postgres_url() -> str:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        url = DEFAULT_POSTGRES_URL
    if not _accepts(url):
        need("PostgreSQL", f"nothing accepts connections at {urlsplit(url).netloc}")
    return url


@pytest.fixture(scope="session")
def redis_url() -> str:
    """This test process's Redis database (tests/workers.py)."""
    url = redis_db(os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL, 0)
    if not _accepts(url):
        need("Redis", f"nothing accepts connections at {urlsplit(url).netloc}")
    return url


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if not Path(CHROMIUM).exists():
        need("Chromium", f"{CHROMIUM} is missing (apt-get install chromium)")
    return CHROMIUM


@pytest.fixture(scope="session")
def bubblewrap() -> None:
    """The bash sandbox can start here (bwrap installed, user namespaces allowed)."""
    from toolhub.tools import sandbox

    reason = sandbox.unavailable_reason()
    if reason is not None:
        need("bubblewrap", reason)


@pytest.fixture
def reachable_tmp() -> Iterator[Path]:
    """A scratch directory the bash sandbox's user can reach: bwrap resolves a workspace's
    path as that user, and pytest's own temporary root is private to whoever runs it."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="toolhub-test-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _namespace_members(namespace: str) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.readlink(entry / "ns" / "pid") == namespace:
                members.append(int(entry.name))
        except OSError:
            continue
    return members


async def namespace_survivors(namespace: str) -> list[int]:
    """Host pids of the processes left in the pid namespace ``namespace`` ("pid:[…]", as
    ``readlink /proc/self/ns/pid`` prints it) once the kernel had up to five seconds to
    tear it down: a killed box's members go, but not at the instant of the kill."""
    import asyncio

    assert namespace.startswith("pid:["), namespace
    for _ in range(50):
        if not (members := _namespace_members(namespace)):
            break
        await asyncio.sleep(0.1)
    return members


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def closed_port_url(scheme: str) -> str:
    """A URL on loopback where nothing listens: the port was just free and stays unbound."""
    return f"{scheme}://127.0.0.1:{free_port()}/0"


def app_env(var_dir: Path, **overrides: str) -> dict[str, str]:
    """The environment a toolhub process gets: this one, minus the test's own service URLs,
    with its local state (SQLite file, static files, demo password) kept in ``var_dir``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(
        {
            "DEBUG": "1",
            "PYTHONPATH": str(ROOT),
            "TOOLHUB_VAR_DIR": str(var_dir),
            # The product's settings with a cheap password hasher (tests/settings.py).
            "DJANGO_SETTINGS_MODULE": "tests.settings",
        }
    )
    # Derived data every process may share, as a deployment's do: the suite's processes
    # encode a tool text and rewrite the embedding model once, not once per var_dir.
    env.setdefault("TOOLHUB_EMBEDDING_CACHE", str(ROOT / "var" / "test-embeddings.sqlite3"))
    env.update(overrides)
    return env


def plain_tool(name: str, description: str, registry=None, **fields):
    """A tool taking no arguments that returns what it is given: registered in
    ``registry`` when one is named, else in none."""
    from toolhub.tools import function

    def body(**kwargs):
        return kwargs

    return function(
        body,
        name=name,
        description=description,
        parameters={"type": "object", "properties": {}},
        register_globally=registry is not None,
        registry=registry,
        **fields,
    )


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def asgi_get(
    app: Callable[..., Any], path: str, headers: list[tuple[bytes, bytes]] | None = None
) -> tuple[int, bytes]:
    """One GET through an ASGI application, in the messages daphne hands it once it has
    parsed the request: no HTTP client (the API bench times the application alone).
    Returns the status and the body."""
    import asyncio

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "https",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"localhost"), *(headers or [])],
        "client": ("127.0.0.1", 50000),
        "server": ("localhost", 443),
    }
    sent: list[dict[str, Any]] = []
    done = asyncio.Event()
    asked = False

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await done.wait()  # connected until the answer is out
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    try:
        await app(scope, receive, send)
    finally:
        done.set()
    return sent[0]["status"], b"".join(message.get("body", b"") for message in sent[1:])


@contextmanager
def daphne(
    env: dict[str, str],
    *,
    log: Path | None = None,
    started: list[subprocess.Popen] | None = None,
    port: int | None = None,
) -> Iterator[str]:
    """Serve toolhub.asgi with daphne, as ``bin/run`` does (``toolhub.serve``), on a free
    loopback port; yields the base URL.

    With ``log``, the server's output goes to that file (read it when a test fails); with
    ``started``, the server's process is appended to it (for a test that kills it); with
    ``port``, it listens there (a server restarted where its pages reconnect)."""
    port = port or free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolhub.serve",
            *("--bind", "127.0.0.1", "--port", str(port), "toolhub.asgi:application"),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w") if log else subprocess.PIPE,
        text=True,
    )
    if started is not None:
        started.append(process)
    try:
        deadline = time.monotonic() + 30
        while not _accepts(f"http://127.0.0.1:{port}"):
            if process.poll() is not None:
                output = log.read_text() if log else process.stderr.read()
                raise RuntimeError(f"daphne exited early:\n{output}")
            if time.monotonic() > deadline:
                raise RuntimeError("daphne did not start listening within 30 s")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def celery_worker(
    env: dict[str, str], *, log: Path, as_deployed: bool = False
) -> Iterator[subprocess.Popen]:
    """A real Celery worker (one prefork process) serving the tools queue; its output goes
    to ``log``. Ready once it says so; yields its main process; stopped with its whole
    process group. ``as_deployed`` runs it as ``bin/run`` does: both queues, two processes,
    with mingle and gossip (the quick default leaves those out)."""
    command = [sys.executable, "-m", "celery", "-A", "toolhub", "worker"]
    if as_deployed:
        command += ["-Q", "celery,tools", "-c", "2"]
    else:
        command += ["-Q", "tools", "-c", "1", "--without-mingle", "--without-gossip"]
    name = f"tools-{os.getpid()}-{time.monotonic_ns()}@%h"
    process = subprocess.Popen(
        [*command, "-n", name, "-l", "INFO"],
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while " ready." not in log.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Celery worker did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield process
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


@contextmanager
def started_together(*managers: AbstractContextManager[Any]) -> Iterator[list[Any]]:
    """Enter ``managers`` (daphne, celery_worker) each on a thread of its own, so processes
    that take seconds to start start side by side rather than one after the other; yields
    what each yielded, in order, and exits them in reverse order. If one fails to start,
    those that did are stopped and the failure raised."""
    with ExitStack() as stack:
        with ThreadPoolExecutor(max_workers=len(managers)) as pool:
            futures = [pool.submit(manager.__enter__) for manager in managers]
        entered: list[Any] = []
        failure: BaseException | None = None
        for manager, future in zip(managers, futures, strict=True):
            try:
                entered.append(future.result())
            except BaseException as exc:  # raised once the others are stopped
                failure = failure or exc
            else:
                stack.push(manager)
        if failure is not None:
            raise failure
        yield entered


@pytest.fixture
def serve() -> Callable[[dict[str, str]], object]:
    return daphne


@pytest.fixture
def password() -> str:
    return "correct horse battery staple"


@pytest.fixture
def owner(django_user_model, password):
    return django_user_model.objects.create_user(username="owner", password=password)


@pytest.fixture
def other_user(django_user_model, password):
    return django_user_model.objects.create_user(username="other", password=password)


@pytest.fixture
def staff(django_user_model, password):
    return django_user_model.objects.create_user(username="ops", password=password, is_staff=True)


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
