"""``@function``: a plain (sync or async) Python function becomes a registered ``Tool``.

What the model sees is derived from the function when not given: the name from its name,
the description and each parameter's note from its docstring, the parameter schema from
its signature and type hints (``schema``). Every other option is a ``Tool`` field, passed
through as given (``ToolOptions``).

Invariants: an unknown option is a ``TypeError`` at declaration, never ignored; a given
schema is checked when the tool is built; layer 1 (``available_if``) is decided once, at
registration, and a tool it rules out is remembered by the registry with the reason
instead of registered.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack, overload

from toolhub.tools.context import ToolContext
from toolhub.tools.registry import registry as default_registry
from toolhub.tools.schema import check_schema, parse_docstring, signature_schema
from toolhub.tools.tool import ApprovalRule, Tool


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
    declaration = _Declaration(
        name=options.pop("name", None),
        description=options.pop("description", None),
        parameters=options.pop("parameters", None),
        label=options.pop("label", None),
        available_if=options.pop("available_if", True),
        register_globally=options.pop("register_globally", True),
        registry=options.pop("registry", None),
        fields={
            # mypy sees each value as the union of every option's type; the name lists are
            # the iterables among them.
            key: tuple(value) if key in _NAME_LISTS else value  # type: ignore[arg-type]
            for key, value in options.items()
        },
    )
    if fn is not None:
        return declaration.build(fn)
    return declaration.build


@dataclass(frozen=True, slots=True)
class _Declaration:
    """One ``function`` call's options: how to build the tool, and where it registers."""

    name: str | None
    description: str | None
    parameters: Mapping[str, Any] | None
    label: str | None
    available_if: bool | Callable[[], bool]
    register_globally: bool
    registry: Any
    fields: dict[str, Any]

    def build(self, target: Callable[..., Any]) -> Tool:
        if self.parameters is not None:
            check_schema(self.parameters)
        doc_description, param_docs = parse_docstring(inspect.getdoc(target))
        tool_name = self.name or target.__name__
        tool = Tool(
            name=tool_name,
            description=self.description if self.description is not None else doc_description,
            parameters=dict(self.parameters)
            if self.parameters is not None
            else signature_schema(target, param_docs),
            fn=target,
            label=self.label or tool_name.replace("_", " ").capitalize(),
            origin=_origin(target),
            **self.fields,
        )
        if self.register_globally:
            target_registry = self.registry if self.registry is not None else default_registry
            available, reason = _evaluate_available_if(self.available_if)
            if available:
                target_registry.register(tool)
            else:
                target_registry.skip(tool, reason)
        return tool


def _origin(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def _evaluate_available_if(rule: bool | Callable[[], bool]) -> tuple[bool, str]:
    if not callable(rule):
        return bool(rule), "available_if is false"
    try:
        return bool(rule()), "available_if returned false"
    except Exception as exc:
        return False, f"available_if raised {type(exc).__name__}: {exc}"
