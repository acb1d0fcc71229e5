"""Pages of the profiles app: the ops page, where staff disable a tool for everybody.

Staff only: anyone else signed in gets a 404, as for an object that is not theirs. Every
action is a POST through the same service the API uses (a reason is required, every
change lands in the audit log) and redirects back, so a reload never repeats it; a
refused action re-renders the page with the error and what was typed.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST, require_safe

from profiles_app.services import (
    global_disable_audit,
    tool_disable_globally,
    tool_enable_globally,
    tools_for_ops,
)
from toolhub.errors import ServiceError


def _check_staff(request: HttpRequest) -> None:
    if not request.user.is_staff:
        raise Http404("no such page")


def _render(
    request: HttpRequest, *, failed: dict[str, str] | None = None, status: int = 200
) -> HttpResponse:
    tools, orphans = tools_for_ops()
    context = {
        "tools": tools,
        "orphans": orphans,
        "audit": global_disable_audit(),
        "failed": failed or {},
        "disabled_count": sum(1 for tool in tools if tool.disable) + len(orphans),
    }
    return render(request, "profiles_app/ops_tools.html", context, status=status)


@require_safe
@login_required
def ops_tools(request: HttpRequest) -> HttpResponse:
    _check_staff(request)
    return _render(request)


@require_POST
@login_required
def ops_tool_disable(request: HttpRequest) -> HttpResponse:
    _check_staff(request)
    tool, reason = request.POST.get("tool", ""), request.POST.get("reason", "")
    try:
        tool_disable_globally(user=request.user, tool=tool, reason=reason)
    except ServiceError as exc:
        failed = {"tool": tool, "reason": reason, "message": exc.message}
        return _render(request, failed=failed, status=exc.status)
    messages.success(request, f"{tool} is disabled for everybody.")
    return redirect("ops_tools")


@require_POST
@login_required
def ops_tool_enable(request: HttpRequest) -> HttpResponse:
    _check_staff(request)
    tool = request.POST.get("tool", "")
    try:
        tool_enable_globally(user=request.user, tool=tool)
    except ServiceError as exc:
        failed = {"tool": tool, "reason": "", "message": exc.message}
        return _render(request, failed=failed, status=exc.status)
    messages.success(request, f"{tool} is enabled again.")
    return redirect("ops_tools")
