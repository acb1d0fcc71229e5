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
from toolhub.tools.mcp import McpManager, McpServerConfig

EVERYTHING = (
    Path(__file__).resolve().parents[2]
    / "mcp/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
)


@pytest.fixture
def everything(tmp_path):
    node = shutil.which("node")
    if node is None or not EVERYTHING.exists():
        need("server-everything", "run: npm ci --prefix tests/mcp/npm")
    reg = ToolRegistry()
    errlog = (tmp_path / "stderr.log").open("w")
    manager = McpManager(reg, health_interval=0.5, errlog=errlog)
    config = McpServerConfig(
        name="everything", transport="stdio", command=node, args=(str(EVERYTHING), "stdio")
    )
    manager.reconcile([config], wait=30)
    wait_for(lambda: manager.statuses()["everything"].state == "connected", 60, "it to connect")
    yield manager, reg
    manager.stop()
    errlog.close()


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
        manager.get_prompt("everything", "args-prompt", {"city": "Oslo", "state": "Viken"})
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
