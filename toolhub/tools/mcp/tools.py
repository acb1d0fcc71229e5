"""An MCP server's listing as toolhub ``Tool`` objects: names, untrusted text cut and
cleaned, schemas checked, and annotations read into plan-mode and approval rules
(``tool_effect``). What a call returns is turned into a result in ``results``; the
readers of a server's resources are in ``resources``, its prompts in ``prompts``.

Invariants: a hint is believed only as a JSON boolean exactly as it came over the wire,
and any doubt lands on destructive, never read-only; a tool that cannot be offered safely
(its schema, a reserved argument, a task-only call, a name already taken) is skipped with
the reason, never registered half-checked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from toolhub.tools.context import ToolContext
from toolhub.tools.mcp.config import (
    CONFLICTING_HINT,
    DEFER_META_KEY,
    HINTS,
    MAX_DESCRIPTION_CHARS,
    MAX_LABEL_CHARS,
    MAX_SCHEMA_CHARS,
    NOT_SEEN,
    PLAN,
    McpServerConfig,
    tool_name,
    untrusted_text,
)
from toolhub.tools.registry import Skipped
from toolhub.tools.schema import canonical_json, check_schema
from toolhub.tools.tool import Tool, ToolResult


@dataclass(frozen=True, slots=True)
class Effect:
    """What a tool's annotations say it does to the world, and why that is believed.

    ``kind`` is ``read-only``, ``additive`` (changes things, never destroys),
    ``destructive`` or ``unknown`` (the server said nothing). ``reason`` completes
    "hidden in plan mode: …" for every kind but ``read-only``."""

    kind: str
    reason: str = ""

    @property
    def read_only(self) -> bool:
        return self.kind == "read-only"

    @property
    def destructive(self) -> bool:
        return self.kind == "destructive"


READ_ONLY = Effect("read-only")
UNANNOTATED = Effect("unknown", "the server does not mark it read-only (it has no annotations)")
ADDITIVE = Effect("additive", "the server does not mark it read-only (it changes things)")
DESTRUCTIVE = Effect("destructive", "the server marks it destructive")
DESTRUCTIVE_BY_DEFAULT = Effect(
    "destructive",
    "the server does not mark it read-only, and by MCP's defaults that makes it destructive",
)
MALFORMED = Effect(
    "destructive", "the server's annotations are not plain booleans, so it counts as destructive"
)
CONFLICTING = Effect(
    "destructive",
    "the server lists it twice with different annotations, so it counts as destructive",
)


def tool_effect(annotations: Any, wire: Any = NOT_SEEN) -> Effect:
    """The effect of a tool from its parsed annotations (an ``mcp_types.ToolAnnotations``
    or ``None``) and, when the listing was read off the wire, the ``annotations`` value
    exactly as it arrived (``None`` when absent). Any doubt lands on destructive: a hint
    that is not a boolean, or that the SDK's parsing changed, never makes a tool
    read-only."""
    if wire is CONFLICTING_HINT:
        return CONFLICTING
    if annotations is None:
        if wire is NOT_SEEN or wire is None:
            return UNANNOTATED
        return MALFORMED
    parsed = [getattr(annotations, attribute, None) for attribute, _key in HINTS]
    if any(value is not None and not isinstance(value, bool) for value in parsed):
        return MALFORMED
    if wire is not NOT_SEEN:
        if not isinstance(wire, Mapping):
            return MALFORMED
        # ``is``: the JSON values true, false and null are the only ones believed as such.
        if any(
            wire.get(key) is not value
            for (_attribute, key), value in zip(HINTS, parsed, strict=True)
        ):
            return MALFORMED
    read_only, destructive = parsed
    if read_only is True:
        return READ_ONLY
    if destructive is False:
        return ADDITIVE
    return DESTRUCTIVE if destructive is True else DESTRUCTIVE_BY_DEFAULT


@dataclass(frozen=True, eq=False)
class McpTool(Tool):
    """A server's tool: a ``Tool`` that also carries what its annotations said."""

    effect: Effect = UNANNOTATED

    @property
    def unsafe_reason(self) -> str:
        """Why plan mode hides it (read by layer 3 after "hidden in plan mode: ")."""
        return self.effect.reason


