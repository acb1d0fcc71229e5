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


_WORDS = (
    "list",
    "create",
    "update",
    "delete",
    "issue",
    "repository",
    "channel",
    "message",
    "invoice",
    "customer",
    "file",
    "search",
    "fetch",
    "deploy",
    "rollback",
    "metric",
    "alert",
    "schedule",
    "event",
    "ticket",
    "note",
    "page",
    "user",
    "naïve",
    "café",
    "東京",
    "emoji🙂",
    "42",
    "v2.1",
    "«quoted»",
    "path/to/file",
    "key=value",
    "JSON",
    "{braces}",
    "[x]",
)


def synthetic_tools(count: int, seed: int = 7) -> list[dict]:
    """Varied, realistic-looking tool definitions: unicode, digits, punctuation, newlines
    and nested schemas, so tokenizer boundaries get exercised. Same seed, same tools."""
    import random

    rng = random.Random(seed)
    tools = []
    for index in range(count):
        words = rng.sample(_WORDS, 3)
        plain = "_".join(word for word in words if word.isascii() and word.isalpha())
        name = f"{rng.choice(['svc', 'mcp', 'ops'])}_{plain}_{index}"
        sentences = [" ".join(rng.choices(_WORDS, k=rng.randint(4, 14))) for _ in range(3)]
        description = ". ".join(sentences).capitalize() + ".\n" + rng.choice(_WORDS)
        properties = {
            f"arg_{i}": {
                "type": rng.choice(["string", "integer", "boolean"]),
                "description": " ".join(rng.choices(_WORDS, k=rng.randint(2, 8))),
            }
            for i in range(rng.randint(0, 4))
        }
        if index % 5 == 0:
            properties["options"] = {
                "type": "object",
                "properties": {"deep": {"type": "array", "items": {"type": "string"}}},
            }
        tools.append(
            {
                "name": name[:64],
                "description": description,
                "parameters": {"type": "object", "properties": properties},
                "defer": index % 3 == 0,
            }
        )
    return tools
