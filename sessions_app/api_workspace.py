"""JSON API for a chat's workspace files, as the chat page's Files panel offers them: the
list, one file's download and the whole workspace as a zip (``sessions_app.workspace_files``
says what is served how). Another person's chat, a binned one and a made-up id are 404.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from sessions_app import services
from sessions_app.workspace_files import workspace_download, workspace_list, workspace_zip
from toolhub.lib.api import error_responses
from toolhub.lib.downloads import AnyAccept

_PATH = OpenApiParameter(
    "path",
    str,
    required=True,
    description="The file's path in the workspace, as the list gives it: relative, without "
    "'..' or control characters",
)
_DOWNLOAD = {(200, "application/octet-stream"): OpenApiTypes.BINARY}

WorkspaceListSerializer = inline_serializer(
    "WorkspaceFiles",
    {
        "files": inline_serializer(
            "WorkspaceFile",
            {
                "path": serializers.CharField(),
                "kind": serializers.ChoiceField(
                    ["file", "link", "other"],
                    help_text="file: a regular file; link: a symlink, never followed nor "
                    "served; other: a FIFO, socket or device",
                ),
                "size": serializers.IntegerField(help_text="bytes; 0 for a link"),
                "modified": serializers.DateTimeField(),
                "downloadable": serializers.BooleanField(),
            },
            many=True,
        ),
        "more": serializers.IntegerField(help_text="entries not listed (past the list's bound)"),
        "complete": serializers.BooleanField(
            help_text="false when the workspace holds so many entries that even 'more' is a "
            "lower bound"
        ),
        "zip_refusal": serializers.CharField(
            help_text="why GET .../workspace/zip/ would be refused now; '' when it would not"
        ),
    },
)


class SessionWorkspaceListView(APIView):
    @extend_schema(
        responses=WorkspaceListSerializer,
        description="The files in the chat's workspace, newest first, bounded "
        "(TOOLHUB_WORKSPACE_LIST_MAX). Symlinks are listed as links and never followed. An "
        "empty list: no files yet.",
    )
    def get(self, request: Request, session_id: Any) -> Response:
        session = services.session_get_for_user(user=request.user, session_id=session_id)
        listing = workspace_list(session=session)
        return Response(
            {
                "files": [entry.to_json() for entry in listing.entries],
                "more": listing.more,
                "complete": listing.complete,
                "zip_refusal": listing.zip_refusal,
            }
        )


class SessionWorkspaceFileView(APIView):
    content_negotiation_class = AnyAccept

    @extend_schema(
        parameters=[_PATH],
        responses={**_DOWNLOAD, **error_responses(404)},
        description="One regular file of the workspace as an attachment: a PNG, JPEG, GIF or "
        "WebP (told by its bytes) as its type, anything else as application/octet-stream. A "
        "path through a symlink, or naming one, is 404.",
    )
    def get(self, request: Request, session_id: Any) -> HttpResponseBase:
        session = services.session_get_for_user(user=request.user, session_id=session_id)
        return workspace_download(session=session, path=request.query_params.get("path", ""))


class SessionWorkspaceZipView(APIView):
    content_negotiation_class = AnyAccept

    @extend_schema(
        responses={(200, "application/zip"): OpenApiTypes.BINARY, **error_responses(409)},
        description="Every regular file of the workspace in one zip, streamed; symlinks and "
        "other special files are left out. Refused (409, too_large) past "
        "TOOLHUB_WORKSPACE_ZIP_MAX_FILES files or TOOLHUB_WORKSPACE_ZIP_MAX_BYTES bytes, or "
        "when there are no files.",
    )
    def get(self, request: Request, session_id: Any) -> HttpResponseBase:
        session = services.session_get_for_user(user=request.user, session_id=session_id)
        return workspace_zip(session=session)
