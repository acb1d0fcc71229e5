"""JSON API for what staff decide for everybody: global disables, operators' approval
policies, and the audit log of every change.

Every view here is staff only (``IsAdminUser``). An operator's deny is a global disable,
never a policy: a tool has one place that says it cannot run.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from profiles_app import services
from profiles_app.models import GlobalDisable, ToolApprovalPolicy
from toolhub.lib.api import error_responses, validated_body
from toolhub.lib.api_schema import TOOL_PATH, RemovableToolNameField, text_field


class GlobalDisableSerializer(serializers.Serializer):
    tool = RemovableToolNameField()
    reason = text_field(max_length=500)
    created_by = serializers.CharField(read_only=True)
    created_at = serializers.DateTimeField(read_only=True)


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
        return Response([_disable_json(row) for row in services.global_disable_rows()])

    @extend_schema(
        request=GlobalDisableSerializer,
        responses={201: GlobalDisableSerializer, **error_responses(409)},
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, GlobalDisableSerializer)
        row = services.tool_disable_globally(
            user=request.user, tool=data["tool"], reason=data["reason"]
        )
        return Response(_disable_json(row), status=201)


class GlobalDisableDetailView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(responses={204: None})
    def delete(self, request: Request, tool: str) -> Response:
        services.tool_enable_globally(user=request.user, tool=tool)
        return Response(status=204)


class ToolPolicySerializer(serializers.Serializer):
    tool = serializers.CharField(read_only=True)
    policy = serializers.ChoiceField(
        ["auto", "ask"],
        help_text="For everybody: auto runs without asking, ask asks every time (no person "
        "can lift it). An operator's deny is a global disable (/api/global-disables/).",
    )
    reason = text_field(max_length=500)
    created_by = serializers.CharField(read_only=True, allow_null=True)
    updated = serializers.DateTimeField(read_only=True)


def _policy_json(row: ToolApprovalPolicy) -> dict[str, Any]:
    return {
        "tool": row.tool,
        "policy": row.policy,
        "reason": row.reason,
        "created_by": row.created_by.get_username() if row.created_by else None,
        "updated": row.updated.isoformat(),
    }


class ToolPolicyListView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(responses=ToolPolicySerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response([_policy_json(row) for row in services.tool_policy_rows()])


class ToolPolicyDetailView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(
        request=ToolPolicySerializer,
        parameters=[TOOL_PATH],
        responses={200: ToolPolicySerializer, **error_responses(400, 409)},
        description="Set the tool's approval policy for everybody, in the admin log.",
    )
    def put(self, request: Request, tool: str) -> Response:
        data = validated_body(request, ToolPolicySerializer)
        row = services.tool_policy_set(
            user=request.user, tool=tool, policy=data["policy"], reason=data["reason"]
        )
        return Response(_policy_json(row))

    @extend_schema(
        parameters=[TOOL_PATH],
        responses={204: None},
        description="Back to what the tool's author set, for everybody.",
    )
    def delete(self, request: Request, tool: str) -> Response:
        services.tool_policy_clear(user=request.user, tool=tool)
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
        return Response([asdict(entry) for entry in services.audit_entries()])
