"""Whose call a server's question is, attacked as an adversary would: many chats of several
people asking at once, Stops at random moments, a server killed mid-question, a server
that stops answering, and one that is slow but talking.

The adversary is the hand-written handshake-era server (tests/mcp/raw_server.py
``--asks``): its questions name no call, and it answers *every* call waiting in its
process with whatever one client replied. Over one shared connection, one person's answer
would end every chat's call with their name in it; through a connection per chat's call
(docs/mcp.md, "Who is asked") each call gets its own person's answer. The published
server-everything is driven the same way over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import threading
import time

import pytest

from tests.integration.tools.test_mcp_asks import in_chat
from tests.integration.tools.test_mcp_client import connect, make_manager, raw_config
from tests.integration.tools.test_mcp_published import EVERYTHING
from tests.mcp import (
    alive,
    children,
    free_port,
    http_config,
    http_server,
    node_http_server,
    wait_for,
)
from toolhub.tools import ToolContext, ToolRegistry
from toolhub.tools.context import CancelToken, ToolServices
from toolhub.tools.mcp import McpServerConfig
from toolhub.tools.mcp.asks import ElicitAnswer, ElicitForm, Sampled, SamplingAsk
from toolhub.tools.mcp.forms import form_answer

pytestmark = pytest.mark.processes


@pytest.fixture
def reg() -> ToolRegistry:
    return ToolRegistry()


def chat_of(person: str, chat: str, answerer, **fields) -> ToolContext:
    return ToolContext(
        env={},
        user_id=person,
        session_id=chat,
        services=ToolServices(elicitor=answerer, sampler=answerer),
        **fields,
    )


class Named:
    """A person who answers every form with their own name, after ``delay``, and notes
    each form and whether it was withdrawn before they answered."""

    def __init__(self, name: str, delay: float = 0.0) -> None:
        self.name = name
        self.delay = delay
        self.forms: list[ElicitForm] = []
        self.withdrawn: list[CancelToken] = []
        self.asks: list[SamplingAsk] = []

    async def elicit(self, form: ElicitForm, *, withdrawn: CancelToken) -> ElicitAnswer:
        self.forms.append(form)
        self.withdrawn.append(withdrawn)
        await asyncio.sleep(self.delay)
        if form.fields and "email" in {field.name for field in form.fields}:
            return ElicitAnswer("accept", form_answer(form.fields, self._everything()))
        return ElicitAnswer("accept", {"name": self.name})

    async def sample(self, ask: SamplingAsk, *, withdrawn: CancelToken) -> Sampled:
        self.asks.append(ask)
        await asyncio.sleep(self.delay)
        return Sampled(text=f"written for {self.name}", model="toolhub-test")

    def _everything(self) -> dict:
        """server-everything's form, filled as a browser would post it."""
        return {
            "name": self.name,
            "check": "true",
            "email": "someone@example.org",
            "birthdate": "1815-12-10",
            "integer": "42",
            "untitledSingleSelectEnum": "Rachel",
            "titledMultipleSelectEnum": ["fish-1"],
        }


def test_ten_chats_of_five_people_asking_a_careless_server_at_once_each_get_their_own_answer(
    reg, tmp_path
):
    manager = make_manager(reg, tmp_path)
    try:
        connect(manager, raw_config("--asks"))
        ask = reg.get("raw__ask")
        people = [Named(f"chat-{n}-of-person-{n % 5}", delay=0.3) for n in range(10)]

        async def all_at_once():
            return await asyncio.gather(
                *(
                    ask.execute({}, chat_of(f"person-{n % 5}", f"chat-{n}", person))
                    for n, person in enumerate(people)
                )
            )

        results = asyncio.run(all_at_once())
    finally:
        manager.stop()

    assert [result.content for result in results] == [
        f"the client said: accept ({person.name})" for person in people
    ]
    assert [len(person.forms) for person in people] == [1] * 10


def test_two_calls_of_one_chat_at_once_each_get_their_own_connection_and_answer(reg, tmp_path):
    manager = make_manager(reg, tmp_path)
    try:
        connect(manager, raw_config("--asks"))
        ask = reg.get("raw__ask")
        first, second = Named("first", delay=0.3), Named("second", delay=0.3)

        async def both():
            return await asyncio.gather(
                ask.execute({}, chat_of("ada", "chat-a", first)),
                ask.execute({}, chat_of("ada", "chat-a", second)),
            )

        one, two = asyncio.run(both())
        connections = manager.chats("raw")
    finally:
        manager.stop()

    assert one.content == "the client said: accept (first)"
    assert two.content == "the client said: accept (second)"
    assert connections == 2


