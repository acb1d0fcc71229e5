"""OpenAPI field types shared by the apps' API modules: the documented constraints are the
ones the services enforce (names, intents, profile imports)."""

from __future__ import annotations

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from profiles_app.models import PROFILE_NAME_PATTERN
from toolhub.tools.intent import MAX_NAMES, MAX_TOOLSET_CHARS
from toolhub.tools.tool import NAME_PATTERN

TOOL_NAME = {"type": "string", "pattern": NAME_PATTERN.pattern, "maxLength": 64}
NAME_LIST = {"type": "array", "items": TOOL_NAME, "maxItems": MAX_NAMES}
INTENT = {
    "description": "Tool intent (DESIGN.md section 4); true/false/null and a list of picked "
    "names are accepted as legacy forms.",
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
                    "minLength": 1,
                    "maxLength": MAX_TOOLSET_CHARS,
                    "pattern": r"\S",
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
PROFILE_ENTRY = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": PROFILE_NAME_PATTERN},
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
        },
    ]
}


@extend_schema_field(INTENT)
class IntentField(serializers.JSONField):
    pass


@extend_schema_field(PROFILES_IMPORT)
class ProfilesImportField(serializers.JSONField):
    pass


@extend_schema_field(TOOL_NAME)
class ToolNameField(serializers.CharField):
    pass


@extend_schema_field(NAME_LIST)
class ToolNameListField(serializers.ListField):
    pass


def name_field(**kwargs: object) -> serializers.CharField:
    return serializers.CharField(
        max_length=64, validators=[RegexValidator(PROFILE_NAME_PATTERN)], **kwargs
    )
