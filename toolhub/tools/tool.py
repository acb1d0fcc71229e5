"""``Tool``: one model-facing surface, built once and never changed.

A ``Tool`` is what the registry holds, the layers filter and a provider is sent: its name,
description and parameter schema (the wire form, canonical JSON, built once), the gates
that decide where and whether it runs, and its limits (result cap, timeouts, cache).
``ToolResult`` is what a call gives back. Tools are declared with ``@function``
(``decorator``) or built from a server's listing (``mcp``); a call runs through
``execute`` (``execution``).

Invariants: frozen, so changing a tool means registering another one; a name always
matches ``NAME_PATTERN``; a result is capped at
``min(max_result_chars, 0.3 x the model's context window in characters)``.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from toolhub.tools import presets
from toolhub.tools.context import ToolContext
from toolhub.tools.files import ToolFile
from toolhub.tools.images import ToolImage
from toolhub.tools.schema import canonical_json, compile_validator

DEFAULT_MAX_RESULT_CHARS = 50_000
DEFAULT_TIMEOUT_SECONDS = 120.0
CHARS_PER_TOKEN = 4
CONTEXT_SHARE = 0.3
RUNS_ON = ("inline", "worker")
# The tool-name alphabet every provider accepts (Anthropic's and OpenAI's common subset).
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

Status = Literal["ok", "error", "cancelled"]


@dataclass(frozen=True, slots=True)
class ToolResult:
    content: str
    is_error: bool = False
    status: Status = "ok"
    truncated: bool = False
    full_ref: str | None = None
    cached: bool = False
    # Images beside the text, for the model and the card (toolhub/tools/images.py).
    images: tuple[ToolImage, ...] = ()
    # Files for the person, offered on the card; the model reads only a line for each
    # (toolhub/tools/files.py).
    files: tuple[ToolFile, ...] = ()
    # A JSON value the tool returned beside its text (an MCP tool's structuredContent).
    structured: Any = None

    @classmethod
    def error(cls, message: str) -> ToolResult:
        return cls(content=message, is_error=True, status="error")

    @classmethod
    def cancelled(cls, message: str = "cancelled") -> ToolResult:
        return cls(content=message, is_error=True, status="cancelled")


class ToolUnavailable(Exception):
    """Raised by a ``check_fn`` to say why its tool cannot run now; the message is the
    layer-4 reason people see ("MCP server github disconnected")."""


ApprovalRule = bool | Callable[[Mapping[str, Any], ToolContext], bool]


@dataclass(frozen=True, eq=False)
class Tool:
    """A registered capability. Frozen: changing a tool means registering another one."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    fn: Callable[..., Any]
    label: str = ""
    origin: str = ""
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS
    head_ratio: float = 0.5
    persist_full: bool = False
    stream_capacity_chars: int | None = None
    timeout: float | None = DEFAULT_TIMEOUT_SECONDS
    timeout_min: float | None = None
    timeout_max: float | None = None
    # With a ceiling, ``timeout`` counts seconds without progress: each ``ctx.update``
    # starts it again, and the call ends at the ceiling however much it reports.
    timeout_ceiling: float | None = None
    cache: bool = False
    cache_ttl: float = 300.0
    cache_per_user: bool = True
    check_fn: Callable[[], bool] | None = None
    requires_env: tuple[str, ...] = ()
    can_use: Callable[[ToolContext], bool] | None = None
    requires_approval: ApprovalRule = False
    expose: bool = True
    toolset: tuple[str, ...] = ()
    unsafe_in: tuple[str, ...] = ()
    defer: bool = False
    runs_on: str = "inline"
    source: str = "code"
    _validator: Any = field(default=None, repr=False)
    _wants_ctx: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if not NAME_PATTERN.fullmatch(self.name):
            raise ValueError(f"tool name {self.name!r} must match {NAME_PATTERN.pattern}")
        if self.runs_on not in RUNS_ON:
            raise ValueError(f"{self.name}: runs_on must be one of {RUNS_ON}")
        if not 0.0 <= self.head_ratio <= 1.0:
            raise ValueError(f"{self.name}: head_ratio must be within [0, 1]")
        if self.max_result_chars <= 0:
            raise ValueError(f"{self.name}: max_result_chars must be positive")
        if (
            self.timeout_min is not None
            and self.timeout_max is not None
            and self.timeout_min > self.timeout_max
        ):
            raise ValueError(f"{self.name}: timeout_min is above timeout_max")
        if self.timeout_ceiling is not None and self.timeout_ceiling <= 0:
            raise ValueError(f"{self.name}: timeout_ceiling must be positive")
        presets.check_memberships(self.name, self.toolset)
        wants_ctx = "ctx" in inspect.signature(self.fn).parameters
        object.__setattr__(self, "_wants_ctx", wants_ctx)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the plain function: a tool stays usable from Python."""
        return self.fn(*args, **kwargs)

    @property
    def takes_timeout(self) -> bool:
        # A remote tool's own "timeout" argument means whatever its server says (seconds,
        # milliseconds…): it is passed through untouched, never clamped or rewritten.
        return self.source != "mcp" and "timeout" in self.parameters.get("properties", {})

    @property
    def wants_ctx(self) -> bool:
        return self._wants_ctx

    @property
    def first_line(self) -> str:
        return self.description.strip().splitlines()[0] if self.description.strip() else ""

    def provider_schema(self) -> dict[str, Any]:
        """The wire form every provider adapter starts from."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.parameters,
        }

    @functools.cached_property
    def wire_json(self) -> str:
        """``provider_schema`` as canonical JSON, built once: a tool never changes."""
        return canonical_json(self.provider_schema())

    @functools.cached_property
    def wire_piece(self) -> str:
        """This tool's piece of a tools array, when another tool follows it."""
        return self.wire_json + ",\n"

    @functools.cached_property
    def wire_tokens(self) -> int:
        """Tokens of ``wire_piece``: what this tool costs in a resident array."""
        from toolhub.tools.tokens import count_cached

        return count_cached(self.wire_piece)

    def needs_approval(self, arguments: Mapping[str, Any], ctx: ToolContext) -> bool:
        """Evaluate ``requires_approval``; a rule that raises asks, to be safe."""
        rule = self.requires_approval
        if not callable(rule):
            return bool(rule)
        try:
            return bool(rule(arguments, ctx))
        except Exception:
            return True

    def effective_ceiling(self, ctx: ToolContext) -> int:
        if not ctx.context_window_tokens:
            return self.max_result_chars
        window_chars = ctx.context_window_tokens * CHARS_PER_TOKEN
        return max(1, min(self.max_result_chars, int(window_chars * CONTEXT_SHARE)))

    def clamp_timeout(self, requested: float | None) -> float | None:
        value = self.timeout if requested is None else float(requested)
        if value is None:
            return None
        if self.timeout_min is not None:
            value = max(value, self.timeout_min)
        if self.timeout_max is not None:
            value = min(value, self.timeout_max)
        return value

    def budget_for(self, arguments: Mapping[str, Any]) -> float | None:
        """The seconds a call may run: the call's own ``timeout`` argument, clamped, for a
        tool that takes one; else the tool's timeout."""
        if not self.takes_timeout:
            return self.timeout
        spec = self.parameters["properties"]["timeout"]
        requested = arguments.get("timeout", spec.get("default"))
        if not isinstance(requested, int | float) or isinstance(requested, bool):
            requested = None
        return self.clamp_timeout(requested)

    def limit_for(self, arguments: Mapping[str, Any]) -> float | None:
        """The most seconds a call may run: its budget, or the ceiling when progress can
        stretch the budget (what a worker's time limits must allow)."""
        budget = self.budget_for(arguments)
        if budget is None or self.timeout_ceiling is None:
            return budget
        return max(budget, self.timeout_ceiling)

    def cache_key(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        scope = ctx.user_id if self.cache_per_user else None
        payload = canonical_json({"tool": self.name, "args": arguments, "user": scope})
        return "toolhub:result:" + hashlib.sha256(payload.encode()).hexdigest()

    def validator(self) -> Any:
        """The compiled schema of the arguments. Compiled on first use: registering
        hundreds of MCP tools stays cheap."""
        if self._validator is None:
            object.__setattr__(self, "_validator", compile_validator(self.parameters))
        return self._validator

    async def execute(
        self, arguments: Mapping[str, Any] | None = None, ctx: ToolContext | None = None
    ) -> ToolResult:
        """Validate, run under the timeout and cancel token, convert, cap and cache
        (``execution.execute``): never raises for what a tool or a model does wrong."""
        # Imported here: execution imports this module.
        from toolhub.tools.execution import execute

        return await execute(self, arguments, ctx)


__all__ = ["Tool", "ToolResult", "ToolUnavailable"]