def test_a_chats_calls_keep_their_connection_so_what_the_server_keeps_stays_the_chats(
    reg, tmp_path
):
    manager = make_manager(reg, tmp_path)
    try:
        connect(manager, raw_config("--asks"))
        pid = reg.get("raw__pid")

        def pid_in(chat: str) -> str:
            return asyncio.run(pid.execute({}, chat_of("ada", chat, Named("ada")))).content

        first, again, other = pid_in("chat-a"), pid_in("chat-a"), pid_in("chat-b")
    finally:
        manager.stop()

    assert first == again
    assert other != first


def test_a_stop_in_one_chat_withdraws_its_own_form_and_never_touches_another_chats(reg, tmp_path):
    manager = make_manager(reg, tmp_path)
    try:
        connect(manager, raw_config("--asks"))
        ask = reg.get("raw__ask")
        stopped, other, later = Named("stopped", delay=30), Named("other", 0.5), Named("later")

        async def stop_one():
            doomed = asyncio.ensure_future(ask.execute({}, chat_of("bob", "chat-b", stopped)))
            kept = asyncio.ensure_future(ask.execute({}, chat_of("ada", "chat-a", other)))
            await asyncio.sleep(0.3)
            doomed.cancel()  # the person pressed Stop while the form was open
            with pytest.raises(asyncio.CancelledError):
                await doomed
            again = await ask.execute({}, chat_of("bob", "chat-b", later))
            return await kept, again

        kept, again = asyncio.run(stop_one())
    finally:
        manager.stop()

    assert kept.content == "the client said: accept (other)"
    assert again.content == "the client said: accept (later)"
    assert [token.cancelled for token in stopped.withdrawn] == [True]
    assert len(other.forms) == len(later.forms) == 1


def test_stops_at_random_moments_across_many_chats_never_move_a_question_to_another_chat(
    reg, tmp_path
):
    """Eight chats of four people, three rounds, each call stopped at a random moment or
    left to finish: a call that finishes has its own person's answer, whatever was stopped
    around it, and nobody is shown more forms than their own calls asked."""
    rounds, chats = 3, 8
    shuffle = random.Random(41)
    manager = make_manager(reg, tmp_path, max_chats=6)
    try:
        connect(manager, raw_config("--asks"))
        ask = reg.get("raw__ask")
        people = {n: Named(f"chat-{n}", delay=shuffle.uniform(0.0, 0.4)) for n in range(chats)}

        async def one(n: int, stop_after: float | None):
            call = asyncio.ensure_future(ask.execute({}, chat_of(f"p{n % 4}", f"c{n}", people[n])))
            if stop_after is None:
                return await call
            await asyncio.sleep(stop_after)
            call.cancel()
            try:
                return await call
            except asyncio.CancelledError:
                return None

        async def all_rounds():
            outcomes = []
            for _ in range(rounds):
                plan = [
                    (n, shuffle.choice([None, shuffle.uniform(0.0, 0.5)])) for n in range(chats)
                ]
                results = await asyncio.gather(*(one(n, stop) for n, stop in plan))
                outcomes += list(zip(plan, results, strict=True))
            return outcomes

        outcomes = asyncio.run(all_rounds())
    finally:
        manager.stop()

    finished = [(n, result) for (n, _), result in outcomes if result is not None]
    assert len(finished) >= rounds * chats // 3
    for n, result in finished:
        assert result.content == f"the client said: accept (chat-{n})", (n, result.content)
    calls = {n: sum(1 for (m, _), _ in outcomes if m == n) for n in range(chats)}
    assert all(len(people[n].forms) <= calls[n] for n in range(chats))


