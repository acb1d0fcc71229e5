"""JSON API for chat sessions: their intent, their event log, their full results and the
files tools offered (served as downloads, not JSON: toolhub.lib.downloads).

What a turn does with a session (a message, the inspector) is served by ``agent_app.api``.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from sessions_app import eventlog, services
from sessions_app.export import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    IMPORT_KINDS,
    IMPORT_MAX_EVENTS,
    TURN_CHARS,
    chat_import,
    export_download,
)
from sessions_app.models import ChatSession
from sessions_app.result_files import result_file_get
from sessions_app.usage import usage_of
from toolhub.lib.api import IF_MATCH, error, error_responses, etag, read_version, validated_body
from toolhub.lib.api_schema import IntentField, ToolNameListField, text_field
from toolhub.lib.downloads import AnyAccept, attachment
from toolhub.lib.errors import Invalid


class SessionSerializer(serializers.Serializer):
    id = serializers.UUIDField(read_only=True)
    title = text_field(required=False, blank=True, max_length=services.TITLE_CHARS)
    agent = serializers.IntegerField(required=False, allow_null=True)
    intent = IntentField(required=False)
    plan_mode = serializers.BooleanField(required=False)
    model = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="The chat's model as provider:model (one GET /api/models/ lists); '': the "
        "agent's",
    )
    allowed_tools = ToolNameListField(
        child=serializers.CharField(),
        required=False,
        help_text='Tools the person allowed for the rest of this chat ("Allow for this '
        'chat"): they run without asking, unless an operator asks every time. Remove a name '
        "to revoke it.",
    )
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
        "model": f"{session.provider}:{session.model}" if session.provider else "",
        "allowed_tools": list(session.allowed_tools or ()),
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
            plan_mode=data.get("plan_mode"),
            allowed_tools=data.get("allowed_tools", []),
            model=data.get("model", ""),
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
        editable = ("title", "agent", "intent", "plan_mode", "allowed_tools", "model")
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


class SessionFileView(APIView):
    """A file a tool offered the person (its ``tool_result`` event names it in ``files``)."""

    content_negotiation_class = AnyAccept

    @extend_schema(
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY},
        description="The file's bytes as an attachment, under its name, with the type it "
        "was sent as when that is well formed (else application/octet-stream). Only the "
        "chat's owner can read it.",
    )
    def get(self, request: Request, session_id: Any, file_id: Any) -> HttpResponse:
        found = result_file_get(user=request.user, session_id=session_id, file_id=file_id)
        return attachment(data=found.data, name=found.name, declared_type=found.media_type)


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
                {"type": "integer", "minimum": 1, "maximum": eventlog.EVENTS_PAGE_MAX},
                description=f"at most this many (default {eventlog.EVENTS_PAGE})",
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
            limit = int(request.query_params.get("limit", eventlog.EVENTS_PAGE))
        except ValueError:
            return error("invalid", "after and limit must be whole numbers", 400)
        events, last_seq = eventlog.session_events(session=session, after=after, limit=limit)
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


_TOKENS = {
    "calls": serializers.IntegerField(),
    "input_tokens": serializers.IntegerField(),
    "output_tokens": serializers.IntegerField(),
    "cache_read_input_tokens": serializers.IntegerField(),
    "cache_creation_input_tokens": serializers.IntegerField(),
    "cost_usd": serializers.FloatField(
        allow_null=True, help_text="An estimate from list prices; null for a model not priced"
    ),
}
UsageSerializer = inline_serializer(
    "Usage",
    {
        "by_model": inline_serializer(
            "ModelUsage", {"model": serializers.CharField(), **_TOKENS}, many=True
        ),
        "total": inline_serializer("UsageTotal", _TOKENS),
        "chats": inline_serializer(
            "ChatUsage",
            {
                "session": serializers.UUIDField(),
                "title": serializers.CharField(),
                "deleted": serializers.BooleanField(),
                **_TOKENS,
            },
            many=True,
        ),
    },
)


class UsageView(APIView):
    @extend_schema(
        responses=UsageSerializer,
        description="Your model calls' tokens by model, with prompt-cache reads and writes "
        "and the estimated cost, in total and for the chats that used the most.",
    )
    def get(self, request: Request) -> Response:
        return Response(usage_of(user=request.user).to_json())


class SessionUsageView(APIView):
    @extend_schema(responses=UsageSerializer, description="One chat's usage, by model.")
    def get(self, request: Request, session_id: Any) -> Response:
        session = services.session_get_for_user(user=request.user, session_id=session_id)
        return Response(usage_of(user=request.user, session_id=session.pk).to_json())


class SessionExportView(APIView):
    """The chat taken out, as the chat page's menu offers it (``sessions_app.export``)."""

    content_negotiation_class = AnyAccept

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "format",
                {"type": "string", "enum": ["markdown", "json"]},
                description="markdown: the conversation to read; json (the default): "
                "everything, the event log with every version of an edited message",
            )
        ],
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY},
        description="The chat as a download, named after its title. Only its owner can.",
    )
    def get(self, request: Request, session_id: Any) -> HttpResponse:
        session = services.session_get_for_user(user=request.user, session_id=session_id)
        form = request.query_params.get("format", "json")
        if form not in ("markdown", "json"):
            raise Invalid("format is markdown or json", fields={"format": ["choice"]})
        return export_download(session=session, form=form)


