"""JSON API for agents (agent profiles) and, for staff, MCP servers."""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agent_app import mcp, services
from agent_app.models import Agent, McpServer
from toolhub.api import IF_MATCH, error_responses, etag, read_version, validated_body
from toolhub.api_schema import (
    NONBLANK_PATTERN,
    TEXT_PATTERN,
    WHITESPACE,
    IntentField,
    name_field,
    string_map_schema,
    text_field,
    url_schema,
)
from toolhub.tools.mcp import CONTROL_CHARS, ENV_NAME, HEADER_NAME, SERVER_NAME


class AgentSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    name = name_field()
    shared = serializers.BooleanField(required=False)
    system_prompt = text_field(required=False, blank=True, max_length=20_000)
    provider = serializers.ChoiceField(["", "demo", "anthropic", "openai"], required=False)
    model = text_field(required=False, blank=True, max_length=100)
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

    @extend_schema(
        request=AgentSerializer, responses={201: AgentSerializer, **error_responses(409)}
    )
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

    @extend_schema(
        request=AgentSerializer,
        parameters=[IF_MATCH],
        responses={200: AgentSerializer, **error_responses(409, 412, 428)},
    )
    def patch(self, request: Request, agent_id: int) -> Response:
        agent = services.agent_get_for_user(user=request.user, agent_id=agent_id)
        data = validated_body(request, AgentSerializer, partial=True)
        fields = {key: value for key, value in data.items() if key in services.EDITABLE}
        agent = services.agent_update(
            user=request.user, agent=agent, version=read_version(request), **fields
        )
        return _respond(agent, request.user)


# A header value as toolhub.tools.mcp takes it: no surrounding whitespace and no control
# characters (refused there, before the HTTP client could quote it in an error).
_CONTROL_CHARS = CONTROL_CHARS.pattern.removeprefix("[").removesuffix("]")
_HEADER_VALUE = (
    rf"^[^{WHITESPACE}{_CONTROL_CHARS}](?:[^{_CONTROL_CHARS}]*[^{WHITESPACE}{_CONTROL_CHARS}])?$"
)
_SECRET_CHARS = 8_000
_URL_CHARS = 500


@extend_schema_field(
    string_map_schema(keys=ENV_NAME.pattern, values=NONBLANK_PATTERN, max_length=_SECRET_CHARS)
)
class _EnvField(serializers.DictField):
    pass


@extend_schema_field(
    string_map_schema(keys=HEADER_NAME.pattern, values=_HEADER_VALUE, max_length=_SECRET_CHARS)
)
class _HeadersField(serializers.DictField):
    pass


@extend_schema_field(url_schema(max_length=_URL_CHARS, blank=True))
class _UrlField(serializers.URLField):
    pass


@extend_schema_field(url_schema(max_length=_URL_CHARS, blank=False))
class _RequiredUrlField(serializers.URLField):
    pass


class McpServerSerializer(serializers.Serializer):
    """An MCP server; ``env`` and ``headers`` are written, never read back (the response
    carries ``env_keys`` and ``header_names``). A change that makes a server stdio needs a
    command, one that makes it streamable HTTP a URL (given or already stored)."""

    id = serializers.IntegerField(read_only=True)
    name = serializers.RegexField(SERVER_NAME.pattern, max_length=24)
    transport = serializers.ChoiceField(["stdio", "streamable_http"])
    command = text_field(required=False, blank=True, max_length=500)
    args = serializers.ListField(child=text_field(max_length=2_000), required=False, max_length=100)
    env = _EnvField(child=text_field(max_length=_SECRET_CHARS), required=False, write_only=True)
    env_keys = serializers.ListField(child=serializers.CharField(), read_only=True)
    url = _UrlField(required=False, allow_blank=True, max_length=_URL_CHARS)
    headers = _HeadersField(
        child=serializers.CharField(
            max_length=_SECRET_CHARS, validators=[RegexValidator(_HEADER_VALUE)]
        ),
        required=False,
        write_only=True,
    )
    header_names = serializers.ListField(child=serializers.CharField(), read_only=True)
    enabled = serializers.BooleanField(required=False)
    defer = serializers.BooleanField(required=False)
    timeout = serializers.FloatField(required=False, min_value=0.1, max_value=3_600)
    allowlist = serializers.ListField(
        child=text_field(max_length=200),
        required=False,
        allow_null=True,
        max_length=1_000,
    )
    approve_destructive = serializers.BooleanField(required=False)
    state = serializers.CharField(read_only=True)
    error = serializers.CharField(read_only=True)
    tools = serializers.IntegerField(read_only=True)
    since = serializers.DateTimeField(read_only=True, allow_null=True)


class StdioMcpServerSerializer(McpServerSerializer):
    """A new stdio server: toolhub runs ``command``, so it must say one."""

    transport = serializers.ChoiceField(["stdio"])
    command = serializers.CharField(max_length=500, validators=[RegexValidator(TEXT_PATTERN)])


class HttpMcpServerSerializer(McpServerSerializer):
    """A new streamable HTTP server: toolhub connects to ``url``, so it must say one."""

    transport = serializers.ChoiceField(["streamable_http"])
    url = _RequiredUrlField(max_length=_URL_CHARS)


# The schema of a new server, one per transport (validation is McpServerSerializer's and
# the transport's own rules in toolhub.tools.mcp).
McpServerCreateSerializer = PolymorphicProxySerializer(
    component_name="McpServerCreate",
    serializers={
        "stdio": StdioMcpServerSerializer,
        "streamable_http": HttpMcpServerSerializer,
    },
    resource_type_field_name="transport",
)


def _server_fields(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key in mcp.FIELDS}


class McpServerListView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(responses=McpServerSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response([mcp.server_json(server) for server in McpServer.objects.all()])

    @extend_schema(
        request=McpServerCreateSerializer,
        responses={201: McpServerSerializer, **error_responses(409)},
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, McpServerSerializer)
        server = mcp.mcp_server_save(user=request.user, server=None, data=_server_fields(data))
        return Response(mcp.server_json(server), status=201)


class McpServerDetailView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(responses=McpServerSerializer)
    def get(self, request: Request, server_id: int) -> Response:
        return Response(mcp.server_json(get_object_or_404(McpServer, pk=server_id)))

    @extend_schema(
        request=McpServerSerializer,
        responses={200: McpServerSerializer, **error_responses(409)},
    )
    def patch(self, request: Request, server_id: int) -> Response:
        server = get_object_or_404(McpServer, pk=server_id)
        data = validated_body(request, McpServerSerializer, partial=True)
        server = mcp.mcp_server_save(user=request.user, server=server, data=_server_fields(data))
        return Response(mcp.server_json(server))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, server_id: int) -> Response:
        get_object_or_404(McpServer, pk=server_id).delete()
        return Response(status=204)
