"""JSON API for the tool catalog, profiles, global disables and the audit log."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.admin.models import LogEntry
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from profiles_app import services
from profiles_app.models import GlobalDisable, ToolProfile
from sessions_app.services import chat_services
from toolhub.api import (
    IF_MATCH,
    error_responses,
    etag,
    json_object,
    read_version,
    validated_body,
)
from toolhub.api_schema import (
    ProfilesImportField,
    RemovableToolNameField,
    ToolNameListField,
    name_field,
    text_field,
)
from toolhub.tools import ToolContext


class ProfileSerializer(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True)
    name = serializers.CharField()
    source = serializers.ChoiceField(["builtin", "preset", "shared", "user"])
    mode = serializers.ChoiceField(["all_except", "only"])
    tools = serializers.ListField(child=serializers.CharField())
    missing = serializers.ListField(child=serializers.CharField())
    readonly = serializers.BooleanField()
    version = serializers.IntegerField(allow_null=True)


class ProfileWriteSerializer(serializers.Serializer):
    """A new profile (name required) or, partially, a change; the version a change is
    based on travels in If-Match (or, from a form, ``version`` in the body)."""

    name = name_field()
    mode = serializers.ChoiceField(["all_except", "only"], required=False)
    tools = ToolNameListField(child=serializers.CharField(), required=False)
    shared = serializers.BooleanField(required=False)


class GlobalDisableSerializer(serializers.Serializer):
    tool = RemovableToolNameField()
    reason = text_field(max_length=500)
    created_by = serializers.CharField(read_only=True)
    created_at = serializers.DateTimeField(read_only=True)


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
        "available": serializers.BooleanField(),
        "layer": serializers.CharField(allow_null=True),
        "reason": serializers.CharField(allow_null=True),
    },
)


def _profile_json(view: services.ProfileView) -> dict[str, Any]:
    data = asdict(view)
    data["tools"], data["missing"] = list(view.tools), list(view.missing)
    return data


def _stored_json(profile: ToolProfile, user: Any) -> dict[str, Any]:
    view = next(view for view in services.profiles_for_user(user=user) if view.id == profile.pk)
    return _profile_json(view)


def _with_etag(data: dict[str, Any], version: int | None, status_code: int = 200) -> Response:
    response = Response(data, status=status_code)
    if version is not None:
        response["ETag"] = etag(version)
    return response


def catalog_context(user: Any) -> ToolContext:
    # A representative chat of this user, with a person in it: a workspace and the
    # interfaces a chat's tools have, so what is hidden is what a chat would hide.
    return ToolContext(
        user_id=str(user.pk),
        session_id="catalog",
        workspace=Path(settings.TOOLHUB_WORKSPACE_ROOT),
        services=chat_services(attended=True),
    )


class ToolCatalogView(APIView):
    @extend_schema(responses=ToolListSerializer)
    def get(self, request: Request) -> Response:
        return Response(services.tool_catalog(ctx=catalog_context(request.user)))


class ProfileListView(APIView):
    @extend_schema(responses=ProfileSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(
            [_profile_json(view) for view in services.profiles_for_user(user=request.user)]
        )

    @extend_schema(
        request=ProfileWriteSerializer,
        responses={201: ProfileSerializer, **error_responses(409)},
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, ProfileWriteSerializer)
        profile = services.profile_create(
            user=request.user,
            name=data.get("name"),
            mode=data.get("mode", "all_except"),
            tools=data.get("tools", []),
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
        parameters=[IF_MATCH],
        responses={200: ProfileSerializer, **error_responses(409, 412, 428)},
    )
    def patch(self, request: Request, profile_id: int) -> Response:
        profile = services.profile_get_for_user(user=request.user, profile_id=profile_id)
        data = validated_body(request, ProfileWriteSerializer, partial=True)
        profile = services.profile_update(
            user=request.user,
            profile=profile,
            version=read_version(request),
            name=data.get("name"),
            mode=data.get("mode"),
            tools=data.get("tools"),
        )
        return _with_etag(_stored_json(profile, request.user), profile.version)

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


def _disable_json(row: GlobalDisable) -> dict[str, Any]:
    who = row.created_by.get_username() if row.created_by else None
    return {
        "tool": row.tool,
        "reason": row.reason,
        "created_by": who,
        "created_at": row.created_at.isoformat(),
    }


class GlobalDisableListView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(responses=GlobalDisableSerializer(many=True))
    def get(self, request: Request) -> Response:
        rows = GlobalDisable.objects.select_related("created_by")
        return Response([_disable_json(row) for row in rows])

    @extend_schema(
        request=GlobalDisableSerializer,
        responses={201: GlobalDisableSerializer, **error_responses(409)},
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, GlobalDisableSerializer)
        row = services.tool_disable_globally(
            user=request.user, tool=data.get("tool"), reason=data.get("reason")
        )
        return Response(_disable_json(row), status=201)


class GlobalDisableDetailView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(responses={204: None})
    def delete(self, request: Request, tool: str) -> Response:
        services.tool_enable_globally(user=request.user, tool=tool)
        return Response(status=204)


class AuditView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(
        responses=inline_serializer(
            "AuditEntry",
            {
                "time": serializers.DateTimeField(),
                "user": serializers.CharField(),
                "object": serializers.CharField(),
                "type": serializers.CharField(),
                "action": serializers.CharField(),
                "message": serializers.CharField(),
            },
            many=True,
        )
    )
    def get(self, request: Request) -> Response:
        entries = LogEntry.objects.select_related("user", "content_type").order_by("-action_time")[
            :200
        ]
        actions = {1: "added", 2: "changed", 3: "deleted"}
        return Response(
            [
                {
                    "time": entry.action_time.isoformat(),
                    "user": entry.user.get_username(),
                    "object": entry.object_repr,
                    "type": entry.content_type.model if entry.content_type else "",
                    "action": actions.get(entry.action_flag, "changed"),
                    "message": entry.get_change_message(),
                }
                for entry in entries
            ]
        )
