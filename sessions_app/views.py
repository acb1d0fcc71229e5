"""The chat pages: a person's sessions, and one session's conversation.

The page renders the conversation folded from the event log (``sessions_app.transcript``)
up to the session's last seq; its socket resumes from there and sends every item a later
event changes, rendered by the same partials, so a reload, a second tab and the live
stream show the same state. Session actions are POSTs through the
same services the API uses, redirecting back; another person's session is a 404.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from profiles_app.models import Preferences
from profiles_app.services import (
    PersonalSettings,
    agents_visible_to,
    new_chat_agent,
    personal_settings,
    personal_settings_update,
    profiles_for_user,
    shared_first,
)
from profiles_app.services.connections import provider_offers
from profiles_app.theme import request_preferences
from sessions_app.attachments import attachments_waiting
from sessions_app.composer import (
    composer_applied_words,
    composer_apply,
    composer_state,
    session_composer_follow,
)
from sessions_app.export import IMPORT_MAX_BYTES, chat_import, document_read, export_download
from sessions_app.limits import FRAME_MAX_BYTES, MESSAGE_MAX_CHARS
from sessions_app.models import ChatSession
from sessions_app.result_files import result_file_get
from sessions_app.services import (
    call_result_get,
    session_branch_switch,
    session_get_for_user,
    session_new_or_empty,
    session_restore,
    session_trash,
    session_update,
    sessions_search,
)
from sessions_app.sidebar import archived_chats, chat_groups
from sessions_app.starters import chat_starters
from sessions_app.transcript import session_transcript, transcript_html
from sessions_app.usage import usage_of
from toolhub.lib.catalog_news import chat_options_changed
from toolhub.lib.downloads import attachment
from toolhub.lib.errors import Invalid, ServiceError, found_or_404
from toolhub.tools import DEFAULT_PRESET, ToolIntent

# With more agents than this the composer's picker gets a box that narrows its list.
AGENT_FILTER_AT = 8
UNDO_KEY = "toolhub.undo_chat"


@require_safe
@login_required
def chat(request: HttpRequest) -> HttpResponse:
    """Where signing in and the Chat link land: a chat ready for a first message (the
    person's empty one, or a new one), as ChatGPT and LibreChat open; earlier chats are
    in the list beside it."""
    session = session_new_or_empty(user=request.user)
    return redirect("chat_session", session_id=session.pk)


@require_safe
@login_required
def chat_session(request: HttpRequest, session_id: Any) -> HttpResponse:
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    transcript = session_transcript(session_id=session.pk)
    context = {
        "session": session,
        "session_id": session.pk,
        "transcript": transcript,
        "items_html": transcript_html(transcript, session_id=session.pk),
        "text_limit": MESSAGE_MAX_CHARS,
        "frame_limit": FRAME_MAX_BYTES,
        "chat_groups": chat_groups(user=request.user),
        "archived": archived_chats(user=request.user),
        "undo": _undo(request),
        "compact_cards": request_preferences(request).compact_cards,
        # An empty chat shows what its tools can do.
        "starters": [] if transcript.last_seq else chat_starters(session=session),
        "attached": attachments_waiting(session=session),
        "upload": {
            "file": settings.TOOLHUB_UPLOAD_FILE_MAX_BYTES,
            "files": settings.TOOLHUB_UPLOAD_MESSAGE_MAX_FILES,
            "bytes": settings.TOOLHUB_UPLOAD_MESSAGE_MAX_BYTES,
        },
        **_options_context(request, session),
    }
    return render(request, "sessions_app/chat.html", context)


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
def settings_page(request: HttpRequest) -> HttpResponse:
    """A person's settings (what new chats start with, the look) and their usage."""
    failed, status, chosen = "", 200, None
    if request.method == "POST":
        agent = request.POST.get("new_chat_agent", "")
        # "": default; anything but an id is refused by the service.
        new_chat_agent = int(agent) if agent.isascii() and agent.isdigit() else agent or None
        toolset = request.POST.get("new_chat_toolset", "")
        theme = request.POST.get("theme", "")
        compact_cards = request.POST.get("compact_cards") == "on"
        try:
            personal_settings_update(
                user=request.user,
                new_chat_agent=new_chat_agent,
                new_chat_toolset=toolset,
                theme=theme,
                compact_cards=compact_cards,
            )
        except ServiceError as exc:
            failed, status = exc.message, exc.status
            # Drawn again as sent: a refusal loses none of the other choices.
            agent_id = new_chat_agent if isinstance(new_chat_agent, int) else None
            chosen = PersonalSettings(
                new_chat_agent=agent_id,
                new_chat_toolset=toolset,
                theme=theme,
                compact_cards=compact_cards,
            )
        else:
            messages.success(request, "Settings saved.")
            return redirect("settings")
    context = {
        "chosen": chosen or personal_settings(user=request.user),
        "agents": shared_first(agents_visible_to(request.user)),
        "toolsets": [view.name for view in profiles_for_user(user=request.user)],
        "usage": usage_of(user=request.user),
        "themes": Preferences.Theme.choices,
        "failed": failed,
    }
    return render(request, "sessions_app/settings.html", context, status=status)


@require_safe
@login_required
def chat_call_result(request: HttpRequest, session_id: Any, call_seq: int) -> HttpResponse:
    """A tool call's whole result as stored (the card shows it cut), as text."""
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    result = found_or_404(call_result_get, session=session, call_seq=call_seq)
    response = HttpResponse(result["content"], content_type="text/plain; charset=utf-8")
    if request.GET.get("download"):
        name = "".join(c if c.isalnum() or c in "-_" else "_" for c in result["name"])[:60]
        response["Content-Disposition"] = f'attachment; filename="{name or "result"}.txt"'
    return response


@require_safe
@login_required
def chat_result_file(request: HttpRequest, session_id: Any, file_id: Any) -> HttpResponse:
    """A file a tool offered the person, as the download its card links to."""
    found = found_or_404(result_file_get, user=request.user, session_id=session_id, file_id=file_id)
    return attachment(data=found.data, name=found.name, declared_type=found.media_type)


def _options_context(request: HttpRequest, session: ChatSession) -> dict[str, Any]:
    """The composer's options panel for the chat as stored: what its controls show is
    what the next message uses."""
    intent = ToolIntent.parse(session.tool_intent)
    toolsets = [view.name for view in profiles_for_user(user=request.user)]
    toolset = intent.toolset or DEFAULT_PRESET
    follow = session_composer_follow(session=session, toolsets=toolsets)
    tools_state, web_state = composer_state(intent.enabled), composer_state(intent.web_search)
    agents = shared_first(agents_visible_to(request.user))
    offers = provider_offers()
    picked = f"{session.provider}:{session.model}" if session.provider else ""
    return {
        "session": session,
        "toolsets": toolsets,
        "toolset": toolset,
        "tools_state": tools_state,
        "web_state": web_state,
        "follow": follow.to_json(),
        "tools_follow": follow.tools,
        "web_unavailable": toolset in follow.web_search
        and bool(follow.web_search[toolset].unavailable),
        # The words under the controls as first shown; chat.js looks up the same table.
        "words": follow.words(toolset, tools_state, web_state),
        "plan_mode": session.plan_mode,
        "agents": agents,
        "agent_filter": len(agents) > AGENT_FILTER_AT,
        # The agent a new chat of theirs starts with: another shows as a chip.
        "default_agent_id": new_chat_agent(user=request.user).pk,
        # "default" in the Profile select follows the agent: it says so when the agent
        # names a toolset of its own.
        "agent_toolset": ToolIntent.parse(session.agent.tool_intent).toolset,
        # The Model select: the agent's, or one a provider offers ("provider:model"); a
        # pick no longer offered stays shown, said so, as the turn will fail on it.
        "model_offers": offers,
        "model_value": picked,
        "model_gone": bool(picked)
        and not any(
            f"{offer.name}:{entry.id}" == picked for offer in offers for entry in offer.models
        ),
    }


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
def chat_options(request: HttpRequest, session_id: Any) -> HttpResponse:
    """The composer's options panel for the chat as stored (GET: a tab drawing it again
    after another changed it), or a choice applied when it is made (POST: agent, model,
    profile, Tools, Web search, plan mode), answered with the panel drawn again and a line
    saying what changed; the chat's other tabs are told. A refused choice answers the
    panel as stored, with why, so the controls never show what will not be used."""
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    status, saved, failed = 200, "", ""
    if request.method == "POST":
        # The page's tab id rides along, for the news to its other tabs.
        unsent = {"csrfmiddlewaretoken", "tab"}
        choices = {key: str(request.POST[key]) for key in request.POST if key not in unsent}
        try:
            session = composer_apply(user=request.user, session=session, choices=choices)
            saved = composer_applied_words(session=session, choices=choices)
        except ServiceError as exc:
            status, failed = exc.status, exc.message
            session.refresh_from_db()
        else:
            chat_options_changed(session_id=session.pk, tab=request.POST.get("tab", ""))
    context = {**_options_context(request, session), "saved": saved, "failed": failed}
    return render(request, "sessions_app/chat.html#options", context, status=status)


@require_safe
@login_required
def chat_export(request: HttpRequest, session_id: Any, form: str) -> HttpResponse:
    """The chat as a download: Markdown to read, or JSON with everything
    (``sessions_app.export``)."""
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    return export_download(session=session, form=form)


@require_POST
@login_required
def chat_import_page(request: HttpRequest) -> HttpResponse:
    """A JSON export uploaded from the chats list, opened as a new chat of the person's."""
    upload = request.FILES.get("file")
    try:
        if upload is None:
            raise Invalid("choose a JSON export to import")
        document = document_read(upload.read(IMPORT_MAX_BYTES + 1))
        session = chat_import(user=request.user, document=document)
    except ServiceError as exc:
        messages.error(request, f"Not imported: {exc.message}.")
        return redirect("chat")
    messages.success(request, f"Imported “{session}”.")
    return redirect("chat_session", session_id=session.pk)


@require_POST
@login_required
def chat_new(request: HttpRequest) -> HttpResponse:
    session = session_new_or_empty(user=request.user)
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
def chat_branch(request: HttpRequest, session_id: Any) -> HttpResponse:
    """Show another version of a message or an answer (the page's Previous and Next
    version buttons): 204, or the reason in plain words with its status; the page draws
    the chat anew either way."""
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    try:
        message, version = (int(request.POST.get(key, "")) for key in ("message", "version"))
    except ValueError:
        return HttpResponse("That is not a version of that message.", status=400)
    try:
        session_branch_switch(session=session, message=message, version=version)
    except ServiceError as exc:
        return HttpResponse(exc.message, status=exc.status, content_type="text/plain")
    return HttpResponse(status=204)


@require_POST
@login_required
def chat_keep(request: HttpRequest, session_id: Any, how: str) -> HttpResponse:
    """Pin a chat to the top of the list or unpin it, archive it out of the list or bring
    it back (``how``: pin, unpin, archive, unarchive)."""
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    fields = {
        "pin": {"pinned": True},
        "unpin": {"pinned": False},
        "archive": {"archived": True},
        "unarchive": {"archived": False},
    }.get(how)
    if fields is None:
        raise Http404("pin, unpin, archive or unarchive")
    try:
        session_update(user=request.user, session=session, version=session.version, **fields)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        if how == "archive":
            messages.success(request, f"Archived “{session}”: search still finds it.")
    return redirect("chat_session", session_id=session.pk)


@require_POST
@login_required
def chat_delete(request: HttpRequest, session_id: Any) -> HttpResponse:
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    try:
        session_trash(user=request.user, session=session)
    except ServiceError as exc:
        messages.error(request, exc.message)
        return redirect("chat_session", session_id=session.pk)
    # The next page offers Undo (the chat stays restorable for UNDO_SECONDS).
    request.session[UNDO_KEY] = {"id": str(session.pk), "title": str(session)}
    return redirect("chat")


@require_POST
@login_required
def chat_restore(request: HttpRequest, session_id: Any) -> HttpResponse:
    """Undo a delete."""
    restored = found_or_404(session_restore, user=request.user, session_id=session_id)
    request.session.pop(UNDO_KEY, None)
    messages.success(request, f"“{restored}” is back.")
    return redirect("chat_session", session_id=restored.pk)


@require_safe
@login_required
def chat_search(request: HttpRequest) -> HttpResponse:
    """Chats whose title or messages hold the query (the search dialog, Ctrl/Cmd+K)."""
    query = request.GET.get("q", "")
    results = sessions_search(user=request.user, query=query)
    return render(
        request,
        "sessions_app/chat.html#search_results",
        {"results": results, "query": query.strip()},
    )


def _undo(request: HttpRequest) -> dict[str, str] | None:
    """The chat just deleted, offered once for Undo."""
    undo = request.session.pop(UNDO_KEY, None)
    return undo if isinstance(undo, dict) else None
