"""The pages that show a turn's machinery: the chat's inspector (what the next turn sends,
and what the last ones cost) and the operators' page (tools, global disables, MCP servers).

They sit in ``agent_app`` because they show what only the runtime knows: the wire form of
the tool array, and the MCP connections. Everything they change goes through a service.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST, require_safe

from agent_app.inspector import inspector_plan_reset, inspector_toolset
from agent_app.mcp import mcp_logs
from agent_app.mcp_composer import (
    mcp_prompt_fill,
    mcp_prompts,
    mcp_resource_attach,
    mcp_resources,
)
from agent_app.mcp_credentials import (
    mcp_credential_delete,
    mcp_credential_set,
    mcp_credentials_of,
)
from agent_app.mcp_oauth import mcp_oauth_sign_in_begin, mcp_oauth_sign_in_finish
from agent_app.mcp_servers import mcp_server_get, mcp_server_save, mcp_servers, server_json
from agent_app.models import McpServer
from profiles_app.services import (
    global_disable_audit,
    tool_disable_globally,
    tool_enable_globally,
    tool_policy_clear,
    tool_policy_rows,
    tool_policy_set,
    tools_for_ops,
)
from sessions_app.models import ChatSession
from sessions_app.services import (
    session_allowed_revoke,
    session_get_for_user,
    session_recent_calls,
    session_with_draft,
)
from toolhub.lib.errors import Invalid, ServiceError, found_or_404
from toolhub.lib.htmx import HtmxHttpRequest
from toolhub.lib.storable import TooDeep, json_loads_bounded, storable_text

# A composer's intent is a few names; anything longer is not one.
MAX_DRAFT_CHARS = 4_096

# A filled-in prompt's arguments (code to review, say) may be long; not unbounded.
MAX_PROMPT_FORM_CHARS = 200_000

# --- a chat's slash commands (MCP prompts) -------------------------------------------------


@require_safe
@login_required
def chat_resources(request: HttpRequest, session_id: Any) -> JsonResponse:
    """The MCP servers' resources the composer offers after "@"."""
    found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    return JsonResponse({"resources": mcp_resources()})


@require_POST
@login_required
def chat_resource_attach(request: HttpRequest, session_id: Any) -> JsonResponse:
    """A resource's contents for the composer to add to the message: ``{"text"}``, or
    ``{"error"}`` with 400 (not listed) or 409 (it cannot be read now)."""
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    return _text_answer(
        lambda: mcp_resource_attach(
            session=session, server=request.POST.get("server", ""), uri=request.POST.get("uri", "")
        )
    )


def _text_answer(make: Callable[[], str]) -> JsonResponse:
    """``{"text"}`` from ``make()``, or ``{"error"}`` with its status when it refuses."""
    try:
        text = make()
    except ServiceError as exc:
        return JsonResponse({"error": exc.message}, status=exc.status)
    return JsonResponse({"text": storable_text(text)})


@require_safe
@login_required
def chat_prompts(request: HttpRequest, session_id: Any) -> JsonResponse:
    """The MCP servers' prompts the composer offers after "/"."""
    found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    return JsonResponse({"prompts": mcp_prompts()})


@require_POST
@login_required
def chat_prompt_fill(request: HttpRequest, session_id: Any) -> JsonResponse:
    """A prompt filled in: ``{"text"}`` for the composer to send as the person's message,
    or ``{"error"}`` with 400 (its arguments) or 409 (the server cannot answer now)."""
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    return _text_answer(
        lambda: mcp_prompt_fill(
            session=session,
            server=request.POST.get("server", ""),
            name=request.POST.get("name", ""),
            arguments=_prompt_arguments(request.POST.get("arguments") or "{}"),
        )
    )


def _prompt_arguments(raw: str) -> Any:
    if len(raw) > MAX_PROMPT_FORM_CHARS:
        raise Invalid(f"the arguments are longer than {MAX_PROMPT_FORM_CHARS:,} characters")
    try:
        return json_loads_bounded(raw)
    except (ValueError, TooDeep):
        raise Invalid("the arguments are not JSON") from None


# --- the chat's inspector ----------------------------------------------------------------


@require_safe
@login_required
def chat_inspector(request: HttpRequest, session_id: Any) -> HttpResponse:
    """What the next turn of this chat will send, and what the last ones cost."""
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    draft = request.GET.get("draft")
    try:
        if draft:
            # What the composer is set to now, before any turn (sent as a chat frame's
            # intent): previewed on an unsaved copy.
            session = session_with_draft(session=session, draft=_json_object(draft))
        toolset, problem = inspector_toolset(session=session), ""
    except ServiceError as exc:
        toolset, problem = None, exc.message
    return _inspector(request, session, toolset, problem, draft=bool(draft))


