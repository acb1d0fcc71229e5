"""MCP servers: registering a server of 200 tools, what its tools cost, and the per-call
overhead of a no-op tool over stdio and over streamable HTTP.

The server is tests/mcp/server.py (the SDK's MCPServer) with ``--tools 200``. Prints:
- the time from ``reconcile`` to all 212 tools registered (process start, handshake, listing,
  schema checks, registration), the median of 3 connections, per transport;
- resident and catalog tokens of the resolved array with the server deferred (the
  default) and resident, exactly as a turn would count them;
- per-call time of ``noop_000`` through ``Tool.execute`` (validation, the manager's
  loop hop, the SDK, the server and back), p50 and p99 over 300 calls, next to the same
  call made directly on an SDK client in one loop: the difference is ours;
- the time of one relisting of a connected server (listing, checks, the registry's sync
  of an unchanged listing), the median of 20, and how soon a tool the server adds reaches
  the registry through its list_changed notification (the relist interval is 10 minutes);
- this process's resident memory per connected stdio server (20 servers of 12 tools: the
  client side, which a web process pays; the servers are processes of their own);
- with workspace roots over streamable HTTP, a new chat's first call (which opens the
  chat's own connection) and its next one, p50 over 20 chats;
- a call whose server asks the person for a form mid-call, answered at once by a scripted
  person, p50 over 100 calls (the form's round trip on 2026-07-28 and ours);
- npm's server-everything over stdio (a handshake-era server, whose questions name no
  call): 10 chats of 5 people at once, half asked a form, half a sampling request, each
  answered by its own person (``answered`` counts calls whose result carries their own
  person's answer), with the processes and memory the chats' own connections cost and how
  long after their last call they close (``chat_idle`` set to 2 s here, 300 s by default);
- the same server stopped (SIGSTOP): how soon it is found out and a new process serves it,
  and a 20 s operation sending progress, which must never be declared hung.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Run as a script, this file's folder heads sys.path and this file would shadow the SDK.
sys.path[:] = [str(ROOT), *(entry for entry in sys.path if Path(entry or ".").resolve() != HERE)]

from tests.mcp import (  # noqa: E402
    SERVER,
    alive,
    children,
    free_port,
    http_config,
    http_server,
    stdio_config,
)
from toolhub.tools import ToolContext, ToolRegistry, registry, resolve, token_cost  # noqa: E402
from toolhub.tools.mcp import McpManager  # noqa: E402

TOOLS = 200
CALLS = 300
SERVERS = 20
ERRLOG = open("/dev/null", "w")  # noqa: SIM115  (the server's own logging)


def connect(config, **knobs: float) -> tuple[McpManager, ToolRegistry, float]:
    reg = ToolRegistry()
    reg.register(registry.get("tool_search"))
    manager = McpManager(reg, errlog=ERRLOG, **knobs)
    started = time.perf_counter()
    manager.reconcile([config], wait=30)
    while manager.statuses()[config.name].state != "connected":
        if time.perf_counter() - started > 60:
            raise RuntimeError(f"{config.name} did not connect: {manager.statuses()}")
        time.sleep(0.001)
    return manager, reg, time.perf_counter() - started


def register_time(config) -> tuple[float, int]:
    times, count = [], 0
    for _ in range(3):
        manager, reg, elapsed = connect(config)
        times.append(elapsed)
        count = len(reg) - 1
        manager.stop()
    return statistics.median(times), count


def tokens(defer: bool) -> tuple[int, int]:
    manager, reg, _ = connect(stdio_config("bench", "--tools", str(TOOLS), defer=defer))
    try:
        cost = token_cost(resolve(reg, ctx=ToolContext(env={})))
        return cost.resident, cost.catalog
    finally:
        manager.stop()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def call_times(config) -> list[float]:
    manager, reg, _ = connect(config)
    tool = reg.get(f"{config.name}__noop_000")

    async def run() -> list[float]:
        for _ in range(20):  # warm-up
            await tool.execute({}, ToolContext(env={}))
        spent = []
        for _ in range(CALLS):
            started = time.perf_counter()
            result = await tool.execute({}, ToolContext(env={}))
            spent.append((time.perf_counter() - started) * 1000)
            assert result.content == "ok", result
        return spent

    try:
        return asyncio.run(run())
    finally:
        manager.stop()


def direct_times(target) -> list[float]:
    """The same call on a bare SDK client: the floor under ours."""
    from mcp import Client

    async def run() -> list[float]:
        async with Client(target, mode="auto") as client:
            for _ in range(20):
                await client.call_tool("noop_000", {})
            spent = []
            for _ in range(CALLS):
                started = time.perf_counter()
                await client.call_tool("noop_000", {})
                spent.append((time.perf_counter() - started) * 1000)
            return spent

    return asyncio.run(run())


def relist_times() -> tuple[float, float, int]:
    # Relisting every ten minutes: the grown tool can only come by the notification.
    config = stdio_config("bench", "--tools", str(TOOLS), "--lively")
    manager, reg, _ = connect(config, health_interval=600.0)
    connection = manager._connections["bench"]
    loop = manager._loop
    assert loop is not None
    try:
        spent = []
        for _ in range(20):
            started = time.perf_counter()
            future = asyncio.run_coroutine_threadsafe(connection._relist(connection.client), loop)
            future.result(30)
            spent.append(time.perf_counter() - started)
        grow = reg.get("bench__grow")
        started = time.perf_counter()
        asyncio.run(grow.execute({"name": "late"}, ToolContext(env={})))
        while reg.get("bench__grown_late") is None:
            if time.perf_counter() - started > 30:
                raise RuntimeError("the grown tool never arrived")
            time.sleep(0.001)
        return statistics.median(spent), time.perf_counter() - started, len(reg) - 2
    finally:
        manager.stop()


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def rss_per_server(servers: int) -> tuple[int, int]:
    reg = ToolRegistry()
    manager = McpManager(reg, errlog=ERRLOG)
    # One connection first: the SDK's imports and the loop thread are paid once.
    manager.reconcile([stdio_config("warm")], wait=30)
    while manager.statuses()["warm"].state != "connected":
        time.sleep(0.01)
    before = rss_kib()
    configs = [stdio_config("warm"), *(stdio_config(f"s{n}") for n in range(servers))]
    manager.reconcile(configs, wait=30)
    deadline = time.perf_counter() + 120
    while any(status.state != "connected" for status in manager.statuses().values()):
        if time.perf_counter() > deadline:
            raise RuntimeError(f"not all connected: {manager.statuses()}")
        time.sleep(0.05)
    grown, registered = rss_kib() - before, len(reg)
    manager.stop()
    return grown // servers, registered


def own_connection_times(port: int) -> tuple[float, float]:
    import tempfile

    manager, reg, _ = connect(http_config("bench", port, workspace_roots=True))
    tool = reg.get("bench__noop_000")
    firsts, seconds = [], []
    with tempfile.TemporaryDirectory() as root:

        async def run() -> None:
            for chat in range(20):
                ctx = ToolContext(env={}, session_id=f"c{chat}", workspace=Path(root) / str(chat))
                for times in (firsts, seconds):
                    started = time.perf_counter()
                    result = await tool.execute({}, ctx)
                    times.append((time.perf_counter() - started) * 1000)
                    assert result.content == "ok", result

        try:
            asyncio.run(run())
        finally:
            manager.stop()
    return statistics.median(firsts), statistics.median(seconds)


class _Person:
    async def elicit(self, form, *, withdrawn):
        from toolhub.tools.mcp.asks import ElicitAnswer

        return ElicitAnswer("accept", {"name": "A", "age": 1, "colour": "red"})


def ask_times() -> list[float]:
    from toolhub.tools.context import ToolServices

    manager, reg, _ = connect(stdio_config("bench", "--asking"))
    tool = reg.get("bench__sign_in_visitor")
    ctx = ToolContext(env={}, services=ToolServices(elicitor=_Person()))

    async def run() -> list[float]:
        spent = []
        for _ in range(100):
            started = time.perf_counter()
            result = await tool.execute({}, ctx)
            spent.append((time.perf_counter() - started) * 1000)
            assert result.content.startswith("welcome A"), result
        return spent

    try:
        return asyncio.run(run())
    finally:
        manager.stop()


EVERYTHING = ROOT / "tests/mcp/npm/node_modules/@modelcontextprotocol/server-everything"
EVERYTHING_JS = EVERYTHING / "dist/index.js"


def everything(**knobs: float):
    from toolhub.tools.mcp import McpServerConfig

    config = McpServerConfig(
        name="everything",
        transport="stdio",
        command="node",
        args=(str(EVERYTHING_JS), "stdio"),
        sampling=True,
    )
    return connect(config, **knobs)


class _Named:
    """A person who fills server-everything's form with their own name and answers its
    sampling requests in their own name."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def elicit(self, form, *, withdrawn):
        from toolhub.tools.mcp.asks import ElicitAnswer
        from toolhub.tools.mcp.forms import form_answer

        await asyncio.sleep(0.2)  # a person reads before answering
        posted = {"name": self.name, "email": "someone@example.org", "integer": "42"}
        return ElicitAnswer("accept", form_answer(form.fields, posted))

    async def sample(self, ask, *, withdrawn):
        from toolhub.tools.mcp.asks import Sampled

        await asyncio.sleep(0.2)
        return Sampled(text=f"written for {self.name}", model="bench")


def rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def asks_stdio(chats: int = 10, people: int = 5) -> None:
    from toolhub.tools.context import ToolServices

    manager, reg, _ = everything(chat_idle=2.0)
    form = reg.get("everything__trigger-elicitation-request")
    sample = reg.get("everything__trigger-sampling-request")
    named = [_Named(f"person {n % people} in chat {n}") for n in range(chats)]

    async def all_at_once():
        calls = []
        for n, person in enumerate(named):
            ctx = ToolContext(
                env={},
                user_id=f"p{n % people}",
                session_id=f"chat-{n}",
                services=ToolServices(elicitor=person, sampler=person),
            )
            if n % 2:
                calls.append(sample.execute({"prompt": "hi", "maxTokens": 20}, ctx))
            else:
                calls.append(form.execute({}, ctx))
        return await asyncio.gather(*calls)

    script = str(EVERYTHING_JS)
    try:
        started = time.perf_counter()
        results = asyncio.run(all_at_once())
        took = time.perf_counter() - started
        ended = time.perf_counter()
        shared, *own = children(script)
        processes, memory, alone = len(own), rss_mib(own), rss_mib([shared])
        while children(script) != [shared]:
            if time.perf_counter() - ended > 60:
                raise RuntimeError("the chats' connections never closed")
            time.sleep(0.01)
        closed = time.perf_counter() - ended
    finally:
        manager.stop()
    answered = sum(
        1
        for person, result in zip(named, results, strict=True)
        if not result.is_error
        and (
            f"- Name: {person.name}" in result.content
            or f"written for {person.name}" in result.content
        )
    )
    refused = sum(1 for result in results if "refused" in result.content)
    print(
        f"mcp asks stdio chats={chats} people={people} answered={answered} refused={refused} "
        f"all_answered_in={took * 1000:.0f}ms"
    )
    print(
        f"mcp asks stdio own_processes={processes} their_rss={memory:.0f}MiB "
        f"per_process={memory / max(processes, 1):.0f}MiB shared_process_rss={alone:.0f}MiB"
    )
    print(f"mcp asks stdio chat_idle=2s closed_after_last_call={closed * 1000:.0f}ms")


