"""What an MCP server asks mid-call (a form, a completion, its roots), through a real SDK
server (``tests/mcp/server.py --asking``) over stdio and streamable HTTP, and through
``McpManager``: each question reaches the person whose call caused it, or is refused with
the reason. The person here is a scripted ``Elicitor``/``Sampler``; the chat's own, which
draws the form and asks the model, is tested through turns in
tests/integration/agent_app/test_mcp_asks_chat.py."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from tests.integration.tools.test_mcp_client import connect, make_manager, raw_config
from tests.mcp import free_port, http_config, http_server, stdio_config, wait_for
from toolhub.tools import ToolContext, ToolRegistry
from toolhub.tools.context import ToolServices
from toolhub.tools.mcp import McpServerConfig
from toolhub.tools.mcp.asks import AskRefused, ElicitAnswer, ElicitForm, Sampled, SamplingAsk

pytestmark = pytest.mark.processes


class Person:
    """Answers forms as scripted, and notes every form and sampling request it saw."""

    def __init__(self, answer: ElicitAnswer, *, delay: float = 0.0) -> None:
        self.answer = answer
        self.delay = delay
        self.forms: list[ElicitForm] = []
        self.asks: list[SamplingAsk] = []
        self.loops: set[int] = set()

    async def elicit(self, form: ElicitForm, *, withdrawn=None) -> ElicitAnswer:
        self.forms.append(form)
        self.loops.add(threading.get_ident())
        await asyncio.sleep(self.delay)
        return self.answer

    async def sample(self, ask: SamplingAsk, *, withdrawn=None) -> Sampled:
        self.asks.append(ask)
        return Sampled(text="A short summary.", model="test-model")


class Refuser:
    async def sample(self, ask: SamplingAsk, *, withdrawn=None) -> Sampled:
        raise AskRefused("the person denied it")


@pytest.fixture
def reg() -> ToolRegistry:
    return ToolRegistry()


@pytest.fixture
def manager(reg: ToolRegistry, tmp_path: Path):
    manager = make_manager(reg, tmp_path)
    yield manager
    manager.stop()


@pytest.fixture(params=["stdio", "http"])
def asking(request, manager, reg, tmp_path):
    """A connected ``--asking`` server whose config a test may change (``reconnect``)."""

    def make(**fields) -> McpServerConfig:
        if request.param == "stdio":
            return stdio_config("ask", "--asking", **fields)
        return http_config("ask", port, **fields)

    def reconnect(**fields) -> None:
        connect(manager, make(**fields))

    if request.param == "stdio":
        reconnect()
        yield reconnect
        return
    port = free_port()
    with http_server(port, "--asking", log=tmp_path / "server.log"):
        reconnect()
        yield reconnect


def call(reg: ToolRegistry, name: str, arguments: dict, **services):
    ctx = ToolContext(env={}, services=ToolServices(**services))
    return asyncio.run(reg.get(name).execute(arguments, ctx))


VISITOR = {"name": "Ada", "age": 36, "colour": "green", "newsletter": True}


def test_a_servers_form_reaches_the_person_checked_and_their_answer_goes_back(asking, reg):
    person = Person(ElicitAnswer("accept", VISITOR))

    result = call(reg, "ask__sign_in_visitor", {}, elicitor=person)

    assert result.content == "welcome Ada, 36, who likes green, with newsletter"
    [form] = person.forms
    assert form.server == "ask"
    assert form.message == "Who is visiting? (asked by toolhub-test)"
    fields = {field.name: field for field in form.fields}
    assert fields["age"].kind == "integer"
    assert (fields["age"].minimum, fields["age"].maximum) == (0, 150)
    assert fields["colour"].kind == "choice"
    assert [value for value, _ in fields["colour"].choices] == ["red", "green", "blue"]
    assert fields["newsletter"].kind == "boolean"
    assert fields["name"].required
    assert not fields["newsletter"].required


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_a_person_who_declines_or_dismisses_a_form_is_told_to_the_server(asking, reg, action):
    result = call(reg, "ask__sign_in_visitor", {}, elicitor=Person(ElicitAnswer(action)))

    assert result.content == f"no visitor: the person chose {action}"


def test_a_form_in_a_turn_nobody_watches_is_refused_and_the_call_says_why(asking, reg):
    result = asyncio.run(
        reg.get("ask__sign_in_visitor").execute(
            {},
            ToolContext(
                env={},
                attended=False,
                services=ToolServices(elicitor=Person(ElicitAnswer("accept", VISITOR))),
            ),
        )
    )

    assert result.is_error
    assert "nobody is watching this chat to answer a form" in result.content


def test_a_person_slower_than_the_idle_timeout_still_answers_in_time(asking, reg):
    """The server's timeout counts a call's silence; a person deciding is not silence."""
    # The margins are wide: on a loaded runner the question once took over 0.5 s to come.
    asking(timeout=1.0)
    person = Person(ElicitAnswer("accept", VISITOR), delay=2.5)

    result = call(reg, "ask__sign_in_visitor", {}, elicitor=person)

    assert result.content.startswith("welcome Ada")


def test_sampling_is_refused_until_the_operator_allows_it_then_the_model_answers(asking, reg):
    refused = call(
        reg, "ask__sum_up", {"text": "a long story"}, sampler=Person(ElicitAnswer("cancel"))
    )
    asking(sampling=True)
    person = Person(ElicitAnswer("cancel"))
    answered = call(reg, "ask__sum_up", {"text": "a long story"}, sampler=person)
    denied = call(reg, "ask__sum_up", {"text": "a long story"}, sampler=Refuser())

    assert refused.is_error
    assert answered.content == "the model (test-model) said: A short summary."
    [ask] = person.asks
    assert ask.system == "Answer in one short sentence."
    assert ask.messages == (("user", "Sum up: a long story"),)
    assert ask.max_tokens == 200
    assert denied.is_error
    assert "toolhub refused: the person denied it" in denied.content


def test_two_chats_calling_at_once_each_get_their_own_form(asking, reg):
    """On 2026-07-28 a question rides its call's answer, so it can never cross calls."""
    first = Person(ElicitAnswer("accept", {**VISITOR, "name": "First"}), delay=0.3)
    second = Person(ElicitAnswer("accept", {**VISITOR, "name": "Second"}), delay=0.3)
    tool = reg.get("ask__sign_in_visitor")

    async def both():
        return await asyncio.gather(
            tool.execute({}, ToolContext(env={}, services=ToolServices(elicitor=first))),
            tool.execute({}, ToolContext(env={}, services=ToolServices(elicitor=second))),
        )

    one, two = asyncio.run(both())

    assert one.content.startswith("welcome First")
    assert two.content.startswith("welcome Second")
    assert len(first.forms) == len(second.forms) == 1


