"""JSON API for MCP servers: staff add, change and remove them; each person sets or
forgets their own credential for a server that takes one.

Secrets (``env`` and ``headers`` values, the OAuth client secret, a person's credential)
are written, never read back (``agent_app.mcp_servers``, ``agent_app.mcp_credentials``).
Text that goes into a header is checked here as ``toolhub.tools.mcp`` checks it: a value
the runtime would refuse is a 400 here.
"""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agent_app.mcp_credentials import (
    MAX_CREDENTIAL_CHARS,
    mcp_credential_delete,
    mcp_credential_set,
    mcp_credentials_of,
)
from agent_app.mcp_servers import (
    FIELDS,
    mcp_server_delete,
    mcp_server_get,
    mcp_server_save,
    mcp_servers,
    server_json,
)
from toolhub.lib.api import error_responses, validated_body
from toolhub.lib.api_schema import (
    NONBLANK_PATTERN,
    TEXT_PATTERN,
    WHITESPACE,
    string_map_schema,
    text_field,
    url_schema,
)
from toolhub.tools.mcp import CONTROL_CHARS, ENV_NAME, HEADER_NAME, SERVER_NAME
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
    return {key: value for key, value in data.items() if key in FIELDS}


class McpServerListView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(responses=McpServerSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response([server_json(server) for server in mcp_servers()])

    @extend_schema(
        request=McpServerCreateSerializer,
        responses={201: McpServerSerializer, **error_responses(409)},
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, McpServerSerializer)
        server = mcp_server_save(user=request.user, server=None, data=_server_fields(data))
        return Response(server_json(server), status=201)


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
        max_length=MAX_CREDENTIAL_CHARS,
        trim_whitespace=False,
        # What a header or a variable can carry: no spaces around it, no control characters.
        validators=[RegexValidator(_HEADER_VALUE)],
    )


class McpCredentialListView(APIView):
    @extend_schema(responses=McpCredentialSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response([view.to_json() for view in mcp_credentials_of(user=request.user)])


class McpCredentialDetailView(APIView):
    @extend_schema(
        request=McpCredentialSerializer,
        responses={200: McpCredentialSerializer, **error_responses(400)},
        description="Set or replace your own credential for a server that takes one; it "
        "is never returned. 404 for a server that takes none.",
    )
    def put(self, request: Request, server_id: int) -> Response:
        data = validated_body(request, McpCredentialSerializer)
        view = mcp_credential_set(user=request.user, server_id=server_id, value=data["value"])
        return Response(view.to_json())

    @extend_schema(responses={204: None}, description="Forget your own credential.")
    def delete(self, request: Request, server_id: int) -> Response:
        mcp_credential_delete(user=request.user, server_id=server_id)
        return Response(status=204)


class McpServerDetailView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(responses=McpServerSerializer)
    def get(self, request: Request, server_id: int) -> Response:
        return Response(server_json(mcp_server_get(server_id=server_id)))

    @extend_schema(
        request=McpServerSerializer,
        responses={200: McpServerSerializer, **error_responses(409)},
    )
    def patch(self, request: Request, server_id: int) -> Response:
        server = mcp_server_get(server_id=server_id)
        data = validated_body(request, McpServerSerializer, partial=True)
        server = mcp_server_save(user=request.user, server=server, data=_server_fields(data))
        return Response(server_json(server))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, server_id: int) -> Response:
        mcp_server_delete(user=request.user, server=mcp_server_get(server_id=server_id))
        return Response(status=204)
