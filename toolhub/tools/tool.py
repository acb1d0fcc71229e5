"""``@function`` and the ``Tool`` it builds: one model-facing surface, one way to run it.

``Tool.execute`` never raises for anything a tool or a model does wrong: bad arguments,
exceptions, timeouts and cancellation all come back as a ``ToolResult`` with
``is_error``. Only cancellation of the caller itself propagates (``CancelledError``), after
the running tool has been cancelled too. Results are capped at
``min(max_result_chars, 0.3 x the model's context window in characters)``, keeping head and
tail around a marker, so no single result can flood a context window.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import inspect
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypedDict, Unpack, overload

from toolhub.tools import presets
from toolhub.tools.context import ToolContext
from toolhub.tools.files import ToolFile
from toolhub.tools.images import ToolImage
from toolhub.tools.schema import (
    INJECTED_PARAMETERS,
    ArgumentError,
    canonical_json,
    check_schema,
    compile_validator,
    parse_docstring,
    signature_schema,
    validate_arguments,
)

logger = logging.getLogger(__name__)

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

    async def execute(
        self, arguments: Mapping[str, Any] | None = None, ctx: ToolContext | None = None
    ) -> ToolResult:
        """Validate, run under the timeout and cancel token, convert, cap and cache."""
        capacity = self.stream_capacity_chars or self.max_result_chars
        ctx = (ctx or ToolContext()).for_call(stream_capacity=capacity)
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            return ToolResult.error(f"{self.name}: arguments must be a JSON object")
        args = dict(arguments)
        if self._validator is None:
            # Compiled on first use: registering hundreds of MCP tools stays cheap.
            object.__setattr__(self, "_validator", compile_validator(self.parameters))
        try:
            validate_arguments(self._validator, args)
        except ArgumentError as exc:
            return ToolResult.error(f"{self.name}: {exc}")

        budget = self.budget_for(args)
        if self.takes_timeout and budget is not None:
            spec = self.parameters["properties"]["timeout"]
            args["timeout"] = int(budget) if spec.get("type") == "integer" else budget

        cache = ctx.cache if self.cache else None
        key = self.cache_key(args, ctx) if cache is not None else None
        if cache is not None and key is not None:
            hit = await _quietly(cache.get, key)
            if isinstance(hit, str):
                return await self._cap(ToolResult(content=hit, cached=True), ctx)

        if ctx.cancel.cancelled:
            return ToolResult.cancelled(f"{self.name}: cancelled before it started")
        outcome = await self._run(args, ctx, budget)
        if not isinstance(outcome, ToolResult):
            outcome = ToolResult(content=_to_text(outcome))
        if cache is not None and key is not None and outcome.status == "ok":
            await _quietly(cache.set, key, outcome.content, self.cache_ttl)
        return await self._cap(outcome, ctx)

    async def _run(self, args: dict[str, Any], ctx: ToolContext, budget: float | None) -> Any:
        call_args = {**args, "ctx": ctx} if self.wants_ctx else args
        if inspect.iscoroutinefunction(self.fn):
            work = asyncio.ensure_future(self.fn(**call_args))
        else:
            # A sync tool runs in a thread; on cancel or timeout the caller moves on, and
            # the tool can stop early by polling ctx.cancel.cancelled.
            work = asyncio.ensure_future(asyncio.to_thread(functools.partial(self.fn, **call_args)))
        cancelled = asyncio.ensure_future(ctx.cancel.wait())
        try:
            done, late = await self._until_done(work, cancelled, ctx, budget)
        except asyncio.CancelledError:
            ctx.cancel.cancel()
            await _stop(work)
            raise
        finally:
            cancelled.cancel()
        # Stop sets the token's flag at once and reaches this loop a step later: a tool that
        # returned in between (perhaps because it saw the flag) was still stopped.
        if work in done and not ctx.cancel.cancelled:
            if work.cancelled():
                return ToolResult.cancelled(f"{self.name}: cancelled")
            exc = work.exception()
            if exc is not None:
                said = ctx.without_host_paths(str(exc))
                return ToolResult.error(f"{self.name} failed: {type(exc).__name__}: {said}")
            return work.result()
        await _stop(work)
        if cancelled in done or ctx.cancel.cancelled:
            return ToolResult.cancelled(f"{self.name}: cancelled")
        ctx.cancel.cancel()
        return ToolResult.error(f"{self.name}: {late}")

    async def _until_done(
        self,
        work: asyncio.Future[Any],
        cancelled: asyncio.Future[Any],
        ctx: ToolContext,
        budget: float | None,
    ) -> tuple[set[asyncio.Future[Any]], str]:
        """Wait for the work or the cancel; when time runs out first, nothing is done and
        the string says how it ran out."""
        waiting = {work, cancelled}
        if budget is None or self.timeout_ceiling is None or ctx.tail is None:
            done, _ = await asyncio.wait(
                waiting, timeout=budget, return_when=asyncio.FIRST_COMPLETED
            )
            return done, "" if budget is None else f"timed out after {budget:g} s"
        ceiling = max(self.timeout_ceiling, budget)
        stop_at = ctx.started + ceiling
        while True:
            # Progress moves the idle deadline on; the ceiling never moves.
            idle_at = ctx.tail.idle_since + budget
            left = min(idle_at, stop_at) - time.monotonic()
            if left <= 0:
                break
            done, _ = await asyncio.wait(waiting, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if done:
                return done, ""
        if idle_at <= stop_at:
            return set(), f"timed out after {budget:g} s without progress"
        return set(), f"stopped at its limit of {ceiling:g} s, still reporting progress"

    async def _cap(self, result: ToolResult, ctx: ToolContext) -> ToolResult:
        text = result.content
        ceiling = self.effective_ceiling(ctx)
        if len(text) <= ceiling:
            return result
        ref = None
        if self.persist_full and ctx.store is not None:
            put = functools.partial(ctx.store.put, tool=self.name, text=text, ctx=ctx)
            stored = await _quietly(put)
            ref = stored if isinstance(stored, str) else None
        marker = _marker(len(text), ref)
        keep = max(ceiling - len(marker), 0)
        head = int(keep * self.head_ratio)
        tail = keep - head
        marker = _marker(len(text) - keep, ref)
        capped = text[:head] + marker + (text[len(text) - tail :] if tail else "")
        # Only the text is cut: images, files and structured content stay as they came.
        return replace(result, content=capped, truncated=True, full_ref=ref)


def _marker(omitted: int, ref: str | None) -> str:
    where = f"; full output: {ref}" if ref else ""
    return f"\n\n[… {omitted:,} characters omitted{where} …]\n\n"


async def _quietly(call: Callable[..., Any], *args: Any) -> Any:
    """Run a cache or store call off the event loop (they may do network or disk I/O);
    a failure there degrades to a miss, never to a failed tool."""
    try:
        return await asyncio.to_thread(call, *args)
    except Exception:
        logger.warning("tool result cache or store failed", exc_info=True)
        return None


async def _stop(task: asyncio.Future[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def _to_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return canonical_json(value) if _jsonable(value) else str(value)


def _jsonable(value: Any) -> bool:
    try:
        canonical_json(value)
    except (TypeError, ValueError):
        return False
    return True


def _origin(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def _evaluate_available_if(rule: bool | Callable[[], bool]) -> tuple[bool, str]:
    if not callable(rule):
        return bool(rule), "available_if is false"
    try:
        return bool(rule()), "available_if returned false"
    except Exception as exc:
        return False, f"available_if raised {type(exc).__name__}: {exc}"


class ToolOptions(TypedDict, total=False):
    """The keyword arguments of ``function`` that become ``Tool`` fields as given (the
    three name lists become tuples)."""

    max_result_chars: int
    head_ratio: float
    persist_full: bool
    stream_capacity_chars: int | None
    timeout: float | None
    timeout_min: float | None
    timeout_max: float | None
    timeout_ceiling: float | None
    cache: bool
    cache_ttl: float
    cache_per_user: bool
    check_fn: Callable[[], bool] | None
    requires_env: Iterable[str]
    can_use: Callable[[ToolContext], bool] | None
    requires_approval: ApprovalRule
    expose: bool
    toolset: Iterable[str]
    unsafe_in: Iterable[str]
    defer: bool
    runs_on: str
    source: str


class FunctionOptions(ToolOptions, total=False):
    """Everything ``function`` takes: the Tool fields, and how the tool is built and
    registered."""

    name: str | None
    description: str | None
    parameters: Mapping[str, Any] | None
    label: str | None
    available_if: bool | Callable[[], bool]
    register_globally: bool
    registry: Any


_NAME_LISTS = frozenset({"requires_env", "toolset", "unsafe_in"})


@overload
def function(
    fn: Callable[..., Any],
    **options: Unpack[FunctionOptions],
) -> Tool: ...


@overload
def function(
    fn: None = None,
    **options: Unpack[FunctionOptions],
) -> Callable[[Callable[..., Any]], Tool]: ...


def function(
    fn: Callable[..., Any] | None = None,
    **options: Unpack[FunctionOptions],
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a plain (sync or async) function into a ``Tool`` and register it.

    Used bare (``@function``) or with keyword arguments (``@function(timeout=5)``), all
    optional. Returns the ``Tool``, which stays callable.

    - ``name``, ``description``, ``parameters``, ``label``: what the model and the pages
      see; derived from the signature, type hints and docstring when not given.
    - ``max_result_chars``, ``head_ratio``, ``persist_full``: the result cap (head and tail
      kept around a marker; the whole text optionally stored and linked).
    - ``stream_capacity_chars``: the bound of the streamed tail (default: the cap).
    - ``timeout``, ``timeout_min``, ``timeout_max``: a static timeout, or, when the function
      takes a ``timeout`` argument, the range the model's value is clamped into.
    - ``timeout_ceiling``: makes ``timeout`` an idle limit that progress restarts, with
      this hard limit on the whole call.
    - ``cache``, ``cache_ttl``, ``cache_per_user``: memoize on the canonical arguments.
    - ``check_fn``, ``requires_env``, ``can_use``: "can run now" gates (layer L4).
    - ``requires_approval``: ask the person first (a bool, or a rule of the arguments).
    - ``expose`` (L2), ``toolset`` (L2b presets it joins), ``unsafe_in`` (L3 channels and
      modes where it is hidden), ``available_if`` (L1, decided at registration), ``defer``
      (L6, catalog line until loaded).
    - ``runs_on``: ``inline`` or ``worker`` (a Celery task); ``register_globally=False``
      builds the tool without registering it.
    """
    unknown = sorted(set(options) - FunctionOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"function() got unexpected keyword arguments: {', '.join(unknown)}")
    name = options.pop("name", None)
    description = options.pop("description", None)
    parameters = options.pop("parameters", None)
    label = options.pop("label", None)
    available_if = options.pop("available_if", True)
    register_globally = options.pop("register_globally", True)
    registry = options.pop("registry", None)
    fields: dict[str, Any] = {
        key: tuple(value) if key in _NAME_LISTS else value  # type: ignore[arg-type]
        for key, value in options.items()
    }

    def build(target: Callable[..., Any]) -> Tool:
        if parameters is not None:
            check_schema(parameters)
        doc_description, param_docs = parse_docstring(inspect.getdoc(target))
        tool_name = name or target.__name__
        tool = Tool(
            name=tool_name,
            description=description if description is not None else doc_description,
            parameters=dict(parameters)
            if parameters is not None
            else signature_schema(target, param_docs),
            fn=target,
            label=label or tool_name.replace("_", " ").capitalize(),
            origin=_origin(target),
            **fields,
        )
        if register_globally:
            from toolhub.tools.registry import registry as default_registry

            target_registry = registry if registry is not None else default_registry
            available, reason = _evaluate_available_if(available_if)
            if available:
                target_registry.register(tool)
            else:
                target_registry.skip(tool, reason)
        return tool

    if fn is not None:
        return build(fn)
    return build


__all__ = [
    "INJECTED_PARAMETERS",
    "FunctionOptions",
    "Tool",
    "ToolOptions",
    "ToolResult",
    "ToolUnavailable",
    "function",
]