def in_chat(chat: str, workspace: Path, **fields) -> ToolContext:
    return ToolContext(env={}, session_id=chat, workspace=workspace / chat, **fields)


def test_each_chat_is_told_only_its_own_workspace_as_the_servers_root(asking, reg, tmp_path):
    asking(workspace_roots=True)
    tool = reg.get("ask__show_roots")

    async def both():
        return await asyncio.gather(
            tool.execute({}, in_chat("chat-a", tmp_path)),
            tool.execute({}, in_chat("chat-b", tmp_path)),
        )

    a, b = asyncio.run(both())

    assert a.content == (tmp_path / "chat-a").as_uri()
    assert b.content == (tmp_path / "chat-b").as_uri()


def test_without_workspace_roots_a_server_is_told_of_no_roots(asking, reg, tmp_path):
    result = asyncio.run(reg.get("ask__show_roots").execute({}, in_chat("chat-a", tmp_path)))

    assert result.is_error


def test_a_workspace_server_refuses_a_call_that_has_no_chat(asking, reg):
    asking(workspace_roots=True)

    result = asyncio.run(reg.get("ask__show_roots").execute({}, ToolContext(env={})))

    assert result.is_error
    assert "works in a chat's workspace, and this call has none" in result.content


def test_a_chats_connection_is_its_own_and_closes_when_idle(reg, tmp_path):
    """Over stdio a connection is a process: its pid shows which connection answered."""
    manager = make_manager(reg, tmp_path, chat_idle=0.5)
    try:
        connect(manager, stdio_config("ask", "--asking", workspace_roots=True))
        pid = reg.get("ask__pid")

        def pid_in(chat: str) -> str:
            return asyncio.run(pid.execute({}, in_chat(chat, tmp_path))).content

        first, again, other = pid_in("chat-a"), pid_in("chat-a"), pid_in("chat-b")
        wait_for(lambda: manager.chats("ask") == 0, 10, "the idle connections to close")
        later = pid_in("chat-a")

        assert first == again
        assert other != first
        assert later not in (first, other)
    finally:
        manager.stop()


