"""OpenAPI field types shared by the apps' API modules: the documented constraints are the
ones the services enforce (names, intents, profile imports, text, URLs).

A pattern here is the regex the server checks, not a description of it: the service's own
constant, or the validator the field helper gives DRF. Patterns are written so both
JSON Schema (ECMA) and Python read them alike: whitespace is spelled out instead of ``\\s``
(the two disagree on it), and nothing needs a lookaround.

OpenAPI 3.0 cannot constrain an object's keys; ``x-propertyNames`` carries the JSON Schema
``propertyNames`` the server applies (the schema test holds generated requests to it).
"""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator, URLValidator
from drf_spectacular.utils import OpenApiParameter, extend_schema_field
from rest_framework import serializers

from toolhub.tools.intent import MAX_NAMES, MAX_TOOLSET_CHARS, PROFILE_NAME_PATTERN
from toolhub.tools.layers import META_TOOLS
from toolhub.tools.tool import NAME_PATTERN

# What str.isspace() calls whitespace: what the services strip, and what "blank" means.
WHITESPACE = r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# DRF refuses NUL in every text field. Non-empty: a blank-allowed field documents "" apart.
TEXT_PATTERN = r"^[^\x00]+$"
# Something that is not whitespace. The leading class and the next one are disjoint, so a
# long blank string is refused in one pass.
NONBLANK_PATTERN = rf"^[{WHITESPACE}]*[^{WHITESPACE}\x00][^\x00]*$"

TOOL_NAME = {"type": "string", "pattern": NAME_PATTERN.pattern, "maxLength": 64}
NAME_LIST = {"type": "array", "items": TOOL_NAME, "maxItems": MAX_NAMES}
# tool_search and call_tool can be neither disabled nor removed.
REMOVABLE_TOOL = {**TOOL_NAME, "not": {"enum": sorted(META_TOOLS)}}
TOOL_PATH = OpenApiParameter(
    "tool",
    # The meta tools match the name pattern but take no policy: the schema says so too.
    {"type": "string", "pattern": NAME_PATTERN.pattern, "not": {"enum": sorted(META_TOOLS)}},
    OpenApiParameter.PATH,
    description="A tool's name (tool_search and call_tool take no policy: 400 meta_tool)",
)
INTENT = {
    "description": "Tool intent (docs/architecture.md, Glossary); true/false/null and a list of "
    "picked "
    "names are accepted as legacy forms. `toolset` names a preset or one of your profiles "
    "(a shared one for a shared agent); any other name is refused with 400.",
    "oneOf": [
        {"type": "boolean"},
        NAME_LIST,
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "enabled": {"type": "boolean", "nullable": True},
                "toolset": {
                    "type": "string",
                    "nullable": True,
                    "maxLength": MAX_TOOLSET_CHARS,
                    "pattern": NONBLANK_PATTERN,
                },
                "disabled": {**NAME_LIST, "nullable": True},
                "allowed": {**NAME_LIST, "nullable": True},
                "web_search": {"type": "boolean", "nullable": True},
                "picked": {**NAME_LIST, "nullable": True},
            },
        },
    ],
    "nullable": True,
}
PROFILE_NAME = {"type": "string", "pattern": PROFILE_NAME_PATTERN}
PROFILE_ENTRY = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": PROFILE_NAME,
        "mode": {"type": "string", "enum": ["all_except", "only"]},
        "tools": NAME_LIST,
    },
}
PROFILES_IMPORT = {
    "oneOf": [
        {"type": "array", "items": PROFILE_ENTRY, "maxItems": MAX_NAMES},
        {
            "type": "object",
            "description": "functions_meta.json: profile name -> picked tool names",
            "additionalProperties": NAME_LIST,
            "maxProperties": MAX_NAMES,
            "x-propertyNames": PROFILE_NAME,
        },
    ]
}

# The URLs documented for an MCP server: http(s) to a name, an IPv4 address or localhost,
# a subset of what Django's URLValidator takes. Labels and their count are bounded so the
# host stays within the 253 characters the validator allows.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38}[A-Za-z0-9])?"
_HOST = rf"(?:localhost|{URLValidator.ipv4_re}|{_LABEL}(?:\.{_LABEL}){{0,4}}\.[A-Za-z]{{2,24}})"
_URL_CHARS = r"[A-Za-z0-9._~!$&'()*+,;=:@/?-]"
URL_PATTERN = rf"^https?://{_HOST}(?::[0-9]{{1,5}})?(?:[/?]{_URL_CHARS}*)?$"


def url_schema(*, max_length: int, blank: bool) -> dict[str, Any]:
    url = {"type": "string", "format": "uri", "pattern": URL_PATTERN, "maxLength": max_length}
    return {"oneOf": [url, {"type": "string", "maxLength": 0}]} if blank else url


def string_map_schema(*, keys: str, values: str, max_length: int) -> dict[str, Any]:
    """An object of strings whose keys match ``keys`` and values match ``values``."""
    return {
        "type": "object",
        "additionalProperties": {"type": "string", "pattern": values, "maxLength": max_length},
        "x-propertyNames": {"type": "string", "pattern": keys},
    }


@extend_schema_field(INTENT)
class IntentField(serializers.JSONField):
    """An intent in any form ``ToolIntent.parse`` reads, null (no preference) included."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)


@extend_schema_field(PROFILES_IMPORT)
class ProfilesImportField(serializers.JSONField):
    pass


@extend_schema_field(REMOVABLE_TOOL)
class RemovableToolNameField(serializers.CharField):
    pass


@extend_schema_field(NAME_LIST)
class ToolNameListField(serializers.ListField):
    pass


@extend_schema_field(
    {
        "type": "object",
        "description": "Tool name -> auto, ask or deny (tool_search and call_tool take no "
        "policy: 400 meta_tool).",
        "maxProperties": MAX_NAMES,
        "additionalProperties": {"type": "string", "enum": ["auto", "ask", "deny"]},
        "x-propertyNames": TOOL_NAME,
    }
)
class ApprovalsField(serializers.DictField):
    """Tool name -> auto, ask or deny; checked by the service (``clean_approvals``)."""

    def to_internal_value(self, data: Any) -> Any:
        # The service says what is wrong, naming the tool, as the Programs page does.
        return data


def name_field(**kwargs: object) -> serializers.CharField:
    return serializers.CharField(
        max_length=64, validators=[RegexValidator(PROFILE_NAME_PATTERN)], **kwargs
    )


def text_field(*, max_length: int, blank: bool = False, **kwargs: Any) -> serializers.CharField:
    """Text as the API takes it, checked as sent (``toolhub.lib.api.validated_body``): no NUL,
    at most ``max_length`` characters and, unless ``blank``, something that is not
    whitespace. The documented pattern is the validator's."""
    if blank:
        validator = RegexValidator(TEXT_PATTERN, "must be text without NUL characters")
    else:
        validator = RegexValidator(
            NONBLANK_PATTERN, "must be text, not only whitespace, without NUL"
        )
    return serializers.CharField(
        max_length=max_length,
        allow_blank=blank,
        trim_whitespace=False,
        validators=[validator],
        **kwargs,
    )