def hang_stdio() -> None:
    import os
    import signal
    import threading

    manager, reg, _ = everything()
    script = str(EVERYTHING_JS)
    long = reg.get("everything__trigger-long-running-operation")
    try:
        [stopped] = children(script)
        # A call under way as the server stops: it must fail with the reason, at once.
        failed: list[float] = []
        call = threading.Thread(
            target=lambda: (
                asyncio.run(long.execute({"duration": 60, "steps": 60}, ToolContext(env={}))),
                failed.append(time.perf_counter()),
            )
        )
        call.start()
        time.sleep(1.5)
        os.kill(stopped, signal.SIGSTOP)
        started = time.perf_counter()
        state = lambda: manager.statuses()["everything"].state  # noqa: E731
        while state() == "connected":
            time.sleep(0.005)
        detected = time.perf_counter() - started
        while state() != "connected":
            if time.perf_counter() - started > 60:
                raise RuntimeError("never replaced")
            time.sleep(0.005)
        replaced = time.perf_counter() - started
        while alive(stopped):
            time.sleep(0.01)
        killed = time.perf_counter() - started
        call.join()
        print(
            f"mcp hang detected_ms={detected * 1000:.0f} replaced_ms={replaced * 1000:.0f} "
            f"call_failed_ms={(failed[0] - started) * 1000:.0f} "
            f"stopped_process_killed_ms={killed * 1000:.0f}"
        )
        states: list[str] = []
        done = False

        def watch() -> None:
            while not done:
                states.append(state())
                time.sleep(0.02)

        watcher = threading.Thread(target=watch)
        watcher.start()
        result = asyncio.run(long.execute({"duration": 20, "steps": 20}, ToolContext(env={})))
        done = True
        watcher.join()
        hung = sum(
            1
            for before, after in itertools.pairwise(states)
            if before == "connected" and after != "connected"
        )
        print(
            f"mcp slow stdio duration=20s completed={int(not result.is_error)} declared_hung={hung}"
        )
    finally:
        manager.stop()