def test_a_call_whose_server_is_killed_mid_question_fails_saying_so_and_the_chat_goes_on(
    reg, tmp_path
):
    manager = make_manager(reg, tmp_path)
    try:
        connect(manager, raw_config("--asks"))
        ask, pid = reg.get("raw__ask"), reg.get("raw__pid")
        waiting, other, after = Named("waiting", delay=30), Named("other", 1.0), Named("after")

        async def kill_mid_question():
            mine = int((await pid.execute({}, chat_of("bob", "chat-b", waiting))).content)
            asked = asyncio.ensure_future(ask.execute({}, chat_of("bob", "chat-b", waiting)))
            kept = asyncio.ensure_future(ask.execute({}, chat_of("ada", "chat-a", other)))
            while not waiting.forms:
                await asyncio.sleep(0.02)
            os.kill(mine, signal.SIGKILL)
            failed = await asyncio.wait_for(asked, 20)
            again = await ask.execute({}, chat_of("bob", "chat-b", after))
            return failed, await kept, again

        failed, kept, again = asyncio.run(kill_mid_question())
    finally:
        manager.stop()

    assert failed.is_error
    assert failed.content.startswith("raw__ask: MCP server raw")
    assert [token.cancelled for token in waiting.withdrawn] == [True]
    assert kept.content == "the client said: accept (other)"
    assert again.content == "the client said: accept (after)"


def test_at_its_connection_limit_a_call_waits_for_a_free_one_saying_so_never_refused(reg, tmp_path):
    manager = make_manager(reg, tmp_path, max_chats=2)
    lines: dict[str, list[str]] = {}
    try:
        connect(manager, raw_config("--asks"))
        ask = reg.get("raw__ask")
        people = [Named(f"chat-{n}", delay=0.8) for n in range(5)]

        def ctx(n: int) -> ToolContext:
            noted = lines.setdefault(f"chat-{n}", [])
            return chat_of("ada", f"chat-{n}", people[n], on_update=lambda u: noted.append(u.chunk))

        async def five_on_two():
            return await asyncio.gather(*(ask.execute({}, ctx(n)) for n in range(5)))

        results = asyncio.run(five_on_two())
        most = manager.chats("raw")
    finally:
        manager.stop()

    assert [result.content for result in results] == [
        f"the client said: accept (chat-{n})" for n in range(5)
    ]
    waited = [chat for chat, said in lines.items() if any("Waiting for a free" in s for s in said)]
    assert len(waited) >= 3
    assert "it has as many open as it may (2), each busy with another call" in lines[waited[0]][0]
    assert most <= 2


def test_a_late_question_for_a_call_given_up_on_reaches_nobody_and_other_chats_are_asked(
    reg, tmp_path
):
    """A handshake-era server may go on working for a call toolhub gave up on (a timeout)
    and ask for it later: that call's connection is closed once it is given up on, so the
    question reaches nobody, and another chat's call is asked as if nothing happened."""
    manager = make_manager(reg, tmp_path)
    try:
        connect(manager, raw_config("--asks", timeout=0.5))
        given_up, asked = Named("bob"), Named("ada")

        async def given_up_then_asked():
            held = await reg.get("raw__hold").execute({}, chat_of("bob", "chat-bob", given_up))
            # The given-up call's connection closes as its end reaches the manager's loop.
            gone = await asyncio.to_thread(wait_for, lambda: manager.chats("raw") == 0, 10)
            answer = await reg.get("raw__ask").execute({}, chat_of("ada", "chat-ada", asked))
            return held, gone, answer

        held, gone, answer = asyncio.run(given_up_then_asked())
    finally:
        manager.stop()

    assert "timed out" in held.content
    assert gone
    assert given_up.forms == []
    assert answer.content == "the client said: accept (ada)"


