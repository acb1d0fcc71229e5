"""Layers 1 to 5 as one filter: which registered tools a turn may offer, and why not the rest.

The result keeps registry order and has no duplicates whatever order or repetition the
inputs have, and every tool left out carries the first layer that removed it and a reason
a person can read ("disabled globally by ops@example.com: leaks secrets", "needs
BRAVE_API_KEY"). Layer 1 tools were never registered; they are reported from the
registry's memory of them. Layer 6 (deferral) is decided after this, on what it returns.

| layer | removes a tool when |
|---|---|
| L1 | ``available_if`` was false at registration |
| L2 | ``expose=False`` |
| L2b | it is outside the picked names, or outside the toolset |
| L3 | the channel or mode is in its ``unsafe_in`` (MCP tools say why: ``unsafe_reason``) |
| L4 | ``check_fn`` fails, an env variable in ``requires_env`` is unset, ``can_use`` fails |
| L5 | a person or agent removed it, the agent's allow-list lacks it, ops disabled it |
|    | globally, or the turn is unattended and it needs a person (``ask_user_question``) |

The meta tools (``tool_search``, ``call_tool``) are how a model reaches deferred tools, so
no veto of layer 5 applies to them: the resolver offers them exactly when something is
deferred, and a removal that would not be enforced is never reported as if it were
(writers refuse such removals; an old stored one is ignored).

A call to a tool the turn may not use is answered with a ``Refusal``: the model is told
which rule stopped it in plain words (so it can tell the person), and the person's card
reads the same words with who did it. An operator's reason goes to the model; the
operator's name does not (docs/architecture.md, "Why a tool is unavailable").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from toolhub.tools.context import ToolContext
from toolhub.tools.presets import toolset_members
from toolhub.tools.registry import ToolRegistry
from toolhub.tools.registry import registry as default_registry
from toolhub.tools.tool import Tool, ToolUnavailable

# How a global disable's reason starts: "disabled globally by <operator>: <their reason>"
# (profiles_app's GlobalDisable writes it; the words below take it apart).
OPERATOR_DISABLED = "disabled globally by "
NEEDS_A_PERSON = frozenset({"ask_user_question"})
META_TOOLS = frozenset({"tool_search", "call_tool"})
# The reasons of what an agent's own intent takes out (its Agents page puts them back).
AGENT_REMOVED = "removed by the agent"
AGENT_NOT_ALLOWED = "not in the agent's allowed tools"
AGENT_REMOVALS = frozenset({AGENT_REMOVED, AGENT_NOT_ALLOWED})


@dataclass(frozen=True, slots=True)
class Hidden:
    name: str
    layer: str
    reason: str


@dataclass(frozen=True, slots=True)
class Selection:
    tools: tuple[Tool, ...]
    hidden: tuple[Hidden, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self.tools)

    def reason_for(self, name: str) -> Hidden | None:
        return next((hidden for hidden in self.hidden if hidden.name == name), None)


def availability(tool: Tool, ctx: ToolContext, *, per_session: bool = True) -> str | None:
    """Layer 4 on its own: ``None`` when the tool can run now, else why not. Without
    ``per_session`` only the process-wide gates count (env, ``check_fn``), not
    ``can_use``, which needs a person and a session to answer."""
    missing = [name for name in tool.requires_env if not ctx.env.get(name)]
    if missing:
        return "needs " + ", ".join(missing)
    if tool.check_fn is not None:
        try:
            if not tool.check_fn():
                return "not available right now"
        except ToolUnavailable as exc:
            return str(exc)
        except Exception as exc:
            return f"availability check failed: {type(exc).__name__}: {exc}"
    if per_session and tool.can_use is not None:
        try:
            if not tool.can_use(ctx):
                return "not available in this session"
        except Exception as exc:
            return f"availability check failed: {type(exc).__name__}: {exc}"
    return None


def _channel_reason(tool: Tool, ctx: ToolContext) -> str | None:
    if ctx.mode and ctx.mode in tool.unsafe_in:
        # A tool that knows why it is unsafe says so (an MCP tool: what its server's
        # annotations said).
        why = getattr(tool, "unsafe_reason", "")
        return f"hidden in {ctx.mode} mode: {why}" if why else f"hidden in {ctx.mode} mode"
    if ctx.channel in tool.unsafe_in:
        return f"hidden in the {ctx.channel} channel"
    return None


def agent_tools(
    registry: ToolRegistry | None = None,
    *,
    ctx: ToolContext | None = None,
    toolset: str | None = None,
    names: Iterable[str] | None = None,
    names_reason: str = "not among the picked tools",
    exclude: Mapping[str, str] | None = None,
    allow: Iterable[str] | None = None,
    deny: Iterable[str] = (),
    agent_deny: Iterable[str] = (),
    disabled: Mapping[str, str] | None = None,
) -> Selection:
    """Filter the registry through layers 1 to 5.

    ``names`` (hand-picked) wins over ``toolset``; with neither, every exposed tool is in;
    ``names_reason`` explains a tool outside ``names``, and ``exclude`` removes more at
    L2b with a reason each (a profile's removals). ``allow`` is the agent's allow-list
    (``None``: no list); ``deny`` the names a person removed; ``agent_deny`` those the
    agent removed; ``disabled`` maps other L5 vetoes (global disables) to their reason.
    Deny beats allow.
    """
    registry = default_registry if registry is None else registry
    ctx = ctx or ToolContext()
    picked = frozenset(names) if names is not None else None
    members = toolset_members(toolset, registry) if toolset and picked is None else None
    selection = _Selection(
        picked=picked,
        picked_reason=names_reason,
        members=members,
        toolset=toolset,
        exclude=exclude or {},
        allowed=frozenset(allow) if allow is not None else None,
        denied=frozenset(deny),
        agent_denied=frozenset(agent_deny),
        disabled=disabled or {},
    )

    tools: list[Tool] = []
    hidden = [Hidden(skip.name, "L1", skip.reason) for skip in registry.skipped]
    for tool in registry.all_tools():
        layer, reason = _first_removal(tool, ctx, selection)
        if layer is None:
            tools.append(tool)
        else:
            hidden.append(Hidden(tool.name, layer, reason))
    return Selection(tools=tuple(tools), hidden=tuple(hidden))


@dataclass(frozen=True, slots=True)
class _Selection:
    picked: frozenset[str] | None
    picked_reason: str
    members: frozenset[str] | None
    toolset: str | None
    exclude: Mapping[str, str]
    allowed: frozenset[str] | None
    denied: frozenset[str]
    agent_denied: frozenset[str]
    disabled: Mapping[str, str]


def _first_removal(tool: Tool, ctx: ToolContext, sel: _Selection) -> tuple[str | None, str]:
    if not tool.expose:
        return "L2", "internal: callable from code, never offered to a model"
    if sel.picked is not None and tool.name not in sel.picked:
        return "L2b", sel.picked_reason
    if sel.members is not None and tool.name not in sel.members:
        return "L2b", f"not in the '{sel.toolset}' toolset"
    if tool.name in sel.exclude:
        return "L2b", sel.exclude[tool.name]
    reason = _channel_reason(tool, ctx)
    if reason:
        return "L3", reason
    if tool.requires_env or tool.check_fn is not None or tool.can_use is not None:
        reason = availability(tool, ctx)
        if reason:
            return "L4", reason
    if tool.name in META_TOOLS:
        return None, ""
    if tool.name in sel.disabled:
        return "L5", sel.disabled[tool.name]
    if tool.name in sel.denied:
        return "L5", "removed in this conversation"
    if tool.name in sel.agent_denied:
        return "L5", AGENT_REMOVED
    if sel.allowed is not None and tool.name not in sel.allowed:
        return "L5", AGENT_NOT_ALLOWED
    if not ctx.attended and tool.name in NEEDS_A_PERSON:
        return "L5", "needs a person watching; this turn is unattended"
    return None, ""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a call did not run: ``told`` is the tool result the model receives, ``reason``
    what the person reads on the call's card."""

    told: str
    reason: str


# Each layer's words, for a person and for the model (who is told the tool's name too).
_PERSON_WORDS = {
    "L1": "not available on this server",
    "L2": "never offered to a model",
    "L2b": "not in this chat's profile",
    "L3": "not allowed here",
    "L4": "unavailable",
}
_MODEL_WORDS = {
    "L1": "is not available on this server",
    "L2": "is internal and never offered to a model",
    "L2b": "is not offered in this chat",
    "L3": "is not allowed here",
    "L4": "is unavailable right now",
    "L5": "is not available",
}


def _operator(reason: str) -> tuple[str, str] | None:
    """(operator, their reason) of a global disable's reason, else ``None``."""
    if not reason.startswith(OPERATOR_DISABLED):
        return None
    who, _, why = reason.removeprefix(OPERATOR_DISABLED).partition(": ")
    return who, why


def hidden_words(layer: str, reason: str) -> str:
    """Why a tool is hidden, in a person's words (the layer code stays beside it)."""
    operator = _operator(reason) if layer == "L5" else None
    if operator is not None:
        return f"turned off by an operator ({operator[0]}): {operator[1]}"
    prefix = _PERSON_WORDS.get(layer)
    if prefix is None:
        return reason
    return f"{prefix}: {reason}" if reason else prefix


def refusal(name: str, hidden: Hidden | None) -> Refusal:
    """The answer to a call of ``name``, which this turn may not run: ``hidden`` is the
    rule that removed it, ``None`` when no tool has that name."""
    if hidden is None:
        return Refusal(f"there is no tool named {name} here", "no tool by that name")
    reason = hidden_words(hidden.layer, hidden.reason)
    operator = _operator(hidden.reason) if hidden.layer == "L5" else None
    if operator is not None:
        told = f"{name} is turned off by an operator: {operator[1]}"
    elif hidden.layer == "L3" and hidden.reason.startswith("hidden "):
        # "hidden in plan mode: the server marks it destructive" reads well as it is.
        told = f"{name} is {hidden.reason}"
    else:
        words = _MODEL_WORDS.get(hidden.layer, "is not available")
        told = f"{name} {words}: {hidden.reason}" if hidden.reason else f"{name} {words}"
    return Refusal(told, reason)