def main() -> None:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    args = ("--tools", str(TOOLS))
    seconds, count = register_time(stdio_config("bench", *args))
    print(f"mcp register stdio tools={count} connect_to_registered_p50={seconds * 1000:.0f}ms")
    port = free_port()
    with http_server(port, *args):
        seconds, count = register_time(http_config("bench", port))
        print(f"mcp register http tools={count} connect_to_registered_p50={seconds * 1000:.0f}ms")

    for defer in (True, False):
        resident, catalog = tokens(defer)
        print(f"mcp tokens defer={'on' if defer else 'off'} resident={resident} catalog={catalog}")

    stdio = call_times(stdio_config("bench", *args))
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), *args])
    bare = direct_times(stdio_client(params, errlog=ERRLOG))
    print(
        f"mcp call stdio noop n={CALLS} p50={statistics.median(stdio):.2f}ms "
        f"p99={percentile(stdio, 0.99):.2f}ms sdk_only_p50={statistics.median(bare):.2f}ms "
        f"ours_p50={statistics.median(stdio) - statistics.median(bare):.2f}ms"
    )
    port = free_port()
    with http_server(port, *args):
        http = call_times(http_config("bench", port))
        bare = direct_times(f"http://127.0.0.1:{port}/mcp")
    print(
        f"mcp call http noop n={CALLS} p50={statistics.median(http):.2f}ms "
        f"p99={percentile(http, 0.99):.2f}ms sdk_only_p50={statistics.median(bare):.2f}ms "
        f"ours_p50={statistics.median(http) - statistics.median(bare):.2f}ms"
    )
    relist, changed, listed = relist_times()
    print(
        f"mcp relist stdio tools={listed} p50={relist * 1000:.1f}ms "
        f"list_changed_to_registered={changed * 1000:.0f}ms"
    )
    per_server, registered = rss_per_server(SERVERS)
    print(f"mcp rss stdio servers={SERVERS} tools={registered} per_server={per_server}KiB")
    port = free_port()
    with http_server(port, *args):
        first, later = own_connection_times(port)
    print(f"mcp roots http chats=20 first_call_p50={first:.1f}ms next_call_p50={later:.2f}ms")
    asked = ask_times()
    print(
        f"mcp elicit stdio n={len(asked)} p50={statistics.median(asked):.2f}ms "
        f"p99={percentile(asked, 0.99):.2f}ms"
    )
    if not EVERYTHING_JS.exists():
        print("mcp asks stdio skipped: run npm ci --prefix tests/mcp/npm")
        return
    asks_stdio()
    hang_stdio()


if __name__ == "__main__":
    main()