def test_a_server_that_is_slow_but_talking_is_never_declared_hung(reg, tmp_path):
    """``busy`` reads nothing for 3 s, so no ping is answered, while it sends progress: a
    probe that times out while the server speaks is a busy server."""
    manager = make_manager(reg, tmp_path, probe_interval=0.2, probe_timeout=0.5)
    states: list[str] = []
    try:
        connect(manager, raw_config("--asks", timeout=10))
        done = threading.Event()

        def watch():
            while not done.is_set():
                states.append(manager.statuses()["raw"].state)
                time.sleep(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            result = asyncio.run(reg.get("raw__busy").execute({"seconds": 3}, ToolContext(env={})))
        finally:
            done.set()
            watcher.join()
    finally:
        manager.stop()

    assert result.content == "worked 3 s"
    assert set(states) == {"connected"}


def test_a_stopped_stdio_server_fails_its_calls_saying_why_and_a_new_process_replaces_it(
    reg, tmp_path
):
    """SIGSTOP: the process lives but says nothing. With the stdio probe's own pace (a
    ping a second, 1.5 s to answer) it is found out, the call waiting on it ends with the
    reason, and a new process serves the next call; the stopped one is killed."""
    manager = make_manager(reg, tmp_path, probe_interval=None, probe_timeout=None)
    try:
        connect(manager, raw_config("--asks", timeout=60))
        pid = reg.get("raw__pid")
        before = int(asyncio.run(pid.execute({}, ToolContext(env={}))).content)

        async def stop_it_under_a_call():
            held = asyncio.ensure_future(reg.get("raw__hold").execute({}, ToolContext(env={})))
            await asyncio.sleep(0.3)
            os.kill(before, signal.SIGSTOP)
            return await asyncio.wait_for(held, 30)

        held = asyncio.run(stop_it_under_a_call())
        wait_for(lambda: manager.statuses()["raw"].state == "connected", 30, "a new process")
        after = int(asyncio.run(pid.execute({}, ToolContext(env={}))).content)
        wait_for(lambda: not alive(before), 30, "the stopped process to be killed")
    finally:
        manager.stop()

    assert held.is_error
    assert "stopped answering: no reply to a ping within 1.5 s" in held.content
    assert after != before


def everything_config(name: str, **fields) -> McpServerConfig:
    return McpServerConfig(
        name=name,
        transport="stdio",
        command="node",
        args=(str(EVERYTHING), "stdio"),
        sampling=True,
        **fields,
    )


@pytest.fixture(params=["stdio", "http"])
def everything(request, reg, tmp_path):
    """server-everything, published, with sampling on, over either transport."""
    if not EVERYTHING.exists():
        pytest.skip("run: npm ci --prefix tests/mcp/npm")
    manager = make_manager(reg, tmp_path, probe_interval=None, probe_timeout=None)
    try:
        if request.param == "stdio":
            connect(manager, everything_config("everything"))
            yield manager
            return
        port = free_port()
        with node_http_server(EVERYTHING, port, "streamableHttp"):
            config = McpServerConfig(
                name="everything",
                transport="streamable_http",
                url=f"http://127.0.0.1:{port}/mcp",
                allow_private=True,
                sampling=True,
            )
            connect(manager, config)
            yield manager
    finally:
        manager.stop()


def test_server_everything_asks_ten_chats_of_five_people_forms_and_sampling_each_their_own(
    everything, reg
):
    form = reg.get("everything__trigger-elicitation-request")
    sample = reg.get("everything__trigger-sampling-request")
    people = [Named(f"Person {n % 5} in chat {n}", delay=0.2) for n in range(10)]

    async def all_at_once():
        calls = []
        for n, person in enumerate(people):
            ctx = chat_of(f"p{n % 5}", f"chat-{n}", person)
            if n % 2:
                calls.append(sample.execute({"prompt": "hi", "maxTokens": 20}, ctx))
            else:
                calls.append(form.execute({}, ctx))
        return await asyncio.gather(*calls)

    results = asyncio.run(all_at_once())

    for n, (person, result) in enumerate(zip(people, results, strict=True)):
        assert not result.is_error, result.content
        if n % 2:
            assert f"written for {person.name}" in result.content
            assert len(person.asks) == 1
        else:
            assert f"- Name: {person.name}" in result.content
            assert len(person.forms) == 1
    if everything.statuses()["everything"].state == "connected":
        # Over stdio each chat had its own process; over HTTP one connection served all.
        assert everything.chats("everything") in (0, 10)


def test_server_everything_a_stop_mid_operation_leaves_another_chats_form_alone(everything, reg):
    """The measurement that began issue 41: a Stop in one chat during a long operation,
    then another chat's form, on the same server: asked and answered."""
    long = reg.get("everything__trigger-long-running-operation")
    form = reg.get("everything__trigger-elicitation-request")
    mine = Named("Ada")

    async def stop_then_ask():
        running = asyncio.ensure_future(
            long.execute({"duration": 20, "steps": 20}, chat_of("bob", "chat-b", Named("Bob")))
        )
        await asyncio.sleep(1.0)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        return await form.execute({}, chat_of("ada", "chat-a", mine))

    answered = asyncio.run(stop_then_ask())

    assert not answered.is_error, answered.content
    assert "- Name: Ada" in answered.content
    assert len(mine.forms) == 1


def test_server_everythings_idle_chat_processes_close_and_are_counted(reg, tmp_path):
    if not EVERYTHING.exists():
        pytest.skip("run: npm ci --prefix tests/mcp/npm")
    manager = make_manager(reg, tmp_path, chat_idle=0.5)
    try:
        connect(manager, everything_config("everything"))
        echo = reg.get("everything__echo")

        async def three_chats():
            return await asyncio.gather(
                *(echo.execute({"message": "hi"}, in_chat(f"c{n}", tmp_path)) for n in range(3))
            )

        results = asyncio.run(three_chats())
        opened = len(children(str(EVERYTHING)))
        wait_for(lambda: manager.chats("everything") == 0, 20, "the idle connections to close")
        wait_for(lambda: len(children(str(EVERYTHING))) == 1, 20, "their processes to end")
    finally:
        manager.stop()

    assert [result.content for result in results] == ["Echo: hi"] * 3
    assert opened == 4  # the server's own, listing, and one per chat


def test_a_hung_server_whose_thread_still_writes_logs_and_garbage_is_found_out(reg, tmp_path):
    """Only an answer or progress on a request shows the server's work goes on: log lines
    and lines that are not JSON-RPC, which a stray thread can still write, do not. So the
    stuck call ends at its own idle timeout, and with no call left to excuse it the next
    missed probe finds the server hung."""
    manager = make_manager(reg, tmp_path, probe_interval=0.2, probe_timeout=0.5)
    try:
        connect(manager, raw_config("--asks", timeout=2))
        pid = reg.get("raw__pid")

        def serving() -> str:
            return asyncio.run(pid.execute({}, ToolContext(env={}))).content

        before = serving()
        stuck = asyncio.run(
            asyncio.wait_for(reg.get("raw__stick").execute({}, ToolContext(env={})), 30)
        )
        wait_for(lambda: serving() not in (before, "") and serving().isdigit(), 15, "a new one")
        after = serving()
    finally:
        manager.stop()

    assert "timed out after 2 s without progress" in stuck.content
    assert after.isdigit()
    assert after != before


def test_a_call_stopped_while_its_connection_opens_leaves_room_for_a_waiting_chat(reg, tmp_path):
    """At a bound of one: chat a's call is stopped while its connection still opens; once
    it has opened, idle, chat b's waiting call takes the room at once, long before the idle
    connection would close on its own (``chat_idle``) or b's tool would time out."""
    manager = make_manager(reg, tmp_path, max_chats=1, chat_idle=300)
    try:
        connect(manager, raw_config("--asks", timeout=15))
        pid = reg.get("raw__pid")

        async def stopped_while_opening_then_another():
            doomed = asyncio.ensure_future(pid.execute({}, chat_of("a", "chat-a", Named("a"))))
            # Stopped as soon as its connection exists: a process takes far longer to open.
            while not manager.chats("raw"):
                await asyncio.sleep(0.002)
            doomed.cancel()
            with pytest.raises(asyncio.CancelledError):
                await doomed
            return await pid.execute({}, chat_of("b", "chat-b", Named("b")))

        answered = asyncio.run(stopped_while_opening_then_another())
    finally:
        manager.stop()

    assert not answered.is_error, answered.content
    assert answered.content.isdigit()


def test_stopping_the_manager_while_a_server_still_starts_leaves_no_process(reg, tmp_path):
    marker = "toolhub-test-never-speaks"
    manager = make_manager(reg, tmp_path)
    never = McpServerConfig(
        name="mute",
        transport="stdio",
        command=sys.executable,
        args=("-c", f"import time; time.sleep(1000)  # {marker}"),
    )
    manager.reconcile([never], wait=10)
    started = wait_for(lambda: children(marker), 10, "the server to start")
    manager.stop()

    assert started
    assert not [pid for pid in started if alive(pid)]


def test_processes_still_stopping_count_against_the_bound(reg, tmp_path):
    """A server that ignores SIGTERM and outlives its input takes seconds to kill. Calls
    stopped again and again must not pile up processes past the bound while the earlier
    ones are still being stopped."""
    manager = make_manager(reg, tmp_path, max_chats=2)
    peak = 0
    done = threading.Event()
    raw = raw_config("--asks", "--stubborn", timeout=60)

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, len([pid for pid in children("raw_server.py") if alive(pid)]))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    try:
        connect(manager, raw)
        watcher.start()
        hold = reg.get("raw__hold")

        async def stopped(chat: str) -> None:
            call = asyncio.ensure_future(hold.execute({}, chat_of("a", chat, Named("a"))))
            await asyncio.sleep(0.6)
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call

        async def rounds() -> None:
            for _ in range(2):
                await asyncio.gather(stopped("chat-1"), stopped("chat-2"), stopped("chat-3"))

        asyncio.run(rounds())
    finally:
        manager.stop()
        done.set()
        if watcher.is_alive():
            watcher.join()

    assert 2 <= peak <= 3  # the server's own process and at most two of the chats'


