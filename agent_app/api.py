"""JSON API for agents (agent profiles) and, for staff, MCP servers."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agent_app import mcp, services
from agent_app.models import Agent, McpServer
from toolhub.api import etag, read_version, validated_body
from toolhub.api_schema import IntentField, name_field
from toolhub.tools.mcp import SERVER_NAME


class AgentSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    name = name_field()
    shared = serializers.BooleanField(required=False)
    system_prompt = serializers.CharField(required=False, allow_blank=True, max_length=20_000)
    provider = serializers.ChoiceField(["", "demo", "anthropic", "openai"], required=False)
    model = serializers.CharField(required=False, allow_blank=True, max_length=100)
    context_window = serializers.IntegerField(required=False, min_value=1_000, max_value=10**7)
    tool_intent = IntentField(required=False)
    strategy = serializers.ChoiceField(["call_tool", "promote", "native"], required=False)
    tier_budget = serializers.IntegerField(
        required=False, allow_null=True, min_value=1_000, max_value=10**7
    )
    readonly = serializers.BooleanField(read_only=True)
    version = serializers.IntegerField(read_only=True)


def _agent_json(agent: Agent, user: Any) -> dict[str, Any]:
    return {
        "id": agent.pk,
        "name": agent.name,
        "shared": agent.is_shared,
        "system_prompt": agent.system_prompt,
        "provider": agent.provider,
        "model": agent.model,
        "context_window": agent.context_window,
        "tool_intent": agent.tool_intent,
        "strategy": agent.strategy,
        "tier_budget": agent.tier_budget,
        "readonly": agent.is_shared and not user.is_staff,
        "version": agent.version,
    }


def _respond(agent: Agent, user: Any, status_code: int = 200) -> Response:
    response = Response(_agent_json(agent, user), status=status_code)
    response["ETag"] = etag(agent.version)
    return response


class AgentListView(APIView):
    @extend_schema(responses=AgentSerializer(many=True))
    def get(self, request: Request) -> Response:
        agents = services.agents_visible_to(request.user)
        return Response([_agent_json(agent, request.user) for agent in agents])

    @extend_schema(request=AgentSerializer, responses={201: AgentSerializer})
    def post(self, request: Request) -> Response:
        data = validated_body(request, AgentSerializer)
        shared = data.pop("shared", False) is True
        data = {key: value for key, value in data.items() if key in services.EDITABLE}
        agent = services.agent_create(user=request.user, shared=shared, **data)
        return _respond(agent, request.user, 201)


class AgentDetailView(APIView):
    @extend_schema(responses=AgentSerializer)
    def get(self, request: Request, agent_id: int) -> Response:
        agent = services.agent_get_for_user(user=request.user, agent_id=agent_id)
        return _respond(agent, request.user)

    @extend_schema(request=AgentSerializer, responses=AgentSerializer)
    def patch(self, request: Request, agent_id: int) -> Response:
        agent = services.agent_get_for_user(user=request.user, agent_id=agent_id)
        data = validated_body(request, AgentSerializer, partial=True)
        fields = {key: value for key, value in data.items() if key in services.EDITABLE}
        agent = services.agent_update(
            user=request.user, agent=agent, version=read_version(request), **fields
        )
        return _respond(agent, request.user)


class McpServerSerializer(serializers.Serializer):
    """An MCP server; ``env`` and ``headers`` are written, never read back (the response
    carries ``env_keys`` and ``header_names``)."""

    id = serializers.IntegerField(read_only=True)
    name = serializers.RegexField(SERVER_NAME.pattern, max_length=24)
    transport = serializers.ChoiceField(["stdio", "streamable_http"])
    command = serializers.CharField(required=False, allow_blank=True, max_length=500)
    args = serializers.ListField(
        child=serializers.CharField(max_length=2_000), required=False, max_length=100
    )
    env = serializers.DictField(
        child=serializers.CharField(max_length=8_000), required=False, write_only=True
    )
    env_keys = serializers.ListField(child=serializers.CharField(), read_only=True)
    url = serializers.URLField(required=False, allow_blank=True, max_length=500)
    headers = serializers.DictField(
        child=serializers.CharField(max_length=8_000), required=False, write_only=True
    )
    header_names = serializers.ListField(child=serializers.CharField(), read_only=True)
    enabled = serializers.BooleanField(required=False)
    defer = serializers.BooleanField(required=False)
    timeout = serializers.FloatField(required=False, min_value=0.1, max_value=3_600)
    allowlist = serializers.ListField(
        child=serializers.CharField(max_length=200),
        required=False,
        allow_null=True,
        max_length=1_000,
    )
    state = serializers.CharField(read_only=True)
    error = serializers.CharField(read_only=True)
    tools = serializers.IntegerField(read_only=True)
    since = serializers.DateTimeField(read_only=True, allow_null=True)


def _server_fields(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key in mcp.FIELDS}


class McpServerListView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(responses=McpServerSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response([mcp.server_json(server) for server in McpServer.objects.all()])

    @extend_schema(request=McpServerSerializer, responses={201: McpServerSerializer})
    def post(self, request: Request) -> Response:
        data = validated_body(request, McpServerSerializer)
        server = mcp.mcp_server_save(user=request.user, server=None, data=_server_fields(data))
        return Response(mcp.server_json(server), status=201)


class McpServerDetailView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(responses=McpServerSerializer)
    def get(self, request: Request, server_id: int) -> Response:
        return Response(mcp.server_json(get_object_or_404(McpServer, pk=server_id)))

    @extend_schema(request=McpServerSerializer, responses=McpServerSerializer)
    def patch(self, request: Request, server_id: int) -> Response:
        server = get_object_or_404(McpServer, pk=server_id)
        data = validated_body(request, McpServerSerializer, partial=True)
        server = mcp.mcp_server_save(user=request.user, server=server, data=_server_fields(data))
        return Response(mcp.server_json(server))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, server_id: int) -> Response:
        get_object_or_404(McpServer, pk=server_id).delete()
        return Response(status=204)
