"""The chat pages: a person's sessions, and one session's conversation.

The page is a shell: the conversation itself arrives over the session's socket (a
``resume`` from seq 0 replays it, then the live stream continues), so a reload, a
reconnect and a first load draw it the same way. Session actions are POSTs through the
same services the API uses, redirecting back; another person's session is a 404.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST, require_safe

from profiles_app.services import profiles_for_user
from sessions_app.services import (
    Follow,
    composer_state,
    session_composer_follow,
    session_create,
    session_delete,
    session_get_for_user,
    session_update,
    sessions_of,
)
from toolhub.lib.errors import ServiceError, found_or_404
from toolhub.tools import DEFAULT_TOOLSET, ToolIntent

SESSIONS_SHOWN = 100


@require_safe
@login_required
def chat(request: HttpRequest) -> HttpResponse:
    latest = sessions_of(request.user).order_by("-updated").first()
    if latest is None:
        return render(request, "sessions_app/chat_empty.html")
    return redirect("chat_session", session_id=latest.pk)


@require_safe
@login_required
def chat_session(request: HttpRequest, session_id: Any) -> HttpResponse:
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    intent = ToolIntent.parse(session.tool_intent)
    toolsets = [view.name for view in profiles_for_user(user=request.user)]
    toolset = intent.toolset or DEFAULT_TOOLSET
    follow = session_composer_follow(session=session, toolsets=toolsets)
    tools_state, web_state = composer_state(intent.enabled), composer_state(intent.web_search)
    web = follow.web_search.get(toolset) or Follow(on=False, hint="", unavailable="")
    tools_on = follow.tools.on if tools_state == "follow" else tools_state == "on"
    # Which hint each control shows first; chat.js applies the same rule on every change.
    web_hint = "unavailable" if web.unavailable else web_state if tools_on else "no_tools"
    context = {
        "session": session,
        "sessions": sessions_of(request.user).order_by("-updated")[:SESSIONS_SHOWN],
        "toolsets": toolsets,
        "toolset": toolset,
        "tools_state": tools_state,
        "web_state": web_state,
        "follow": follow.to_json(),
        "tools_follow": follow.tools,
        "web_follow": web,
        "web_follow_on": web.on and tools_on,
        "web_hint": web_hint,
        "plan_mode": session.plan_mode,
    }
    return render(request, "sessions_app/chat.html", context)


@require_POST
@login_required
def chat_plan_mode(request: HttpRequest, session_id: Any) -> HttpResponse:
    """Switch plan mode from the composer; stored at once, so the inspector shows its
    effect before the next turn."""
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    on = request.POST.get("plan_mode") == "on"
    try:
        session_update(user=request.user, session=session, version=session.version, plan_mode=on)
    except ServiceError as exc:
        return HttpResponse(exc.message, status=exc.status)
    response = HttpResponse(status=204)
    response["HX-Trigger"] = "toolhub:turn-end"
    return response


@require_POST
@login_required
def chat_new(request: HttpRequest) -> HttpResponse:
    session = session_create(user=request.user)
    return redirect("chat_session", session_id=session.pk)


# Rename and delete act on the session as it is now: the page's own chat frames move its
# version (the composer's intent is stored with each message), and the owner asked for
# this one action on this one chat.


@require_POST
@login_required
def chat_rename(request: HttpRequest, session_id: Any) -> HttpResponse:
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    try:
        session_update(
            user=request.user,
            session=session,
            version=session.version,
            title=request.POST.get("title", ""),
        )
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect("chat_session", session_id=session.pk)


@require_POST
@login_required
def chat_delete(request: HttpRequest, session_id: Any) -> HttpResponse:
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    try:
        session_delete(user=request.user, session=session, version=session.version)
    except ServiceError as exc:
        messages.error(request, exc.message)
        return redirect("chat_session", session_id=session.pk)
    messages.success(request, "Chat deleted.")
    return redirect("chat")
