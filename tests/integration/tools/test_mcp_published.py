"""A published MCP server, as people connect it: npm's ``@modelcontextprotocol/server-
everything`` (pinned in tests/mcp/npm/package-lock.json, installed by ``.ci/run`` with
``npm ci``) over stdio, through ``McpManager``. It is the reference server of the
protocol's own project: what it offers, toolhub must take as its users would expect."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from tests.conftest import need
from tests.mcp import wait_for
from toolhub.tools import ToolContext, ToolRegistry
from toolhub.tools.context import ToolServices
from toolhub.tools.mcp import McpManager, McpServerConfig
from toolhub.tools.mcp.asks import ElicitAnswer, ElicitForm, Sampled, SamplingAsk
from toolhub.tools.mcp.forms import form_answer

pytestmark = pytest.mark.processes

PACKAGES = Path(__file__).resolve().parents[2] / "mcp/npm/node_modules/@modelcontextprotocol"
EVERYTHING = PACKAGES / "server-everything/dist/index.js"
FILESYSTEM = PACKAGES / "server-filesystem/dist/index.js"


@pytest.fixture
def published(tmp_path):
    """Connects a published server (its script and config fields) into a registry."""
    node = shutil.which("node")
    errlog = (tmp_path / "stderr.log").open("w")
    managers = []

    def connect(name: str, script: Path, *args: str, **fields):
        if node is None or not script.exists():
            need(script.parent.parent.name, "run: npm ci --prefix tests/mcp/npm")
        reg = ToolRegistry()
        manager = McpManager(reg, health_interval=0.5, errlog=errlog)
        managers.append(manager)
        config = McpServerConfig(
            name=name, transport="stdio", command=node, args=(str(script), *args), **fields
        )
        manager.reconcile([config], wait=30)
        wait_for(lambda: manager.statuses()[name].state == "connected", 60, "it to connect")
        return manager, reg

    yield connect
    for manager in managers:
        manager.stop()
    errlog.close()


@pytest.fixture
def everything(published):
    return published("everything", EVERYTHING, "stdio")


def call(reg: ToolRegistry, name: str, arguments: dict | None = None):
    return asyncio.run(reg.get(name).execute(arguments or {}, ToolContext(env={})))


def test_server_everything_connects_and_its_tools_images_resources_and_prompts_work(everything):
    manager, reg = everything
    status = manager.statuses()["everything"]

    echo = call(reg, "everything__echo", {"message": "hi \u200d there"})
    image = call(reg, "everything__get-tiny-image")
    total = call(reg, "everything__get-sum", {"a": 2, "b": 3})
    resources = manager.resources()
    listing = call(reg, "everything__list_resources")
    read = call(reg, "everything__read_resource", {"uri": resources[0].uri})
    prompts = {prompt.name: prompt for prompt in manager.prompts()}
    filled = asyncio.run(
        manager.get_prompt(
            "everything", "args-prompt", {"city": "Oslo", "state": "Viken"}, ctx=ToolContext(env={})
        )
    )
    bad = call(reg, "everything__get-sum", {"a": 2})

    assert echo.content == "Echo: hi \u200d there"  # as sent, the joiner kept
    assert [img.media_type for img in image.images] == ["image/png"]
    assert "[image 1: image/png" in image.content
    assert total.content == "The sum of 2 and 3 is 5."
    assert len(resources) >= 1
    assert resources[0].uri in listing.content
    assert not read.is_error
    assert read.content
    assert "args-prompt" in prompts
    assert "Oslo" in filled.content
    # Refused before it was sent, by its own schema.
    assert bad.is_error
    assert bad.content == "everything__get-sum: missing required argument 'b'"
    # What it offers only as a task is left out, and says why.
    assert any("only as an MCP task" in item.reason for item in status.skipped)
    assert status.tools >= 10


class Person:
    """Fills in every form with what it is given, and answers every sampling request."""

    def __init__(self, content: dict) -> None:
        self.content = content
        self.forms: list[ElicitForm] = []

    async def elicit(self, form: ElicitForm, *, withdrawn=None) -> ElicitAnswer:
        self.forms.append(form)
        if form.url:
            return ElicitAnswer("accept")
        return ElicitAnswer("accept", form_answer(form.fields, self.content))

    async def sample(self, ask: SamplingAsk, *, withdrawn=None) -> Sampled:
        return Sampled(text=f"a model read {ask.messages[-1][1]!r}", model="toolhub-test")


def test_server_everythings_form_sampling_and_roots_tools_work_once_toolhub_offers_them(
    published, tmp_path
):
    """Its six tools that need a client's form, model or roots were hidden before toolhub
    offered them; with sampling and workspace roots on they are listed and answer, the
    form drawn from its own schema (every kind the spec has) and filled as a browser
    would post it."""
    _, reg = published("everything", EVERYTHING, "stdio", sampling=True, workspace_roots=True)
    person = Person(
        {
            "name": "Ada",
            "check": "true",
            "email": "ada@example.org",
            "birthdate": "1815-12-10",
            "integer": "42",
            "untitledSingleSelectEnum": "Rachel",
            "titledMultipleSelectEnum": ["fish-1", "fish-3"],
        }
    )
    ctx = ToolContext(
        env={},
        session_id="chat-1",
        workspace=tmp_path / "chat-1",
        services=ToolServices(elicitor=person, sampler=person),
    )

    def run(name: str, arguments: dict | None = None):
        return asyncio.run(reg.get(name).execute(arguments or {}, ctx))

    form = run("everything__trigger-elicitation-request")
    sampled = run("everything__trigger-sampling-request", {"prompt": "hello", "maxTokens": 50})
    roots = run("everything__get-roots-list")
    url = run("everything__trigger-url-elicitation", {"url": "https://example.org/pay"})

    assert not form.is_error
    assert '"name": "Ada"' in form.content
    assert '"integer": 42' in form.content
    kinds = {field.name: field.kind for field in person.forms[0].fields}
    assert kinds["titledMultipleSelectEnum"] == "choices"
    assert kinds["legacyTitledEnum"] == "choice"
    assert "a model read 'Resource trigger-sampling-request context: hello'" in sampled.content
    assert (tmp_path / "chat-1").as_uri() in roots.content
    assert person.forms[-1].url == "https://example.org/pay"
    assert not url.is_error


def test_the_filesystem_server_works_in_each_chats_workspace_and_nowhere_else(published, tmp_path):
    _, reg = published("fs", FILESYSTEM, workspace_roots=True)
    for chat in ("chat-a", "chat-b"):
        (tmp_path / chat).mkdir()
        (tmp_path / chat / "note.txt").write_text(f"written in {chat}\n")
    read = reg.get("fs__read_text_file")

    def read_in(chat: str, path: Path):
        ctx = ToolContext(env={}, session_id=chat, workspace=tmp_path / chat)
        return asyncio.run(read.execute({"path": str(path)}, ctx))

    own = read_in("chat-a", tmp_path / "chat-a" / "note.txt")
    other = read_in("chat-a", tmp_path / "chat-b" / "note.txt")
    theirs = read_in("chat-b", tmp_path / "chat-b" / "note.txt")

    assert own.content == "written in chat-a\n"
    assert theirs.content == "written in chat-b\n"
    assert other.is_error
    assert "outside allowed directories" in other.content
