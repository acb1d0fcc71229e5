"""A server's prompts: its ``prompts/list`` as the composer's entries
(``prompt_entries``), the arguments a person gives checked (``prompt_problem``), and what
``prompts/get`` returns as the text of the person's message (``prompt_text``).

Invariants: a prompt is offered only under a name a person can type, with at most
``MAX_PROMPT_ARGUMENTS`` arguments, and a server offers at most ``MAX_PROMPTS``; its title,
description and argument names are untrusted text; an argument is sent only when the
prompt takes it, as text of at most ``MAX_ARGUMENT_CHARS``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from toolhub.tools.mcp.config import MAX_LABEL_CHARS, McpPrompt, McpPromptArgument, untrusted_text

MAX_PROMPTS = 200
MAX_PROMPT_ARGUMENTS = 20
MAX_ARGUMENT_CHARS = 10_000
_PROMPT_NAME = re.compile(r"^[A-Za-z0-9_.:/-]{1,128}$")


def prompt_entries(server: str, listed: Iterable[Any]) -> tuple[McpPrompt, ...]:
    """A server's ``prompts/list`` as composer entries, by name; a prompt whose name no
    one could type (or that has too many arguments) is left out."""
    prompts: dict[str, McpPrompt] = {}
    for prompt in listed:
        if not _PROMPT_NAME.fullmatch(prompt.name or "") or prompt.name in prompts:
            continue
        arguments = tuple(
            McpPromptArgument(
                untrusted_text(argument.name, MAX_LABEL_CHARS),
                untrusted_text(argument.description, 200),
                bool(argument.required),
            )
            for argument in prompt.arguments or ()
            if untrusted_text(argument.name, MAX_LABEL_CHARS)
        )
        if len(arguments) > MAX_PROMPT_ARGUMENTS:
            continue
        prompts[prompt.name] = McpPrompt(
            server=server,
            name=prompt.name,
            title=untrusted_text(prompt.title or prompt.name, MAX_LABEL_CHARS),
            description=untrusted_text(prompt.description, 300),
            arguments=arguments,
        )
    return tuple(prompts[name] for name in sorted(prompts)[:MAX_PROMPTS])


def prompt_problem(prompt: McpPrompt, arguments: Mapping[str, Any]) -> str | None:
    """Why ``arguments`` cannot be sent for ``prompt``, if they cannot."""
    known = {argument.name for argument in prompt.arguments}
    unknown = sorted(set(arguments) - known)
    if unknown:
        return f"{prompt.name} takes no argument {unknown[0][:80]!r}"
    for argument in prompt.arguments:
        value = arguments.get(argument.name)
        if value is None or value == "":
            if argument.required:
                return f"{prompt.name} needs {argument.name}"
            continue
        if not isinstance(value, str):
            return f"{argument.name} must be text"
        if len(value) > MAX_ARGUMENT_CHARS:
            return f"{argument.name} is longer than {MAX_ARGUMENT_CHARS:,} characters"
    return None


def prompt_text(result: Any) -> str:
    """What a ``prompts/get`` returned, as one message from the person: each message's
    text as sent, other content in a line each."""
    parts = []
    for message in result.messages or ():
        item = message.content
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)
        elif kind == "resource" and isinstance(getattr(item.resource, "text", None), str):
            parts.append(item.resource.text)
        else:
            parts.append(f"[{untrusted_text(kind, 40) or 'unknown'} content]")
    return "\n\n".join(part for part in parts if part)
