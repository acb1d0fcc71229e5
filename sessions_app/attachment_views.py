"""Attaching files to a message from the chat page (sessions_app.attachments; the API's
side is sessions_app.api_attachments).

An upload's handler is installed before anything reads the request's body, so its files
stream into the workspace and never through Django's own handlers; on the page that means
the CSRF check runs inside the view, after the handler is in place.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_POST

from sessions_app.attachments import (
    attachment_entry,
    attachment_remove,
    attachments_upload,
    upload_discard,
    upload_handler_install,
)
from sessions_app.services import session_get_for_user
from toolhub.lib.errors import NotFound, ServiceError, found_or_404


@csrf_exempt
@require_POST
@login_required
def chat_attach(request: HttpRequest, session_id: Any) -> HttpResponse:
    """Files into the chat's workspace: their entries, or ``{code, message}``."""
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    upload_handler_install(request=request, session_id=session.pk)
    try:
        return _attach_checked(request, session)
    finally:
        upload_discard(request=request)


@csrf_protect
def _attach_checked(request: HttpRequest, session: Any) -> HttpResponse:
    try:
        stored = attachments_upload(request=request, session=session)
    except ServiceError as exc:
        return JsonResponse({"code": exc.code, "message": exc.message}, status=exc.status)
    return JsonResponse({"files": [attachment_entry(row) for row in stored]}, status=201)


@require_POST
@login_required
def chat_attachment_remove(request: HttpRequest, session_id: Any, file_id: Any) -> HttpResponse:
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    try:
        attachment_remove(user=request.user, session=session, attachment_id=file_id)
    except NotFound:
        return JsonResponse({"code": "not_found", "message": "no such file"}, status=404)
    return HttpResponse(status=204)
