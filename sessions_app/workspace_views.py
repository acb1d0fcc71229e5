"""The chat page's Files panel: the workspace's list and a file's preview (fragments the
panel loads), a file's download, a picture for its preview and the whole workspace as a zip
(``sessions_app.workspace_files`` says what is served how).

Every view fetches the chat for its owner first: another person's chat, a binned one and a
made-up id are a 404 before the disk is touched.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render
from django.views.decorators.http import require_safe

from sessions_app.models import ChatSession
from sessions_app.services import session_get_for_user
from sessions_app.workspace_files import (
    PREVIEW_TEXT_BYTES,
    workspace_download,
    workspace_image,
    workspace_list,
    workspace_preview,
    workspace_zip,
)
from toolhub.lib.errors import ServiceError, found_or_404

_PANEL = "sessions_app/_workspace.html"


def _chat(request: HttpRequest, session_id: Any) -> ChatSession:
    return found_or_404(session_get_for_user, user=request.user, session_id=session_id)


def _refused(exc: ServiceError) -> HttpResponse:
    """A refusal in words, never a page of the site: the panel shows it where the preview
    would be, and a download link opened on its own shows the line."""
    response = HttpResponse(
        exc.message, status=exc.status, content_type="text/plain; charset=utf-8"
    )
    response["X-Content-Type-Options"] = "nosniff"
    return response


@require_safe
@login_required
def chat_workspace(request: HttpRequest, session_id: Any) -> HttpResponse:
    """The Files panel's list (a fragment)."""
    session = _chat(request, session_id)
    listing = workspace_list(session=session)
    return render(request, f"{_PANEL}#files", {"session": session, "listing": listing})


@require_safe
@login_required
def chat_workspace_preview(request: HttpRequest, session_id: Any) -> HttpResponse:
    """One file's preview in the panel (a fragment): its text, its picture, or why not."""
    session = _chat(request, session_id)
    try:
        preview = workspace_preview(session=session, path=request.GET.get("path", ""))
    except ServiceError as exc:
        refusal = {"message": exc.message}
        return render(request, f"{_PANEL}#refused", refusal, status=exc.status)
    context: dict[str, Any] = {
        "session": session,
        "preview": preview,
        "preview_kb": PREVIEW_TEXT_BYTES // 1024,
    }
    return render(request, f"{_PANEL}#preview", context)


@require_safe
@login_required
def chat_workspace_download(request: HttpRequest, session_id: Any) -> HttpResponseBase:
    session = _chat(request, session_id)
    try:
        return workspace_download(session=session, path=request.GET.get("path", ""))
    except ServiceError as exc:
        return _refused(exc)


@require_safe
@login_required
def chat_workspace_image(request: HttpRequest, session_id: Any) -> HttpResponseBase:
    session = _chat(request, session_id)
    try:
        return workspace_image(session=session, path=request.GET.get("path", ""))
    except ServiceError as exc:
        return _refused(exc)


@require_safe
@login_required
def chat_workspace_zip(request: HttpRequest, session_id: Any) -> HttpResponseBase:
    session = _chat(request, session_id)
    try:
        return workspace_zip(session=session)
    except ServiceError as exc:
        return _refused(exc)