def test_a_server_at_its_chat_limit_makes_room_from_idle_chats_and_waits_while_all_are_busy(
    reg, tmp_path
):
    manager = make_manager(reg, tmp_path, max_chats=1)
    said: list[str] = []
    try:
        connect(manager, stdio_config("ask", "--asking", workspace_roots=True))
        sleep, roots = reg.get("ask__sleep"), reg.get("ask__show_roots")

        async def busy_then_others():
            slow = asyncio.ensure_future(sleep.execute({"seconds": 2}, in_chat("a", tmp_path)))
            await asyncio.sleep(1.0)
            waited = await roots.execute(
                {}, in_chat("b", tmp_path, on_update=lambda update: said.append(update.chunk))
            )
            await slow
            # a's connection is idle now: closed to make room for c's, without a wait.
            room = await roots.execute({}, in_chat("c", tmp_path))
            return waited, room

        waited, room = asyncio.run(busy_then_others())

        assert waited.content == (tmp_path / "b").as_uri()
        assert said == [
            "Waiting for a free connection to MCP server ask: it has as many open as it may "
            "(1), each busy with another call.\n"
        ]
        assert room.content == (tmp_path / "c").as_uri()
        assert manager.chats("ask") == 1
    finally:
        manager.stop()


def test_a_handshake_era_form_goes_to_the_one_call_waiting_on_the_server(manager, reg):
    connect(manager, raw_config("--asks"))
    person = Person(ElicitAnswer("accept", {"name": "Ada"}))

    result = call(reg, "raw__ask", {}, elicitor=person)

    assert result.content == "the client said: accept (Ada)"
    assert [form.message for form in person.forms] == ["Your name?"]


def test_a_handshake_era_form_with_several_calls_waiting_is_refused_not_guessed(manager, reg):
    """Nothing in the server's request names its call: with two chats' calls waiting,
    either person could be the one asked, so neither is."""
    connect(manager, raw_config("--asks"))
    first, second = Person(ElicitAnswer("accept", {"name": "A"})), Person(ElicitAnswer("cancel"))

    async def two_calls():
        held = asyncio.ensure_future(
            reg.get("raw__hold").execute(
                {}, ToolContext(env={}, services=ToolServices(elicitor=first))
            )
        )
        await asyncio.sleep(0.5)
        asked = await reg.get("raw__ask").execute(
            {}, ToolContext(env={}, services=ToolServices(elicitor=second))
        )
        return await held, asked

    held, asked = asyncio.run(two_calls())

    assert first.forms == second.forms == []
    assert "several calls are waiting on this server" in asked.content
    assert "several calls are waiting on this server" in held.content


class Vault:
    """People's own credentials, as the apps keep them (``CredentialStore``)."""

    def __init__(self, **tokens: str) -> None:
        self.tokens = tokens

    async def get(self, *, server: str, user_id: str) -> str | None:
        return self.tokens.get(user_id)


def as_person(user: str, vault: Vault, chat: str = "c") -> ToolContext:
    return ToolContext(
        env={}, user_id=user, session_id=chat, services=ToolServices(mcp_credentials=vault)
    )


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_each_persons_calls_go_with_their_own_credential_and_nobody_elses(
    manager, reg, tmp_path, transport
):
    name = "X-Person-Token" if transport == "http" else "PERSON_TOKEN"
    vault = Vault(ada="token-of-ada", bob="token-of-bob")
    whoami = None

    def run(user: str) -> str:
        return asyncio.run(whoami.execute({}, as_person(user, vault))).content

    def check() -> tuple[str, str, str, str]:
        ada, bob, nobody = run("ada"), run("bob"), run("eve")
        vault.tokens["ada"] = "token-of-ada-2"  # a changed credential takes effect at once
        return ada, bob, nobody, run("ada")

    if transport == "stdio":
        connect(manager, stdio_config("ask", "--asking", user_credential=name))
        whoami = reg.get("ask__whoami")
        ada, bob, nobody, again = check()
    else:
        port = free_port()
        with http_server(port, "--asking", log=tmp_path / "server.log"):
            connect(manager, http_config("ask", port, user_credential=name))
            whoami = reg.get("ask__whoami")
            ada, bob, nobody, again = check()

    assert ada == "token-of-ada"
    assert bob == "token-of-bob"
    assert "takes your own credential, and you have not added one" in nobody
    assert again == "token-of-ada-2"


