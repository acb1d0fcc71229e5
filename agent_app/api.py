"""JSON API for turns: a message into a session, the answers a running turn waits for
(an approval, an MCP server's form), and the toolset inspector and its reset.

MCP servers and each person's own credentials are served by ``agent_app.api_mcp``; agent
profiles by ``profiles_app.api.agents``."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agent_app.frames import APPROVAL_KINDS, APPROVAL_SCOPES
from agent_app.inspector import inspector_plan_reset, inspector_toolset
from agent_app.turns import TEXT_LIMIT, on_turn_loop, turn_approve, turn_elicit, turn_start
from sessions_app import services
from toolhub.lib.api import error, error_responses, validated_body
from toolhub.lib.api_schema import IntentField, text_field
from toolhub.tools.mcp.asks import ACTIONS


class MessageSerializer(serializers.Serializer):
    text = text_field(max_length=TEXT_LIMIT, blank=True, required=False)
    intent = IntentField(required=False)
    files = serializers.ListField(
        child=serializers.UUIDField(),
        required=False,
        max_length=100,
        help_text="Ids of files attached to the chat (POST …/attachments/) that this message "
        "carries; the text may then be blank",
    )


class SessionMessagesView(APIView):
    @extend_schema(
        request=MessageSerializer,
        responses={
            202: inline_serializer(
                "TurnStarted", {"turn": serializers.CharField(), "session": serializers.UUIDField()}
            ),
            **error_responses(409),
        },
        description="Start an unattended turn (channel api); follow it in the event log. "
        "409 while another turn runs in the session.",
    )
    def post(self, request: Request, session_id: Any) -> Response:
        session = services.session_get_for_user(user=request.user, session_id=session_id)
        data = validated_body(request, MessageSerializer)
        turn = on_turn_loop(
            turn_start,
            session=session,
            text=data.get("text", ""),
            intent=data.get("intent"),
            attended=False,
            channel="api",
            files=[str(given) for given in data.get("files", ())],
        )
        return Response({"turn": turn, "session": str(session.pk)}, status=202)


class ApproveSerializer(serializers.Serializer):
    call_id = serializers.CharField(max_length=200)
    allow = serializers.BooleanField()
    kind = serializers.ChoiceField(
        list(APPROVAL_KINDS),
        required=False,
        help_text="approval (default): the tool's call; sampling: an MCP server's request "
        "for the model made during it",
    )
    scope = serializers.ChoiceField(
        list(APPROVAL_SCOPES),
        required=False,
        help_text="once (default), or chat: allowed for the rest of this chat",
    )


class SessionApproveView(APIView):
    @extend_schema(
        request=ApproveSerializer,
        responses={204: None, **error_responses(409)},
        description="Answer the call waiting for approval, as the approval card does. 409 "
        "`unknown_call` when that call waits no more; 409 `ask_every_time` for scope chat "
        "where an operator asks every time.",
    )
    def post(self, request: Request, session_id: Any) -> Response:
        session = services.session_get_for_user(user=request.user, session_id=session_id)
        data = validated_body(request, ApproveSerializer)
        on_turn_loop(
            turn_approve,
            session=session,
            call_id=data["call_id"],
            allow=data["allow"],
            scope=data.get("scope", "once"),
            kind=data.get("kind", "approval"),
        )
        return Response(status=204)


class ElicitSerializer(serializers.Serializer):
    call_id = serializers.CharField(max_length=200)
    action = serializers.ChoiceField(list(ACTIONS))
    content = serializers.DictField(
        required=False,
        help_text="The form's field values (for accept); checked against the form",
    )


class SessionElicitView(APIView):
    @extend_schema(
        request=ElicitSerializer,
        responses={204: None, **error_responses(400, 409)},
        description="Answer the form an MCP server put to the person during a call, as the "
        "card does: accept (with content), decline or cancel. 400 `invalid` with `fields` "
        "when the content does not fit the form (nothing is sent); 409 `unknown_call` when "
        "no form of that call waits.",
    )
    def post(self, request: Request, session_id: Any) -> Response:
        session = services.session_get_for_user(user=request.user, session_id=session_id)
        data = validated_body(request, ElicitSerializer)
        on_turn_loop(
            turn_elicit,
            session=session,
            call_id=data["call_id"],
            action=data["action"],
            content=data.get("content"),
        )
        return Response(status=204)


PREVIEW_CHANNELS = ("web", "api")
ToolsetSerializer = inline_serializer(
    "Toolset",
    {
        "fingerprint": serializers.CharField(),
        "strategy": serializers.CharField(),
        "provider": serializers.CharField(),
        "model": serializers.CharField(help_text="The model the next turn asks for"),
        "agent": serializers.CharField(help_text="The chat's agent"),
        "context_window": inline_serializer(
            "ContextWindow",
            {
                "tokens": serializers.IntegerField(),
                "source": serializers.ChoiceField(
                    ["server", "setting", "assumed"],
                    help_text="server: the model's server reports it; setting: the agent's "
                    "own, smaller figure; assumed: nobody says",
                ),
                "words": serializers.CharField(),
            },
            help_text="The window the next turn works in",
        ),
        "resident": serializers.ListField(child=serializers.DictField()),
        "catalog": serializers.ListField(child=serializers.DictField()),
        "catalog_form": serializers.ChoiceField(
            ["names", "grouped", "counts"],
            help_text="How the catalog block tells the model of the deferred tools: a line "
            "each (names), how many each source has with the most used named (grouped), or "
            "how many there are with the most used named (counts): the most telling form "
            "that fits the token budget",
        ),
        "instructions": serializers.ListField(
            child=serializers.DictField(child=serializers.CharField()),
            help_text="Instructions of MCP servers whose tools are offered, as the catalog "
            "block ends with them (counted in its tokens)",
        ),
        "tokens": serializers.DictField(child=serializers.IntegerField()),
        "hidden": serializers.ListField(child=serializers.DictField()),
    },
)


class SessionToolsetView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter(
                "channel",
                str,
                enum=list(PREVIEW_CHANNELS),
                description="The turn to preview: web (the chat page, default) or api (a "
                "REST message, unattended).",
            )
        ],
        responses={200: ToolsetSerializer, **error_responses(400, 409)},
        description="What the next turn's first provider request will carry, as the "
        "provider receives it: the fingerprint and token counts are of its wire form. "
        "409 when the session's toolset names a profile that is gone.",
    )
    def get(self, request: Request, session_id: Any) -> Response:
        session = services.session_get_for_user(user=request.user, session_id=session_id)
        channel = request.query_params.get("channel", "web")
        if channel not in PREVIEW_CHANNELS:
            return error(
                "invalid", "channel must be web or api", 400, fields={"channel": ["choice"]}
            )
        return Response(inspector_toolset(session=session, channel=channel))


class SessionToolsetResetView(APIView):
    @extend_schema(
        request=None,
        responses={200: ToolsetSerializer, **error_responses(409)},
        description="Rebuild the session's tier plan (which tools are resident, listed or "
        "deferred) from the person's usage counts, and keep it; answers with the toolset "
        "the next turn will send. 409 when the session's toolset names a profile that is "
        "gone.",
    )
    def post(self, request: Request, session_id: Any) -> Response:
        session = services.session_get_for_user(user=request.user, session_id=session_id)
        session = inspector_plan_reset(user=request.user, session=session)
        return Response(inspector_toolset(session=session))