def build_tools(
    config: McpServerConfig,
    listing: Iterable[Any],
    *,
    call: Callable[..., Any],
    check: Callable[[], bool],
    wire: Mapping[str, Any] | None = None,
) -> tuple[list[Tool], list[Skipped]]:
    """``Tool``s for a server's listing (``mcp_types.Tool`` items), sorted by name, after
    the allowlist; tools that cannot be offered safely are skipped with a reason. ``wire``
    maps a remote name to its ``annotations`` as they came over the wire (``None`` when
    absent); without it the parsed annotations are all there is to go by."""
    origin = f"mcp:{config.name}"
    allowed = frozenset(config.allowlist) if config.allowlist is not None else None
    tools: dict[str, Tool] = {}
    skipped: list[Skipped] = []
    # The schema breaks ties: a server listing one name twice keeps the same one always.
    for remote in sorted(listing, key=lambda item: (item.name, _sort_key(item.input_schema))):
        if allowed is not None and remote.name not in allowed:
            continue
        name = tool_name(config.name, remote.name)
        shown = untrusted_text(remote.name, MAX_LABEL_CHARS)
        reason = _schema_problem(remote.input_schema) or _call_problem(remote)
        if reason is None and name in tools:
            reason = f"its name {name} is already used by another of this server's tools"
        if reason is not None:
            skipped.append(Skipped(name, f"MCP tool {shown}: {reason}", origin))
            continue
        hint = NOT_SEEN if wire is None else wire.get(remote.name, None)
        tools[name] = _mcp_tool(config, remote, name=name, call=call, check=check, wire=hint)
    return list(tools.values()), skipped


def _mcp_tool(
    config: McpServerConfig,
    remote: Any,
    *,
    name: str,
    call: Callable[..., Any],
    check: Callable[[], bool],
    wire: Any,
) -> McpTool:
    """The ``Tool`` of one listed tool that passed the checks; ``wire`` is its
    ``annotations`` as they came over the wire (``NOT_SEEN``: not read off the wire)."""
    annotations = getattr(remote, "annotations", None)
    title = remote.title or (annotations.title if annotations is not None else None)
    meta = remote.meta or {}
    defer = meta.get(DEFER_META_KEY)
    effect = tool_effect(annotations, wire)
    return McpTool(
        name=name,
        description=untrusted_text(remote.description, MAX_DESCRIPTION_CHARS),
        parameters=dict(remote.input_schema),
        fn=_remote_call(call, config.name, remote.name),
        label=untrusted_text(title or remote.name, MAX_LABEL_CHARS),
        origin=f"mcp:{config.name}",
        timeout=config.timeout,
        timeout_ceiling=config.timeout_ceiling,
        check_fn=check,
        defer=defer if isinstance(defer, bool) else config.defer,
        source="mcp",
        # The model gets one cut with the true count; the person can open the whole.
        persist_full=True,
        unsafe_in=() if effect.read_only else (PLAN,),
        requires_approval=effect.destructive and config.approve_destructive,
        effect=effect,
    )


def same_safety(old: Tool, new: Tool) -> bool:
    """Whether ``old`` (registered) and ``new`` agree on plan mode and approval: the
    registry keeps a tool whose wire form is unchanged, and these are not in it."""
    return (
        old.unsafe_in == new.unsafe_in
        and old.requires_approval == new.requires_approval
        and getattr(old, "effect", None) == getattr(new, "effect", None)
    )


def _sort_key(schema: Any) -> str:
    # Only orders a listing: it must not fail on what _schema_problem refuses next.
    return json.dumps(schema, sort_keys=True, default=repr)


def _schema_problem(schema: Any) -> str | None:
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        # Providers refuse any other tool schema, and one bad tool would fail every turn.
        return 'its input schema is not of type "object"'
    try:
        text = canonical_json(schema)
    except ValueError:
        # The SDK parses NaN and Infinity; no provider accepts them in a request body.
        return "its input schema holds NaN or Infinity, which JSON cannot carry"
    if len(text) > MAX_SCHEMA_CHARS:
        return f"its input schema is {len(text):,} characters (the limit is {MAX_SCHEMA_CHARS:,})"
    try:
        check_schema(schema)
    except Exception as exc:
        return f"its input schema is not valid JSON Schema: {str(exc).splitlines()[0][:200]}"
    if "ctx" in (schema.get("properties") or {}):
        return "it has an argument named ctx, which toolhub reserves"
    return None


def _call_problem(remote: Any) -> str | None:
    """Why a plain ``tools/call`` of ``remote`` can never succeed, if it cannot."""
    execution = getattr(remote, "execution", None)
    if getattr(execution, "task_support", None) == "required":
        # The SDK's client has no tasks API (tasks/get, tasks/result): every call would fail.
        return "it runs only as an MCP task, which toolhub does not support"
    return None


def _remote_call(call: Callable[..., Any], server: str, remote: str) -> Callable[..., Any]:
    async def call_mcp_tool(ctx: ToolContext, **arguments: Any) -> ToolResult:
        result: ToolResult = await call(server, remote, arguments, ctx=ctx)
        return result

    call_mcp_tool.__qualname__ = f"mcp:{server}:{remote}"
    return call_mcp_tool
