"""Attaching files to a message through the API (sessions_app.attachments).

An upload's handler is installed before DRF authenticates the request: a session's CSRF
check is the first to read the body, and the files must stream into the workspace then.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from sessions_app.attachments import (
    attachment_entry,
    attachment_remove,
    attachments_upload,
    attachments_waiting,
    upload_discard,
    upload_handler_install,
)
from sessions_app.services import session_get_for_user
from toolhub.lib.api import error_responses

AttachmentSerializer = inline_serializer(
    "Attachment",
    fields={
        "id": serializers.UUIDField(),
        "name": serializers.CharField(help_text="Its name in the chat's workspace"),
        "media_type": serializers.CharField(),
        "size": serializers.IntegerField(help_text="Bytes"),
    },
)
AttachmentsSerializer = inline_serializer(
    "Attachments", fields={"files": serializers.ListField(child=AttachmentSerializer)}
)


class SessionAttachmentsView(APIView):
    """Files waiting to be sent with the chat's next message."""

    def initialize_request(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Request:
        # Before authentication: a session's CSRF check is the first to read the body.
        if request.method == "POST":
            upload_handler_install(request=request, session_id=kwargs.get("session_id"))
        return super().initialize_request(request, *args, **kwargs)

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            response: HttpResponse = super().dispatch(request, *args, **kwargs)
            return response
        finally:
            upload_discard(request=request)

    @extend_schema(
        responses={200: AttachmentsSerializer},
        description="The files attached and not sent yet.",
    )
    def get(self, request: Request, session_id: Any) -> Response:
        session = session_get_for_user(user=request.user, session_id=session_id)
        files = [attachment_entry(row) for row in attachments_waiting(session=session)]
        return Response({"files": files})

    @extend_schema(
        request={
            "multipart/form-data": {
                "type": "object",
                "properties": {
                    "file": {"type": "array", "items": {"type": "string", "format": "binary"}}
                },
            }
        },
        responses={201: AttachmentsSerializer, **error_responses(413)},
        description="Attach files (multipart, each part named file) to the next message: "
        "they are stored in the chat's workspace under a cleaned name, never over another "
        "file. Name them in the message's files. 413 past a file's, a message's or the "
        "chat's bound, with nothing kept.",
    )
    def post(self, request: Request, session_id: Any) -> Response:
        session = session_get_for_user(user=request.user, session_id=session_id)
        stored = attachments_upload(request=request._request, session=session)
        return Response({"files": [attachment_entry(row) for row in stored]}, status=201)


class SessionAttachmentView(APIView):
    @extend_schema(
        responses={204: None},
        description="Take a file not sent yet out of the next message and the workspace.",
    )
    def delete(self, request: Request, session_id: Any, file_id: Any) -> Response:
        session = session_get_for_user(user=request.user, session_id=session_id)
        attachment_remove(user=request.user, session=session, attachment_id=file_id)
        return Response(status=204)