def _json_object(text: str) -> Any:
    try:
        value = json_loads_bounded(text[:MAX_DRAFT_CHARS])
    except (ValueError, TooDeep):
        raise Invalid("the composer's intent is not JSON") from None
    if not isinstance(value, dict):
        raise Invalid("the composer's intent is a JSON object")
    return value


def _inspector(
    request: HttpRequest,
    session: ChatSession,
    toolset: dict[str, Any] | None,
    problem: str,
    **extra: Any,
) -> HttpResponse:
    context = {
        "session": session,
        "toolset": toolset,
        "problem": problem,
        "calls": session_recent_calls(session=session),
        **extra,
    }
    return render(request, "sessions_app/chat.html#inspector", context)


@require_POST
@login_required
def chat_plan_reset(request: HtmxHttpRequest, session_id: Any) -> HttpResponse:
    """The inspector's "Rebuild tiers": a new tier plan from today's usage, kept."""
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    try:
        session = inspector_plan_reset(user=request.user, session=session)
        toolset, problem = inspector_toolset(session=session), ""
    except ServiceError as exc:
        toolset, problem = None, exc.message
    if not request.htmx:
        # Without JavaScript the form posts the page itself: back to the chat.
        return redirect("chat_session", session_id=session.pk)
    return _inspector(request, session, toolset, problem, plan_reset=not problem)


@require_POST
@login_required
def chat_allowed_revoke(request: HtmxHttpRequest, session_id: Any) -> HttpResponse:
    """The inspector's "Revoke": the tool asks again from its next call in this chat."""
    session = found_or_404(session_get_for_user, user=request.user, session_id=session_id)
    tool = request.POST.get("tool", "")
    session = session_allowed_revoke(user=request.user, session=session, tool=tool)
    if not request.htmx:
        return redirect("chat_session", session_id=session.pk)
    try:
        toolset, problem = inspector_toolset(session=session), ""
    except ServiceError as exc:
        toolset, problem = None, exc.message
    return _inspector(request, session, toolset, problem, revoked=tool)


# --- the operators' page -----------------------------------------------------------------


def check_staff(request: HttpRequest) -> None:
    """The operators' pages: anyone but staff gets the 404 of a page that is not there."""
    if not request.user.is_staff:
        raise Http404("no such page")


def _render(
    request: HttpRequest,
    *,
    failed: dict[str, str] | None = None,
    policy_failed: dict[str, str] | None = None,
    status: int = 200,
) -> HttpResponse:
    tools, orphans = tools_for_ops()
    context = {
        "mcp_servers": [
            {**server_json(server), "logs": mcp_logs(server)} for server in mcp_servers()
        ],
        "tools": tools,
        "orphans": orphans,
        "policies": tool_policy_rows(),
        "audit": global_disable_audit(),
        "failed": failed or {},
        "policy_failed": policy_failed or {},
        "disabled_count": sum(1 for tool in tools if tool.disable) + len(orphans),
    }
    return render(request, "agent_app/ops_tools.html", context, status=status)


@require_safe
@login_required
def ops_tools(request: HttpRequest) -> HttpResponse:
    check_staff(request)
    return _render(request)


def _ops_change(
    request: HttpRequest,
    change: Callable[[str, str], object],
    done: str,
    *,
    section: str = "failed",
) -> HttpResponse:
    """One operator's change to a tool (``change(tool, reason)``, through its service): a
    refused one re-renders the page with the reason in its ``section``."""
    check_staff(request)
    tool, reason = request.POST.get("tool", ""), request.POST.get("reason", "")
    try:
        change(tool, reason)
    except ServiceError as exc:
        failed = {"tool": tool, "reason": reason, "message": exc.message}
        return _render(request, **{section: failed}, status=exc.status)
    messages.success(request, done.format(tool=tool))
    return redirect("ops_tools")


@require_POST
@login_required
def ops_tool_disable(request: HttpRequest) -> HttpResponse:
    return _ops_change(
        request,
        lambda tool, reason: tool_disable_globally(user=request.user, tool=tool, reason=reason),
        "{tool} is disabled for everybody.",
    )


@require_POST
@login_required
def ops_tool_enable(request: HttpRequest) -> HttpResponse:
    return _ops_change(
        request,
        lambda tool, reason: tool_enable_globally(user=request.user, tool=tool),
        "{tool} is enabled again.",
    )


