"""Tool phrasings written by the configured provider, over real HTTP through the real SDK
(the fake Anthropic API): once per definition, found by tool_search, never with the demo
provider, and an error answer costs nothing but the phrasing."""

from __future__ import annotations

import json

import pytest

from agent_app.phrasings import configure_from_settings
from tests.conftest import plain_tool
from tests.fakes import Reply
from toolhub.tools import phrasings
from toolhub.tools.search import ToolIndex

_tool = plain_tool


TOOLS = [
    _tool("chat_post_message", "Post a message to a channel."),
    _tool("fs_delete_file", "Delete a file in the workspace."),
]


@pytest.fixture
def phrasing_on(model, settings, tmp_path):
    settings.TOOLHUB_TOOL_PHRASINGS = True
    settings.TOOLHUB_EMBEDDING_CACHE = str(tmp_path / "cache.sqlite3")
    yield model
    phrasings.configure(ask=None, store_file=None)


def _messages(model):
    return [seen for seen in model.requests if seen.path == "/v1/messages"]


def test_each_definition_goes_to_the_provider_once_and_its_phrasing_is_found(phrasing_on):
    model = phrasing_on
    model.replies.append(
        Reply(text='Sure:\n{"1": ["ping everyone", "tell the team"], "2": ["trash a document"]}')
    )
    configure_from_settings()

    ToolIndex(TOOLS)
    assert phrasings.wait_written(timeout=30)
    ToolIndex(TOOLS)  # the next turn asks nothing
    assert phrasings.wait_written(timeout=30)

    [seen] = _messages(model)
    assert [block["text"] for block in seen.body["system"]] == [phrasings.PROMPT]
    sent = json.loads(seen.body["messages"][0]["content"][0]["text"])
    assert [row["name"] for row in sent] == ["chat_post_message", "fs_delete_file"]
    assert not seen.body.get("tools")  # the writer is offered no tool to call
    hits = ToolIndex(TOOLS).search("trash a document", mode="lexical")
    assert hits[0].tool.name == "fs_delete_file"
    assert phrasings.known(TOOLS[0]) == "ping everyone; tell the team"


def test_with_the_demo_provider_nothing_is_sent(phrasing_on, settings):
    model = phrasing_on
    settings.TOOLHUB_PROVIDER = "demo"
    configure_from_settings()

    ToolIndex(TOOLS).search("post a message")
    assert phrasings.wait_written(timeout=5)

    assert _messages(model) == []


def test_a_provider_error_costs_the_phrasing_and_nothing_else(phrasing_on):
    model = phrasing_on
    model.replies.append(Reply(status=529))
    configure_from_settings()

    ToolIndex(TOOLS)
    assert phrasings.wait_written(timeout=30)
    hits = ToolIndex(TOOLS).search("post a message")

    assert len(_messages(model)) == 1
    assert hits[0].tool.name == "chat_post_message"
    assert phrasings.known(TOOLS[0]) == ""
