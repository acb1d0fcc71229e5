"""Project-level pages: the home page (the chat), the operators' status table and the
health probe."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from toolhub.health import health_report
from toolhub.lib.outage import RETRY_AFTER_SECONDS


@require_safe
@never_cache
async def healthz(request: HttpRequest) -> JsonResponse:
    report = await health_report()
    if report["status"] == "ok":
        return JsonResponse(report)
    response = JsonResponse(report, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


@require_safe
@login_required
def home(request: HttpRequest) -> HttpResponse:
    # People come to chat: signing in, or opening the site, lands there.
    return redirect("chat")


@require_safe
@login_required
def status(request: HttpRequest) -> HttpResponse:
    """Each part's state, for operators."""
    if not request.user.is_staff:
        raise Http404
    report = async_to_sync(health_report)()
    return render(request, "toolhub/status.html", {"report": report})
