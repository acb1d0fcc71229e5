"""What an MCP server asks of toolhub in the middle of a call, as the apps see it: an
elicitation (a form, or a page to open: ``ElicitForm``, read from the server's request in
``forms``), a sampling request (a completion from the chat's model: ``SamplingAsk``), who
answers them (``Elicitor``, ``Sampler``), and why one is refused (``AskRefused``).

Invariants:
- **Sampling is text.** A request is reduced to its system prompt and text messages; one
  with images, audio, tools or too much text is refused with the reason, never cut
  silently. ``max_tokens`` is the server's, capped by toolhub.
- A form is stored and drawn as ``ElicitForm.to_json``, and read back for checking an
  answer with ``fields_from_json``: the same fields wherever the answer arrives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from toolhub.tools.context import CancelToken
from toolhub.tools.mcp.config import visible

MAX_SAMPLING_MESSAGES = 50
MAX_SAMPLING_CHARS = 100_000
MAX_SAMPLING_TOKENS = 4_096
ACTIONS = ("accept", "decline", "cancel")


class AskRefused(Exception):
    """A server's request toolhub will not put to a person or a model (the text says why)."""


@dataclass(frozen=True, slots=True)
class FormField:
    """One field of an elicitation form, as a page draws it and an answer is checked."""

    name: str
    kind: str  # text | number | integer | boolean | choice | choices
    title: str
    description: str = ""
    required: bool = False
    format: str = ""
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    choices: tuple[tuple[str, str], ...] = ()  # (value, label)
    default: Any = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "title": self.title,
            "description": self.description,
            "required": self.required,
            "format": self.format,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "min_length": self.min_length,
            "max_length": self.max_length,
            "choices": [list(choice) for choice in self.choices],
            "default": self.default,
        }


@dataclass(frozen=True, slots=True)
class ElicitForm:
    """A server's elicitation as a person sees it: a form (``fields``) or, in URL mode, a
    page to open (``url``). ``to_json`` is what the chat stores and draws, and what an
    answer is checked against again wherever it arrives (``fields_from_json``)."""

    server: str
    message: str
    fields: tuple[FormField, ...] = ()
    url: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "message": self.message,
            "mode": "url" if self.url else "form",
            "url": self.url,
            "fields": [item.to_json() for item in self.fields],
        }


@dataclass(frozen=True, slots=True)
class ElicitAnswer:
    """What the person did: ``accept`` (with the checked ``content``), ``decline`` or
    ``cancel``."""

    action: str
    content: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class SamplingAsk:
    """A server's request for a completion, reduced to what toolhub sends a model."""

    server: str
    system: str
    messages: tuple[tuple[str, str], ...]  # (role, text)
    max_tokens: int

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "system": self.system,
            "messages": [{"role": role, "text": text} for role, text in self.messages],
            "max_tokens": self.max_tokens,
        }


@dataclass(frozen=True, slots=True)
class Sampled:
    """The model's answer to a sampling request."""

    text: str
    model: str
    stopped_at_limit: bool = False


class Elicitor(Protocol):
    """Puts a server's form to the person whose call caused it (the apps' turn runner).
    ``withdrawn`` is cancelled when the call ends first: the form then leaves the person
    (a dismissal), without anything else being stopped mid-way."""

    async def elicit(self, form: ElicitForm, *, withdrawn: CancelToken) -> ElicitAnswer: ...


class Sampler(Protocol):
    """Asks the person, then the chat's model, for a server's sampling request. Raises
    ``AskRefused`` saying why when either says no, or when ``withdrawn`` ends it first."""

    async def sample(self, ask: SamplingAsk, *, withdrawn: CancelToken) -> Sampled: ...


def fields_from_json(data: Any) -> tuple[FormField, ...]:
    """The fields ``ElicitForm.to_json`` stored, as ``form_answer`` checks against."""
    fields = []
    for item in data if isinstance(data, list) else []:
        choices = tuple((str(value), str(label)) for value, label in item.get("choices") or ())
        fields.append(
            FormField(
                name=str(item["name"]),
                kind=str(item["kind"]),
                title=str(item.get("title", "")),
                description=str(item.get("description", "")),
                required=bool(item.get("required")),
                format=str(item.get("format") or ""),
                minimum=item.get("minimum"),
                maximum=item.get("maximum"),
                min_length=item.get("min_length"),
                max_length=item.get("max_length"),
                choices=choices,
                default=item.get("default"),
            )
        )
    return tuple(fields)


def sampling_ask(server: str, params: Any) -> SamplingAsk:
    """The completion a server's ``sampling/createMessage`` asks for, as toolhub sends it
    to a model; ``AskRefused`` says why not."""
    if getattr(params, "tools", None) or getattr(params, "tool_choice", None):
        raise AskRefused("it asks the model to use tools, which toolhub does not sample")
    messages: list[tuple[str, str]] = []
    for message in list(getattr(params, "messages", None) or ())[: MAX_SAMPLING_MESSAGES + 1]:
        blocks = message.content if isinstance(message.content, list) else [message.content]
        texts = []
        for block in blocks:
            if getattr(block, "type", None) != "text":
                raise AskRefused("it sends more than text (toolhub samples text only)")
            texts.append(block.text)
        # What the person approves is all the model reads: nothing invisible rides along.
        messages.append((message.role, visible("\n".join(texts))))
    if not messages or len(messages) > MAX_SAMPLING_MESSAGES:
        raise AskRefused(f"it sends no message or more than {MAX_SAMPLING_MESSAGES}")
    if messages[-1][0] != "user":
        raise AskRefused("its last message is not the user's")
    system = visible(getattr(params, "system_prompt", None) or "")
    size = len(system) + sum(len(text) for _, text in messages)
    if size > MAX_SAMPLING_CHARS:
        raise AskRefused(f"it sends {size:,} characters (at most {MAX_SAMPLING_CHARS:,})")
    max_tokens = getattr(params, "max_tokens", 0)
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise AskRefused("it asks for no tokens")
    # Temperature, stop sequences and model preferences are hints the spec lets a client
    # ignore: the chat's own model answers as it answers the chat.
    return SamplingAsk(
        server=server,
        system=system,
        messages=tuple(messages),
        max_tokens=min(max_tokens, MAX_SAMPLING_TOKENS),
    )