ChatExportSerializer = inline_serializer(
    "ChatExport",
    fields={
        "format": serializers.ChoiceField([EXPORT_FORMAT]),
        "version": serializers.ChoiceField([EXPORT_VERSION]),
        "title": text_field(required=False, blank=True, max_length=200),
        "intent": IntentField(required=False),
        "plan_mode": serializers.BooleanField(required=False),
        "events": serializers.ListField(
            max_length=IMPORT_MAX_EVENTS,
            child=inline_serializer(
                "ChatExportEvent",
                fields={
                    "seq": serializers.IntegerField(help_text="Unique in the export"),
                    "turn": text_field(blank=True, max_length=TURN_CHARS),
                    "kind": serializers.ChoiceField(sorted(IMPORT_KINDS)),
                    "data": serializers.DictField(),
                },
            ),
        ),
    },
)


class SessionImportView(APIView):
    @extend_schema(
        request=ChatExportSerializer,
        responses={201: SessionSerializer},
        description="A chat's JSON export (GET .../export/?format=json) as a new chat of "
        "yours: its events, title, plan mode and intent; your default agent and model.",
    )
    def post(self, request: Request) -> Response:
        # The documented shape first (types as sent), then the import's own rules.
        document = validated_body(request, type(ChatExportSerializer))
        return _respond(chat_import(user=request.user, document=document), 201)


BranchesSerializer = inline_serializer(
    "Branches",
    {
        "branches": inline_serializer(
            "Branch",
            {
                "message": serializers.IntegerField(
                    help_text="The seq of the version shown: a message of yours, or the "
                    "first event of an answer"
                ),
                "kind": serializers.ChoiceField(["message", "answer"]),
                "versions": serializers.ListField(
                    child=serializers.IntegerField(),
                    help_text="The seq of every version, oldest first (the page shows "
                    "them as 1/2, 2/2)",
                ),
                "shown": serializers.IntegerField(help_text="The version shown"),
            },
            many=True,
        )
    },
)
BranchPickSerializer = inline_serializer(
    "BranchPick",
    {
        "message": serializers.IntegerField(
            min_value=1, help_text="The seq of any version of the message or answer"
        ),
        "version": serializers.IntegerField(
            min_value=1, help_text="The seq of the version to show"
        ),
    },
)


class SessionBranchesView(APIView):
    """The versions of the chat's edited messages and regenerated answers
    (``sessions_app.services.branches``)."""

    @extend_schema(
        responses=BranchesSerializer,
        description="Each message and answer on the branch the chat shows that has "
        "several versions: every version's seq and the one shown. Only the chat's owner "
        "can.",
    )
    def get(self, request: Request, session_id: Any) -> Response:
        session = services.session_get_for_user(user=request.user, session_id=session_id)
        branches = services.session_branches(session=session)
        return Response({"branches": [branch.to_json() for branch in branches]})

    @extend_schema(
        request=BranchPickSerializer,
        responses={200: BranchesSerializer, **error_responses(409)},
        description="Show another version of a message or an answer, and below it the "
        "most recent turns that followed it; the chat's next turn goes on from there. "
        "Refused (409) while a turn runs, and (400) for a seq that is not a version of "
        "that message; nothing is stored then.",
    )
    def post(self, request: Request, session_id: Any) -> Response:
        session = services.session_get_for_user(user=request.user, session_id=session_id)
        data = validated_body(request, type(BranchPickSerializer))
        branches = services.session_branch_switch(
            session=session, message=data["message"], version=data["version"]
        )
        return Response({"branches": [branch.to_json() for branch in branches]})