def test_a_server_blocked_by_a_calls_work_is_not_declared_hung_while_a_stopped_one_is(
    reg, tmp_path
):
    """Many servers take one request at a time: ``block`` holds the raw server 3 s with no
    progress and no ping answered. While a call waits on it and its process runs, that is
    work, bounded by the call's own timeouts; a process that is stopped is hung."""
    manager = make_manager(reg, tmp_path, probe_interval=0.2, probe_timeout=0.5)
    try:
        connect(manager, raw_config("--asks", timeout=30))
        block = reg.get("raw__block")

        async def in_a_chat_and_in_none():
            return await asyncio.gather(
                block.execute({"seconds": 3}, chat_of("ada", "chat-a", Named("ada"))),
                block.execute({"seconds": 3}, ToolContext(env={})),
            )

        chat, shared = asyncio.run(in_a_chat_and_in_none())
        state = manager.statuses()["raw"].state
    finally:
        manager.stop()

    assert chat.content == shared.content == "worked 3 s"
    assert state == "connected"


def test_a_shared_connection_just_opened_is_not_closed_under_its_call_to_make_room(reg, tmp_path):
    """At a bound of one, over streamable HTTP (a chat's workspace connection, shared by
    its calls): chat b's call, waiting for room, must not take chat a's connection as idle
    in the moment between its opening and a's call being sent on it."""
    port = free_port()
    manager = make_manager(reg, tmp_path, max_chats=1)
    try:
        with http_server(port, "--asking", log=tmp_path / "server.log"):
            connect(manager, http_config("ask", port, workspace_roots=True))
            roots = reg.get("ask__show_roots")

            async def both():
                first = asyncio.ensure_future(roots.execute({}, in_chat("a", tmp_path)))
                await asyncio.sleep(0.02)
                second = asyncio.ensure_future(roots.execute({}, in_chat("b", tmp_path)))
                return await first, await second

            first, second = asyncio.run(both())
    finally:
        manager.stop()

    assert first.content == (tmp_path / "a").as_uri()
    assert second.content == (tmp_path / "b").as_uri()


