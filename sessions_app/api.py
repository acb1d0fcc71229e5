"""JSON API for chat sessions: intent, the event log and the toolset inspector."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agent_app.turns import TEXT_LIMIT, turn_start_sync
from agent_app.turns.preview import session_plan_reset, session_toolset
from sessions_app import services
from sessions_app.models import ChatSession
from toolhub.api import IF_MATCH, error, error_responses, etag, read_version, validated_body
from toolhub.api_schema import IntentField, text_field


class SessionSerializer(serializers.Serializer):
    id = serializers.UUIDField(read_only=True)
    title = text_field(required=False, blank=True, max_length=services.TITLE_CHARS)
    agent = serializers.IntegerField(required=False, allow_null=True)
    intent = IntentField(required=False)
    plan_mode = serializers.BooleanField(required=False)
    version = serializers.IntegerField(read_only=True)
    created = serializers.DateTimeField(read_only=True)
    updated = serializers.DateTimeField(read_only=True)


EventListSerializer = inline_serializer(
    "SessionEvent",
    many=True,
    fields={
        "seq": serializers.IntegerField(),
        "turn": serializers.CharField(),
        "kind": serializers.CharField(),
        "data": serializers.DictField(),
        "created": serializers.DateTimeField(),
    },
)


def _session_json(session: ChatSession) -> dict[str, Any]:
    return {
        "id": str(session.pk),
        "title": session.title,
        "agent": session.agent_id,
        "intent": session.tool_intent,
        "plan_mode": session.plan_mode,
        "version": session.version,
        "created": session.created.isoformat(),
        "updated": session.updated.isoformat(),
    }


def _respond(session: ChatSession, status_code: int = 200) -> Response:
    response = Response(_session_json(session), status=status_code)
    response["ETag"] = etag(session.version)
    return response


class SessionListView(APIView):
    @extend_schema(responses=SessionSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response([_session_json(s) for s in services.sessions_of(request.user)[:500]])

    @extend_schema(request=SessionSerializer, responses={201: SessionSerializer})
    def post(self, request: Request) -> Response:
        data = validated_body(request, SessionSerializer)
        session = services.session_create(
            user=request.user,
            title=data.get("title", ""),
            agent=data.get("agent"),
            intent=data.get("intent"),
            plan_mode=data.get("plan_mode", False),
        )
        return _respond(session, 201)


class SessionDetailView(APIView):
    @extend_schema(responses=SessionSerializer)
    def get(self, request: Request, session_id: Any) -> Response:
        return _respond(services.session_get_for_user(user=request.user, session_id=session_id))

    @extend_schema(
        request=SessionSerializer,
        parameters=[IF_MATCH],
        responses={200: SessionSerializer, **error_responses(409, 412, 428)},
    )
    def patch(self, request: Request, session_id: Any) -> Response:
        session = services.session_get_for_user(user=request.user, session_id=session_id)
        data = validated_body(request, SessionSerializer, partial=True)
        editable = ("title", "agent", "intent", "plan_mode")
        fields = {key: value for key, value in data.items() if key in editable}
        session = services.session_update(
            user=request.user, session=session, version=read_version(request), **fields
        )
        return _respond(session)

    @extend_schema(parameters=[IF_MATCH], responses={204: None, **error_responses(409, 412, 428)})
    def delete(self, request: Request, session_id: Any) -> Response:
        session = services.session_get_for_user(user=request.user, session_id=session_id)
        services.session_delete(user=request.user, session=session, version=read_version(request))
        return Response(status=204)


class SessionResultView(APIView):
    """A tool's whole output where the chat got it cut (``persist_full`` tools)."""

    @extend_schema(
        responses=inline_serializer(
            "FullResult",
            {
                "id": serializers.UUIDField(),
                "tool": serializers.CharField(),
                "chars": serializers.IntegerField(help_text="length of the whole output"),
                "created": serializers.DateTimeField(),
                "text": serializers.CharField(),
            },
        )
    )
    def get(self, request: Request, session_id: Any, result_id: Any) -> Response:
        found = services.full_result_get(
            user=request.user, session_id=session_id, result_id=result_id
        )
        return Response(
            {
                "id": str(found.pk),
                "tool": found.tool,
                "chars": found.chars,
                "created": found.created.isoformat(),
                "text": found.text,
            }
        )


class SessionEventsView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter(
                "after",
                {"type": "integer", "minimum": 0},
                description="only events with a larger seq",
            ),
            OpenApiParameter(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": services.EVENTS_PAGE_MAX},
                description=f"at most this many (default {services.EVENTS_PAGE})",
            ),
        ],
        responses=inline_serializer(
            "SessionEvents",
            {"events": EventListSerializer, "last_seq": serializers.IntegerField()},
        ),
    )
    def get(self, request: Request, session_id: Any) -> Response:
        session = services.session_get_for_user(user=request.user, session_id=session_id)
        try:
            after = int(request.query_params.get("after", 0))
            limit = int(request.query_params.get("limit", services.EVENTS_PAGE))
        except ValueError:
            return error("invalid", "after and limit must be whole numbers", 400)
        events, last_seq = services.session_events(session=session, after=after, limit=limit)
        return Response(
            {
                "events": [
                    {
                        "seq": event.seq,
                        "turn": event.turn,
                        "kind": event.kind,
                        "data": event.data,
                        "created": event.created.isoformat(),
                    }
                    for event in events
                ],
                "last_seq": last_seq,
            }
        )


class MessageSerializer(serializers.Serializer):
    text = text_field(max_length=TEXT_LIMIT)
    intent = IntentField(required=False)


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
        turn = turn_start_sync(
            session=session,
            text=data["text"],
            intent=data.get("intent"),
            attended=False,
            channel="api",
        )
        return Response({"turn": turn, "session": str(session.pk)}, status=202)


PREVIEW_CHANNELS = ("web", "api")
ToolsetSerializer = inline_serializer(
    "Toolset",
    {
        "fingerprint": serializers.CharField(),
        "strategy": serializers.CharField(),
        "provider": serializers.CharField(),
        "resident": serializers.ListField(child=serializers.DictField()),
        "catalog": serializers.ListField(child=serializers.DictField()),
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
        return Response(session_toolset(session=session, channel=channel))


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
        session = session_plan_reset(user=request.user, session=session)
        return Response(session_toolset(session=session))