@require_POST
@login_required
def ops_tool_policy(request: HttpRequest) -> HttpResponse:
    policy = request.POST.get("policy", "")
    return _ops_change(
        request,
        lambda tool, reason: tool_policy_set(
            user=request.user, tool=tool, policy=policy, reason=reason
        ),
        "{tool} "
        + ("asks every time" if policy == "ask" else "runs without asking")
        + ", for everybody.",
        section="policy_failed",
    )


@require_POST
@login_required
def ops_tool_policy_clear(request: HttpRequest) -> HttpResponse:
    return _ops_change(
        request,
        lambda tool, reason: tool_policy_clear(user=request.user, tool=tool),
        "{tool} follows its author's default again.",
        section="policy_failed",
    )


@require_POST
@login_required
def ops_mcp_enabled(request: HttpRequest, server_id: int) -> HttpResponse:
    check_staff(request)
    server = found_or_404(mcp_server_get, server_id=server_id)
    enabled = request.POST.get("enabled") == "1"
    mcp_server_save(user=request.user, server=server, data={"enabled": enabled})
    messages.success(
        request, f"MCP server {server.name} is {'enabled' if enabled else 'disabled'}."
    )
    return redirect("ops_tools")


# --- a person's own MCP credentials ----------------------------------------------------


@login_required
def mcp_credentials_page(request: HttpRequest) -> HttpResponse:
    """The servers that take each person's own credential, and theirs: set, replaced or
    removed here, never shown back."""
    failed, status = "", 200
    if request.method == "POST":
        server_id = request.POST.get("server", "")
        if not (server_id.isascii() and server_id.isdigit()):
            raise Http404("no such server")
        try:
            if request.POST.get("action") == "remove":
                mcp_credential_delete(user=request.user, server_id=int(server_id))
                messages.success(request, "Your credential is removed.")
            else:
                view = mcp_credential_set(
                    user=request.user, server_id=int(server_id), value=request.POST.get("value")
                )
                messages.success(request, f"Your credential for {view.server} is saved.")
        except ServiceError as exc:
            if exc.status == 404:
                raise Http404(exc.message) from None
            failed, status = exc.message, exc.status
        else:
            return redirect("mcp_credentials")
    context = {"servers": mcp_credentials_of(user=request.user), "failed": failed}
    return render(request, "agent_app/mcp_credentials.html", context, status=status)


# --- an OAuth server's sign-in ---------------------------------------------------------------


def _check_staff_for_sign_in(request: HttpRequest) -> None:
    # 403, not the ops page's 404: the person came from a link or a redirect, and should
    # learn that it is theirs to follow only as staff.
    if not request.user.is_staff:
        raise PermissionDenied("Only staff sign in to MCP servers.")


def _sign_in_failed(request: HttpRequest, server: McpServer, exc: ServiceError) -> HttpResponse:
    context = {"server": server, "message": exc.message}
    return render(request, "agent_app/mcp_sign_in_failed.html", context, status=exc.status)


@never_cache
@require_POST
@login_required
def ops_mcp_oauth_sign_in(request: HttpRequest, server_id: int) -> HttpResponse:
    """The ops page's "Sign in": off to the server's authorization server.

    A page that moves on by itself, not a 302: a redirect answering a form's POST is
    held to the page's CSP ``form-action 'self'``, and the browser would refuse to leave
    for the authorization server."""
    _check_staff_for_sign_in(request)
    server = found_or_404(mcp_server_get, server_id=server_id)
    callback = request.build_absolute_uri(reverse("ops_mcp_oauth_callback", args=[server.pk]))
    try:
        url = mcp_oauth_sign_in_begin(user=request.user, server=server, redirect_uri=callback)
    except ServiceError as exc:
        return _sign_in_failed(request, server, exc)
    context = {"server": server, "url": url, "host": urlsplit(url).netloc}
    return render(request, "agent_app/mcp_sign_in_redirect.html", context)


@require_safe
@login_required
def ops_mcp_oauth_callback(request: HttpRequest, server_id: int) -> HttpResponse:
    """Where the authorization server sends the browser back, with a code and the state."""
    _check_staff_for_sign_in(request)
    server = found_or_404(mcp_server_get, server_id=server_id)
    try:
        mcp_oauth_sign_in_finish(
            user=request.user,
            server=server,
            state=request.GET.get("state", ""),
            code=request.GET.get("code", ""),
            iss=request.GET.get("iss"),
            error=request.GET.get("error", ""),
        )
    except ServiceError as exc:
        return _sign_in_failed(request, server, exc)
    messages.success(request, f"Signed in to MCP server {server.name}; it connects now.")
    return redirect(f"{reverse('ops_tools')}#mcp-{server.name}")
