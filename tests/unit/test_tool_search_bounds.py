"""tool_search at scale: ``select:`` takes a source's name or a glob as well as exact
names, loads at most ``SELECT_MAX`` at once and says how to narrow a pattern past it, and
whatever the registry's size one answer stays bounded: at most ``SEARCH_MAX`` hits, and
a miss names a few near tools rather than every one."""

from __future__ import annotations

import json

from tests.catalogs import mcp_tool
from toolhub.tools import ToolContext, ToolServices, get
from toolhub.tools.builtin.tool_search import SEARCH_MAX, SELECT_MAX
from toolhub.tools.search import ToolIndex


def _ctx(tools) -> ToolContext:
    return ToolContext(services=ToolServices(tool_index=ToolIndex(tools)))


def _loaded(content: str) -> list[str]:
    return [json.loads(line)["name"] for line in content.splitlines() if line.startswith("{")]


GITHUB = [
    mcp_tool("github", f"{verb}_{noun}")
    for verb in ("create", "list")
    for noun in (
        "issue",
        "pull_request",
        "label",
        "milestone",
        "release",
        "branch",
        "tag",
        "comment",
        "review",
        "check",
        "workflow",
        "secret",
    )
]
SLACK = [mcp_tool("slack", name) for name in ("post_message", "list_channels", "add_reaction")]


async def test_select_takes_a_sources_name_or_a_glob_and_loads_its_tools():
    ctx = _ctx([*GITHUB, *SLACK])

    by_source = await get("tool_search").execute({"query": "select:slack"}, ctx)
    by_prefix = await get("tool_search").execute({"query": "select:slack__"}, ctx)
    by_glob = await get("tool_search").execute(
        {"query": "select:GitHub__create_*,slack__post_message"}, ctx
    )

    assert _loaded(by_source.content) == [
        "slack__add_reaction",
        "slack__list_channels",
        "slack__post_message",
    ]
    assert _loaded(by_prefix.content) == _loaded(by_source.content)
    assert _loaded(by_glob.content) == [
        *sorted(tool.name for tool in GITHUB if tool.name.startswith("github__create_")),
        "slack__post_message",
    ]


async def test_a_pattern_matching_more_than_a_call_loads_loads_nothing_and_says_how_to_narrow():
    loaded = []
    index = ToolIndex([*GITHUB, *SLACK])
    original = index.select
    index.select = lambda names: loaded.extend(names) or original(names)
    ctx = ToolContext(services=ToolServices(tool_index=index))
    assert len(GITHUB) > SELECT_MAX

    result = await get("tool_search").execute({"query": "select:github__*"}, ctx)
    source = await get("tool_search").execute({"query": "select:github"}, ctx)

    assert _loaded(result.content) == []
    assert loaded == []
    assert (
        f"'github__*' matches {len(GITHUB)} tools, more than the {SELECT_MAX} one call loads"
        in result.content
    )
    assert "Narrow the pattern (such as github__issue*)" in result.content
    assert f"matches {len(GITHUB)} tools" in source.content


async def test_a_keyword_search_returns_at_most_ten_however_many_the_model_asks_for():
    ctx = _ctx(
        [
            mcp_tool(f"crm{n}", f"create_contact_{n}", about="Create a contact in the CRM.")
            for n in range(300)
        ]
    )

    result = await get("tool_search").execute({"query": "create a contact", "limit": 1_000}, ctx)

    assert len(_loaded(result.content)) == SEARCH_MAX


async def test_a_missed_select_among_thousands_names_a_few_near_tools_not_all_of_them():
    tools = [mcp_tool(f"srv{n // 8}", f"get_record_{n}") for n in range(5_000)]
    ctx = _ctx(tools)

    result = await get("tool_search").execute({"query": "select:srv3__get_recrd_25"}, ctx)

    assert _loaded(result.content) == []
    assert "srv3__get_record_25" in result.content
    assert len(result.content) < 1_000
