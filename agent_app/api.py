"""JSON API for turns (a message into a session, the toolset inspector and its reset) and,
for staff, MCP servers. Agent profiles are served by ``profiles_app.api``."""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import (
    OpenApiParameter,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agent_app import mcp
from agent_app.frames import APPROVAL_KINDS, APPROVAL_SCOPES
from agent_app.inspector import inspector_plan_reset, inspector_toolset
from agent_app.turns import TEXT_LIMIT, on_turn_loop, turn_approve, turn_elicit, turn_start
from sessions_app import services
from toolhub.lib.api import error, error_responses, validated_body
from toolhub.lib.api_schema import (
    NONBLANK_PATTERN,
    TEXT_PATTERN,
    WHITESPACE,
    IntentField,
    string_map_schema,
    text_field,
    url_schema,
)
from toolhub.tools.mcp import CONTROL_CHARS, ENV_NAME, HEADER_NAME, SERVER_NAME
from toolhub.tools.mcp.asks import ACTIONS
from toolhub.tools.mcp.config import AUTHS, SCOPE_LIST

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
    """An MCP server; ``env``, ``headers`` and ``oauth_client_secret`` are written, never
    read back (the response carries ``env_keys``, ``header_names`` and
    ``oauth_client_secret_set``; OAuth tokens never appear, only who signed in and when).
    A change that makes a server stdio needs a command, one that makes it streamable HTTP
    a URL (given or already stored); ``auth: oauth`` is for streamable HTTP only."""

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
    timeout_ceiling = serializers.FloatField(required=False, min_value=0.1, max_value=86_400)
    allowlist = serializers.ListField(
        child=text_field(max_length=200),
        required=False,
        allow_null=True,
        max_length=1_000,
    )
    approve_destructive = serializers.BooleanField(required=False)
    sampling = serializers.BooleanField(required=False)
    workspace_roots = serializers.BooleanField(required=False)
    user_credential = serializers.RegexField(
        HEADER_NAME.pattern,
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="The header (HTTP) or variable (stdio) carrying each person's own credential",
    )
    chats = serializers.IntegerField(
        read_only=True,
        help_text="Connections of a chat's or a person's own open to it in this process",
    )
    auth = serializers.ChoiceField(list(AUTHS), required=False)
    # Blank (none) or these; the schema says so with its own alternative for "".
    oauth_scopes = serializers.RegexField(
        rf"^{SCOPE_LIST}$", required=False, allow_blank=True, max_length=500
    )
    oauth_client_id = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=200,
        validators=[RegexValidator(_HEADER_VALUE)],
    )
    oauth_client_secret = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=500,
        write_only=True,
        validators=[RegexValidator(_HEADER_VALUE)],
    )
    oauth_client_secret_set = serializers.BooleanField(read_only=True)
    signed_in_by = serializers.CharField(read_only=True, allow_null=True)
    signed_in_at = serializers.DateTimeField(read_only=True, allow_null=True)
    state = serializers.CharField(read_only=True)
    error = serializers.CharField(read_only=True)
    stderr = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="A stdio server's last stderr lines when it failed (secrets redacted).",
    )
    tools = serializers.IntegerField(read_only=True)
    since = serializers.DateTimeField(read_only=True, allow_null=True)


class StdioMcpServerSerializer(McpServerSerializer):
    """A new stdio server: toolhub runs ``command``, so it must say one."""

    transport = serializers.ChoiceField(["stdio"])
    command = serializers.CharField(max_length=500, validators=[RegexValidator(TEXT_PATTERN)])
    auth = serializers.ChoiceField(["none"], required=False)
    user_credential = serializers.RegexField(
        ENV_NAME.pattern,
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="The environment variable carrying each person's own credential",
    )


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
        return Response([mcp.server_json(server) for server in mcp.mcp_servers()])

    @extend_schema(
        request=McpServerCreateSerializer,
        responses={201: McpServerSerializer, **error_responses(409)},
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, McpServerSerializer)
        server = mcp.mcp_server_save(user=request.user, server=None, data=_server_fields(data))
        return Response(mcp.server_json(server), status=201)


class McpCredentialSerializer(serializers.Serializer):
    """One server that takes each person's own credential, and the caller's: whether it is
    set and when, never its value."""

    server_id = serializers.IntegerField(read_only=True)
    server = serializers.CharField(read_only=True)
    transport = serializers.CharField(read_only=True)
    carried_in = serializers.CharField(
        read_only=True, help_text="The header (HTTP) or environment variable (stdio) it goes in"
    )
    set = serializers.BooleanField(read_only=True)
    updated = serializers.DateTimeField(read_only=True, allow_null=True)
    value = serializers.CharField(
        write_only=True,
        max_length=mcp.MAX_CREDENTIAL_CHARS,
        trim_whitespace=False,
        # What a header or a variable can carry: no spaces around it, no control characters.
        validators=[RegexValidator(_HEADER_VALUE)],
    )


class McpCredentialListView(APIView):
    @extend_schema(responses=McpCredentialSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response([view.to_json() for view in mcp.mcp_credentials_of(user=request.user)])


class McpCredentialDetailView(APIView):
    @extend_schema(
        request=McpCredentialSerializer,
        responses={200: McpCredentialSerializer, **error_responses(400)},
        description="Set or replace your own credential for a server that takes one; it "
        "is never returned. 404 for a server that takes none.",
    )
    def put(self, request: Request, server_id: int) -> Response:
        data = validated_body(request, McpCredentialSerializer)
        view = mcp.mcp_credential_set(user=request.user, server_id=server_id, value=data["value"])
        return Response(view.to_json())

    @extend_schema(responses={204: None}, description="Forget your own credential.")
    def delete(self, request: Request, server_id: int) -> Response:
        mcp.mcp_credential_delete(user=request.user, server_id=server_id)
        return Response(status=204)


class McpServerDetailView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(responses=McpServerSerializer)
    def get(self, request: Request, server_id: int) -> Response:
        return Response(mcp.server_json(mcp.mcp_server_get(server_id=server_id)))

    @extend_schema(
        request=McpServerSerializer,
        responses={200: McpServerSerializer, **error_responses(409)},
    )
    def patch(self, request: Request, server_id: int) -> Response:
        server = mcp.mcp_server_get(server_id=server_id)
        data = validated_body(request, McpServerSerializer, partial=True)
        server = mcp.mcp_server_save(user=request.user, server=server, data=_server_fields(data))
        return Response(mcp.server_json(server))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, server_id: int) -> Response:
        mcp.mcp_server_delete(user=request.user, server=mcp.mcp_server_get(server_id=server_id))
        return Response(status=204)


# --- turns ---------------------------------------------------------------------------------


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
        turn = on_turn_loop(
            turn_start,
            session=session,
            text=data["text"],
            intent=data.get("intent"),
            attended=False,
            channel="api",
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