def test_a_credential_no_variable_can_carry_is_refused_unsent_and_never_quoted(manager, reg):
    connect(manager, stdio_config("ask", "--asking", user_credential="PERSON_TOKEN"))
    vault = Vault(ada="secret\0value")

    result = asyncio.run(reg.get("ask__whoami").execute({}, as_person("ada", vault)))

    assert result.is_error
    assert "cannot be sent as it is" in result.content
    assert "secret" not in result.content
    assert manager.chats("ask") == 0


def test_a_personal_servers_resources_and_prompts_are_read_with_the_persons_own_credential(
    manager, reg
):
    """Not with the server's own on their behalf: without theirs, nothing is read."""
    connect(manager, stdio_config("ask", "--asking", "--lively", user_credential="PERSON_TOKEN"))
    vault = Vault(ada="token-of-ada")
    read = reg.get("ask__read_resource")

    def run(coro):
        return asyncio.run(coro)

    theirs = run(read.execute({"uri": "note://greeting"}, as_person("ada", vault)))
    nobodys = run(read.execute({"uri": "note://greeting"}, as_person("eve", vault)))
    prompt = run(manager.get_prompt("ask", "hello", {}, ctx=as_person("ada", vault)))
    refused = run(manager.get_prompt("ask", "hello", {}, ctx=as_person("eve", vault)))

    assert not theirs.is_error
    assert "you have not added one" in nobodys.content
    assert not prompt.is_error
    assert "you have not added one" in refused.content
    assert manager.chats("ask") == 1
    # What the server's own credential lists is not offered to everybody after "@".
    assert manager.resources() == []


def test_a_late_question_after_another_persons_call_was_given_up_on_is_refused(manager, reg):
    """Calls of no chat share the server's own connection (a chat's go through its own:
    tests/integration/tools/test_mcp_attribution.py). A handshake-era server may go on
    working for a call toolhub gave up on (a timeout) and ask for it later, while another
    person's call is the one waiting: nothing says whose the question is, so nobody is
    asked."""
    connect(manager, raw_config("--asks", timeout=0.5))
    first = Person(ElicitAnswer("accept", {"name": "B"}))
    second = Person(ElicitAnswer("accept", {"name": "A"}))

    def in_chat_of(user: str, person: Person) -> ToolContext:
        return ToolContext(env={}, user_id=user, services=ToolServices(elicitor=person))

    async def given_up_then_asked():
        given_up = await reg.get("raw__hold").execute({}, in_chat_of("bob", first))
        asked = await reg.get("raw__ask").execute({}, in_chat_of("ada", second))
        return given_up, asked

    given_up, asked = asyncio.run(given_up_then_asked())

    assert "timed out" in given_up.content
    assert first.forms == second.forms == []
    assert "another chat's call on this server ended lately" in asked.content


def test_a_call_that_began_as_its_server_was_removed_opens_nothing(manager, reg):
    """The person's credential is read off the loop; a server removed meanwhile gets no
    connection carrying it."""
    connect(manager, stdio_config("ask", "--asking", user_credential="PERSON_TOKEN"))

    class SlowVault(Vault):
        async def get(self, *, server: str, user_id: str) -> str | None:
            await asyncio.sleep(1.0)
            return await super().get(server=server, user_id=user_id)

    whoami = reg.get("ask__whoami")

    async def call_while_removed():
        call = asyncio.ensure_future(whoami.execute({}, as_person("ada", SlowVault(ada="t-1"))))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(manager.reconcile, [], wait=15)
        return await call

    result = asyncio.run(call_while_removed())

    assert result.is_error
    assert manager.chats("ask") == 0


def test_a_chats_connection_opened_by_a_resource_read_closes_when_idle(reg, tmp_path):
    manager = make_manager(reg, tmp_path, chat_idle=0.5)
    try:
        connect(manager, stdio_config("ask", "--lively", workspace_roots=True))
        read = reg.get("ask__read_resource")

        result = asyncio.run(read.execute({"uri": "note://greeting"}, in_chat("chat-a", tmp_path)))
        opened = manager.chats("ask")
        wait_for(lambda: manager.chats("ask") == 0, 10, "the idle connection to close")

        assert not result.is_error
        assert opened == 1
    finally:
        manager.stop()
