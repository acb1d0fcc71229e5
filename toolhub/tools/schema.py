"""From a Python signature and docstring to the JSON Schema a model sees, and back.

The schema is derived once, at decoration time: the first docstring paragraph is the
description, Google-style ``Args:`` lines describe parameters, and type hints give types
(str, int, float, bool, list[...], dict, Literal, Optional, defaults). The top-level object
is closed (``additionalProperties: false``) so a misspelt argument is an error the model can
fix; a free-form ``dict`` parameter stays an open object. Parameters the runtime injects
(``ctx``) never appear in the schema. Unsupported annotations fail loudly at decoration.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

INJECTED_PARAMETERS = frozenset({"ctx"})

_PRIMITIVES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?)\s*:\s*$"
)
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Return (description, {parameter: description}) from a Google-style docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    index = 0
    while index < len(lines) and lines[index].strip() and not _SECTION.match(lines[index]):
        summary.append(lines[index].strip())
        index += 1
    params: dict[str, str] = {}
    section = ""
    current = ""
    arg_indent = None
    for line in lines[index:]:
        header = _SECTION.match(line)
        if header:
            section = header.group(1).lower()
            current, arg_indent = "", None
            continue
        if section not in {"args", "arguments", "parameters"} or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        match = _ARG_LINE.match(line.strip())
        if match and (arg_indent is None or indent <= arg_indent):
            arg_indent = indent
            current = match.group(1).lstrip("*")
            params[current] = match.group(2).strip()
        elif current:
            params[current] = f"{params[current]} {line.strip()}".strip()
    return " ".join(summary), params


def _is_optional(annotation: Any) -> tuple[bool, Any]:
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(args) != len(typing.get_args(annotation)):
            inner = args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007
            return True, inner
    return False, annotation


def annotation_schema(annotation: Any, *, where: str) -> dict[str, Any]:
    """JSON Schema for one annotation; ``where`` names the parameter in errors."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    schema: dict[str, Any]
    optional, inner = _is_optional(annotation)
    if optional:
        schema = annotation_schema(inner, where=where)
        kind = schema.get("type")
        if isinstance(kind, str):
            return {**schema, "type": [kind, "null"]}
        return {"anyOf": [schema, {"type": "null"}]}
    if annotation in _PRIMITIVES:
        return {"type": _PRIMITIVES[annotation]}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        kinds = {_PRIMITIVES.get(type(value)) for value in args}
        schema = {"enum": list(args)}
        if len(kinds) == 1 and None not in kinds:
            schema["type"] = kinds.pop()
        return schema
    if annotation is list or origin is list or annotation is tuple or origin is tuple:
        schema = {"type": "array"}
        if args and origin is list:
            schema["items"] = annotation_schema(args[0], where=where)
        return schema
    if annotation is dict or origin is dict:
        schema = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            schema["additionalProperties"] = annotation_schema(args[1], where=where)
        return schema
    if origin in (Union, types.UnionType):
        return {"anyOf": [annotation_schema(arg, where=where) for arg in args]}
    raise TypeError(f"{where}: unsupported type annotation {annotation!r}")


def signature_schema(
    fn: Callable[..., Any], param_docs: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The closed object schema for ``fn``'s parameters (injected ones left out)."""
    hints = typing.get_type_hints(fn, include_extras=False)
    param_docs = param_docs or {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if name in INJECTED_PARAMETERS:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{fn.__qualname__}: *args and **kwargs cannot be described to a model")
        schema = annotation_schema(
            hints.get(name, param.annotation), where=f"{fn.__qualname__}({name})"
        )
        if param_docs.get(name):
            schema["description"] = param_docs[name]
        if param.default is param.empty:
            required.append(name)
        elif param.default is not None and _json_safe(param.default):
            schema["default"] = param.default
        properties[name] = schema
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def _json_safe(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


class ArgumentError(ValueError):
    """Arguments that do not match a tool's schema; the message names the field."""


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise if ``schema`` is not valid JSON Schema. Derived schemas are valid by
    construction, so only hand-written ones (``parameters=``, MCP) need this; it is the
    expensive part of registration, so identical schemas are checked once."""
    _check_schema_text(canonical_json(schema))


@functools.lru_cache(maxsize=4096)
def _check_schema_text(text: str) -> None:
    Draft202012Validator.check_schema(json.loads(text))


def compile_validator(schema: Mapping[str, Any]) -> Draft202012Validator:
    """The check of a call's arguments. A property the schema both requires and gives a
    default (Playwright MCP's ``scale``) may be left out: whoever runs the tool applies
    the default, so refusing ``{}`` here would be stricter than the tool itself."""
    return Draft202012Validator(_defaults_not_required(schema))


def _defaults_not_required(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    required = schema.get("required")
    properties = schema.get("properties")
    if not isinstance(required, list) or not isinstance(properties, Mapping):
        return schema
    kept = [
        name
        for name in required
        if not (isinstance(properties.get(name), Mapping) and "default" in properties[name])
    ]
    if len(kept) == len(required):
        return schema
    return {**schema, "required": kept}


def validate_arguments(validator: Draft202012Validator, arguments: Any) -> None:
    error = best_match(validator.iter_errors(arguments))
    if error is None:
        return
    field = ".".join(str(part) for part in error.absolute_path)
    if error.validator == "required":
        missing = re.search(r"'([^']+)' is a required property", error.message)
        field = missing.group(1) if missing else field
        raise ArgumentError(f"missing required argument '{field}'")
    if error.validator == "additionalProperties" and not field:
        raise ArgumentError(f"unexpected argument: {error.message}")
    where = f"argument '{field}'" if field else "arguments"
    raise ArgumentError(f"{where}: {error.message}")


def canonical_json(value: Any) -> str:
    """One byte-exact serialization: sorted keys, fixed separators, UTF-8 kept as is.
    ``NaN`` and the infinities raise ``ValueError``: they are not JSON, and a provider
    refuses a body that holds them."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