def test_a_changed_credential_never_takes_a_connection_past_the_bound_nor_leaks_it(reg, tmp_path):
    """Ada's call holds her connection when her credential changes: her next call waits
    for it (it still counts against the bound of one) and goes with the new credential
    once the old call has ended; nothing outlives the manager."""

    class Vault:
        token = "t-1"

        async def get(self, *, server: str, user_id: str) -> str | None:
            return self.token

    vault = Vault()
    manager = make_manager(reg, tmp_path, max_chats=1)
    peak = 0
    try:
        # The later call's own timeout runs while it waits for the held one's connection:
        # started halfway through the held call's 3 s, it keeps 1.5 s to start a process
        # and answer once that call times out (0.5 s of slack failed on a loaded runner).
        connect(manager, raw_config("--asks", timeout=3.0, user_credential="PERSON_TOKEN"))

        def ada() -> ToolContext:
            return ToolContext(
                env={},
                user_id="ada",
                session_id="chat-a",
                services=ToolServices(mcp_credentials=vault, elicitor=Named("ada")),
            )

        async def changed_while_held():
            nonlocal peak
            held = asyncio.ensure_future(reg.get("raw__hold").execute({}, ada()))
            await asyncio.sleep(1.5)
            vault.token = "t-2"
            later = asyncio.ensure_future(reg.get("raw__pid").execute({}, ada()))
            while not later.done():
                peak = max(peak, len([pid for pid in children("raw_server.py") if alive(pid)]))
                await asyncio.sleep(0.02)
            return await held, await later

        held, later = asyncio.run(changed_while_held())
        started = children("raw_server.py")
    finally:
        manager.stop()

    assert "timed out" in held.content
    assert later.content.isdigit(), later.content
    assert peak <= 2  # the server's own process and one of ada's
    assert not [pid for pid in started if alive(pid)]
