"""JSON API for agent profiles: a person's own agents and the shared ones, created,
changed, duplicated and deleted through the same services as the Agents page.

A shared agent is read-only to everyone but staff (``readonly`` says so); an edit or a
delete names the version it read (``If-Match``) and answers with the new one as its ETag.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from profiles_app import services
from profiles_app.models import Agent
from toolhub.lib.api import IF_MATCH, error_responses, etag, read_version, validated_body
from toolhub.lib.api_schema import IntentField, name_field, text_field


class AgentSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    name = name_field()
    shared = serializers.BooleanField(required=False)
    description = text_field(required=False, blank=True, max_length=500)
    system_prompt = text_field(required=False, blank=True, max_length=20_000)
    # A built-in provider or a connection staff made (docs/models.md); the service checks.
    provider = serializers.CharField(required=False, allow_blank=True, max_length=40)
    model = text_field(required=False, blank=True, max_length=100)
    context_window = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1_000,
        max_value=10**7,
        help_text="Tokens; null: as the model's server reports (a smaller figure is kept, "
        "a larger one is not used)",
    )
    tool_intent = IntentField(required=False)
    strategy = serializers.ChoiceField(["call_tool", "promote", "native"], required=False)
    tier_budget = serializers.IntegerField(
        required=False, allow_null=True, min_value=1_000, max_value=10**7
    )
    plan_mode = serializers.BooleanField(
        required=False, help_text="New chats with this agent start in plan mode"
    )
    readonly = serializers.BooleanField(read_only=True)
    version = serializers.IntegerField(read_only=True)


def _agent_json(agent: Agent, user: Any) -> dict[str, Any]:
    return {
        "id": agent.pk,
        "name": agent.name,
        "shared": agent.is_shared,
        "description": agent.description,
        "system_prompt": agent.system_prompt,
        "provider": agent.provider,
        "model": agent.model,
        "context_window": agent.context_window,
        "tool_intent": agent.tool_intent,
        "strategy": agent.strategy,
        "tier_budget": agent.tier_budget,
        "plan_mode": agent.plan_mode,
        "readonly": agent.is_shared and not user.is_staff,
        "version": agent.version,
    }


def _agent_respond(agent: Agent, user: Any, status_code: int = 200) -> Response:
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
        data = {key: value for key, value in data.items() if key in services.AGENT_FIELDS}
        agent = services.agent_create(user=request.user, shared=shared, **data)
        return _agent_respond(agent, request.user, 201)


class AgentDetailView(APIView):
    @extend_schema(responses=AgentSerializer)
    def get(self, request: Request, agent_id: int) -> Response:
        agent = services.agent_get_for_user(user=request.user, agent_id=agent_id)
        return _agent_respond(agent, request.user)

    @extend_schema(
        request=AgentSerializer,
        parameters=[IF_MATCH],
        responses={200: AgentSerializer, **error_responses(409, 412, 428)},
    )
    def patch(self, request: Request, agent_id: int) -> Response:
        agent = services.agent_get_for_user(user=request.user, agent_id=agent_id)
        data = validated_body(request, AgentSerializer, partial=True)
        fields = {key: value for key, value in data.items() if key in services.AGENT_FIELDS}
        agent = services.agent_update(
            user=request.user, agent=agent, version=read_version(request), **fields
        )
        return _agent_respond(agent, request.user)

    @extend_schema(
        parameters=[IF_MATCH],
        responses={204: None, **error_responses(409, 412, 428)},
        description="Delete the agent; its chats go on with the default agent.",
    )
    def delete(self, request: Request, agent_id: int) -> Response:
        agent = services.agent_get_for_user(user=request.user, agent_id=agent_id)
        services.agent_delete(user=request.user, agent=agent, version=read_version(request))
        return Response(status=204)


class AgentDuplicateView(APIView):
    @extend_schema(
        request=None,
        responses={201: AgentSerializer},
        description="A copy of the agent (yours or a shared one) as your own.",
    )
    def post(self, request: Request, agent_id: int) -> Response:
        agent = services.agent_get_for_user(user=request.user, agent_id=agent_id)
        copy = services.agent_duplicate(user=request.user, agent=agent)
        return _agent_respond(copy, request.user, 201)
