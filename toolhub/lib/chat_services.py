"""The interfaces a chat's tools reach the database through (the runtime's ``ToolServices``),
each provided by the app that owns its rows when Django starts (``AppConfig.ready``).

A turn and the tool catalog build a chat's services here, so the catalog says a tool is
available exactly when a chat would offer it, and the profiles app needs no import of the
apps above it (docs/architecture.md, "The parts"). Providing the same interface twice is a
programming error and raises.
"""

from __future__ import annotations

import dataclasses

from toolhub.tools import ToolServices

# The turn runner puts in what waits on a person (the question, an MCP server's form or
# sampling request); the apps provide the rest.
_BY_THE_TURN = frozenset({"asker", "elicitor", "sampler"})
_PROVIDED = frozenset(
    field.name for field in dataclasses.fields(ToolServices) if field.name not in _BY_THE_TURN
)
_adapters: dict[str, object] = {}


class _PersonAsker:
    """Stands for "a person is watching" while a toolset resolves; the turn runner puts
    in the asker that really waits for the answer."""

    async def ask(self, *, question: str, options: list[str]) -> str:
        raise RuntimeError("only a running turn can ask the person")


_PERSON = _PersonAsker()


def chat_services_provide(**adapters: object) -> None:
    """Register the adapters an app owns, by ``ToolServices`` field name."""
    for name, adapter in adapters.items():
        if name not in _PROVIDED:
            raise TypeError(f"ToolServices has no provided interface {name!r}")
        if name in _adapters and _adapters[name] is not adapter:
            raise RuntimeError(f"{name} is provided already")
        _adapters[name] = adapter


def chat_services(*, attended: bool = True) -> ToolServices:
    """A chat's services (the asker only when a person is there to answer)."""
    return ToolServices(**_adapters, asker=_PERSON if attended else None)  # type: ignore[arg-type]
