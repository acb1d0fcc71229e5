"""JSON API for the tool catalog and a person's tool profiles: list, read, change (with a
preview), delete, export and import.

Every write to a profile names the version it read (``If-Match``, or ``version`` in a
form's body) and answers with the new one as its ETag; a preview (``?preview=true``) is
checked exactly as the real change and writes nothing.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from profiles_app import services
from profiles_app.models import ToolProfile
from toolhub.lib.api import (
    IF_MATCH,
    error_responses,
    etag,
    json_object,
    read_version,
    validated_body,
)
from toolhub.lib.api_schema import (
    ApprovalsField,
    ProfilesImportField,
    ToolNameListField,
    name_field,
)


class ProfileSerializer(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True)
    name = serializers.CharField()
    source = serializers.ChoiceField(["builtin", "preset", "shared", "user"])
    mode = serializers.ChoiceField(["all_except", "only"])
    tools = serializers.ListField(child=serializers.CharField())
    missing = serializers.ListField(child=serializers.CharField())
    readonly = serializers.BooleanField()
    version = serializers.IntegerField(allow_null=True)
    approvals = ApprovalsField(
        help_text="Tool -> auto (run without asking), ask (ask every time) or deny (never run) "
        "in chats using this profile. A person's auto does not lift an operator's ask."
    )


class ModeSwitchSerializer(serializers.Serializer):
    """What a change of mode did, or with ``?preview=true`` would do."""

    applied = serializers.BooleanField(help_text="false for ?preview=true: nothing was written")
    mode = serializers.ChoiceField(["all_except", "only"], help_text="The mode switched to")
    pinned = serializers.IntegerField(
        help_text="Switched to only: the tools it now picks (tools added later stay out)"
    )
    removed = serializers.IntegerField(
        help_text="Switched to all_except: the tools listed as removed (tools added later join)"
    )
    message = serializers.CharField(
        help_text="What it does, as the Programs page says it: "
        "'18 tools will be pinned; tools added later will stay out.' (preview), "
        "'Switched to only: 18 tools pinned.' (applied)"
    )
    previous = inline_serializer(
        "ModeSwitchPrevious",
        {
            "mode": serializers.ChoiceField(["all_except", "only"]),
            "tools": serializers.ListField(child=serializers.CharField()),
        },
        help_text="The mode and list before. To undo, PATCH them back with If-Match set to "
        "the ETag of this answer; if the profile changed since, that is a 412.",
    )


class ProfileChangeSerializer(ProfileSerializer):
    switch = ModeSwitchSerializer(
        allow_null=True, help_text="Set when the mode changed (or would change); else null"
    )


PREVIEW = OpenApiParameter(
    "preview",
    OpenApiTypes.BOOL,
    OpenApiParameter.QUERY,
    description="true: a dry run. The change is checked exactly as for real and the answer "
    "is the profile as it would be (with its `switch`), but nothing is written; `version` "
    "and the ETag stay those of the profile now, ready for the real PATCH.",
)


class ProfileWriteSerializer(serializers.Serializer):
    """A new profile (name required) or, partially, a change; the version a change is
    based on travels in If-Match (or, from a form, ``version`` in the body)."""

    name = name_field()
    mode = serializers.ChoiceField(["all_except", "only"], required=False)
    tools = ToolNameListField(child=serializers.CharField(), required=False)
    approvals = ApprovalsField(required=False)
    shared = serializers.BooleanField(required=False)


ToolListSerializer = inline_serializer(
    "Tool",
    many=True,
    fields={
        "name": serializers.CharField(),
        "label": serializers.CharField(),
        "description": serializers.CharField(),
        "presets": serializers.ListField(child=serializers.CharField()),
        "deferred": serializers.BooleanField(),
        "runs_on": serializers.CharField(),
        "source": serializers.CharField(),
        "effect": serializers.ChoiceField(
            ["read-only", "additive", "destructive", "unknown"],
            allow_null=True,
            help_text="What an MCP tool's annotations say it does (null for other tools): "
            "additive changes things but never destroys; unknown: its server gave no hints",
        ),
        "available": serializers.BooleanField(),
        "layer": serializers.CharField(allow_null=True),
        "reason": serializers.CharField(allow_null=True),
        "approval": serializers.ChoiceField(
            ["auto", "ask", "rule"],
            help_text="Before any profile: auto runs without asking, ask asks every time, "
            "rule asks for some arguments only",
        ),
        "approval_by": serializers.ChoiceField(["author", "operator"]),
    },
)


_PROFILE_FIELDS = tuple(field.name for field in fields(services.ProfileView))


def profile_json(view: services.ProfileView) -> dict[str, Any]:
    # Field by field, not dataclasses.asdict: that deep-copies every tuple, a third of the
    # profiles list's time.
    data = {name: getattr(view, name) for name in _PROFILE_FIELDS}
    data["tools"], data["missing"] = list(view.tools), list(view.missing)
    data["approvals"] = dict(view.approvals)
    return data


def _stored_json(profile: ToolProfile, user: Any) -> dict[str, Any]:
    view = next(view for view in services.profiles_for_user(user=user) if view.id == profile.pk)
    return profile_json(view)


def _change_json(change: services.ProfileChange) -> dict[str, Any]:
    data, switch = profile_json(change.view), change.switch
    if switch is None:
        return {**data, "switch": None}
    data["switch"] = {
        "applied": change.applied,
        "mode": switch.mode,
        "pinned": switch.pinned,
        "removed": switch.removed,
        "message": switch.done if change.applied else switch.preview,
        "previous": {"mode": switch.previous_mode, "tools": list(switch.previous_tools)},
    }
    return data


def _preview(request: Request) -> bool:
    value: str = request.query_params.get("preview", "false")
    if value not in {"true", "false"}:
        raise exceptions.ValidationError({"preview": ["must be true or false"]})
    return value == "true"


def _with_etag(data: dict[str, Any], version: int | None, status_code: int = 200) -> Response:
    response = Response(data, status=status_code)
    if version is not None:
        response["ETag"] = etag(version)
    return response


class ToolCatalogView(APIView):
    @extend_schema(responses=ToolListSerializer)
    def get(self, request: Request) -> Response:
        return Response(services.tool_catalog(ctx=services.catalog_context(user=request.user)))


class ProfileListView(APIView):
    @extend_schema(responses=ProfileSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(
            [profile_json(view) for view in services.profiles_for_user(user=request.user)]
        )

    @extend_schema(
        request=ProfileWriteSerializer,
        responses={201: ProfileSerializer, **error_responses(409)},
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, ProfileWriteSerializer)
        profile = services.profile_create(
            user=request.user,
            name=data["name"],
            mode=data.get("mode", "all_except"),
            tools=data.get("tools", []),
            approvals=data.get("approvals", {}),
            shared=data.get("shared") is True,
        )
        return _with_etag(_stored_json(profile, request.user), profile.version, 201)


class ProfileDetailView(APIView):
    @extend_schema(responses=ProfileSerializer)
    def get(self, request: Request, profile_id: int) -> Response:
        profile = services.profile_get_for_user(user=request.user, profile_id=profile_id)
        return _with_etag(_stored_json(profile, request.user), profile.version)

    @extend_schema(
        request=ProfileWriteSerializer,
        parameters=[IF_MATCH, PREVIEW],
        responses={200: ProfileChangeSerializer, **error_responses(409, 412, 428)},
        description="Change the fields given. A new `mode` without `tools` switches between "
        "all_except and only keeping what the profile offers today: to only, every tool "
        "offered now is pinned (tools added later stay out); to all_except, every tool not "
        "offered now is listed as removed (tools added later join). The answer's `switch` "
        "says what was pinned or removed and what was there before, to undo it. "
        "With `?preview=true` nothing is written.",
    )
    def patch(self, request: Request, profile_id: int) -> Response:
        profile = services.profile_get_for_user(user=request.user, profile_id=profile_id)
        preview = _preview(request)
        data = validated_body(request, ProfileWriteSerializer, partial=True)
        change = services.profile_change(
            user=request.user,
            profile=profile,
            version=read_version(request),
            name=data.get("name"),
            mode=data.get("mode"),
            tools=data.get("tools"),
            approvals=data.get("approvals"),
            preview=preview,
        )
        return _with_etag(_change_json(change), change.view.version)

    @extend_schema(parameters=[IF_MATCH], responses={204: None, **error_responses(409, 412, 428)})
    def delete(self, request: Request, profile_id: int) -> Response:
        profile = services.profile_get_for_user(user=request.user, profile_id=profile_id)
        services.profile_delete(user=request.user, profile=profile, version=read_version(request))
        return Response(status=204)


class ProfileExportView(APIView):
    @extend_schema(
        responses=inline_serializer(
            "ProfileExport",
            {
                "format": serializers.CharField(),
                "profiles": serializers.ListField(child=serializers.DictField()),
            },
        )
    )
    def get(self, request: Request) -> Response:
        return Response(services.profile_export(user=request.user))


class ProfileImportView(APIView):
    @extend_schema(
        request=inline_serializer(
            "ProfileImport",
            {
                "profiles": ProfilesImportField(),
                "active": serializers.CharField(
                    required=False,
                    help_text="functions_meta.json: the profile new chats start with",
                ),
            },
        ),
        responses={
            201: inline_serializer(
                "ProfileImportReport",
                {
                    "created": serializers.ListField(child=serializers.CharField()),
                    "unknown_tools": serializers.DictField(),
                    "mapped": serializers.DictField(
                        child=serializers.CharField(),
                        help_text="Names of the file not imported as they stood, and why",
                    ),
                    "active": serializers.CharField(
                        help_text="What the file's 'active' did to new chats ('' without one)"
                    ),
                },
            ),
            **error_responses(409),
        },
    )
    def post(self, request: Request) -> Response:
        report = services.profile_import(user=request.user, data=json_object(request))
        return Response(
            {
                "created": list(report.created),
                "unknown_tools": report.unknown_tools,
                "mapped": report.mapped,
                "active": report.active,
            },
            status=201,
        )
