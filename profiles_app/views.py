"""The Programs page: a person's tool profiles against the catalog. (The operators' page
is ``agent_app.views``: it shows MCP connections too.)

Every action is a POST through the same service the API uses and redirects back, so a
reload never repeats it; a refused one re-renders the page with the reason. Edits name the
version they were made on, so an edit made in another tab meanwhile is refused, not
overwritten. Another person's profile is a 404.

Switching a profile between "all except" and "only" rewrites its list, so it takes two
steps: the first POST only says what the switch will do and asks; the confirmed one makes
it and offers to undo it. With htmx the profile's section is swapped in place (the same
partial the page renders); without JavaScript each step is a plain form and a page.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from profiles_app import services
from profiles_app.models import ToolProfile
from toolhub.lib.errors import Invalid, ServiceError, Stale, found_or_404
from toolhub.lib.htmx import HtmxHttpRequest
from toolhub.lib.storable import json_loads_bounded
from toolhub.lib.versioned import posted_version
from toolhub.tools.presets import DEFAULT_PRESET

IMPORT_MAX_BYTES = 256 * 1024
# The last mode switch of this browser session, kept so that its notice and Undo button
# survive the redirect after the switch and a reload: for a while, and only as long as
# nothing changed the profile since.
SWITCH_UNDO_KEY = "programs_switch_undo"
SWITCH_UNDO_SECONDS = 15 * 60


# --- the Programs page -------------------------------------------------------------------


def _programs(
    request: HtmxHttpRequest,
    *,
    profile_id: int | None = None,
    preset: str = DEFAULT_PRESET,
    failed: str = "",
    status: int = 200,
    confirm: services.ModeSwitch | None = None,
) -> HttpResponse:
    user = request.user
    profiles = services.profiles_for_user(user=user)
    if profile_id is not None:
        chosen = next((view for view in profiles if view.id == profile_id), None)
    else:
        chosen = next((view for view in profiles if view.id is None and view.name == preset), None)
    if chosen is None:
        raise Http404("no such profile")
    catalog = services.profile_catalog(user=user, view=chosen)
    context = {
        "profiles": profiles,
        "chosen": chosen,
        "new_chats": services.new_chat_toolset(user=user) or DEFAULT_PRESET,
        "editable": chosen.id is not None and not chosen.readonly,
        "offered": catalog.offered,
        "left_out": catalog.left_out,
        "cost": catalog.cost,
        "failed": failed,
        "modes": ToolProfile.Mode.choices,
        "confirm": confirm,
        "undo": _switch_undo(request, chosen.id, chosen.version),
    }
    if request.htmx:
        # htmx swaps in only a 2xx answer: a refusal comes as 200, its reason in the section.
        response = render(request, "profiles_app/programs.html#profile", context)
    else:
        response = render(request, "profiles_app/programs.html", context, status=status)
    patch_vary_headers(response, ("HX-Request",))
    return response


def _switch_undo(
    request: HtmxHttpRequest, profile_id: int | None, version: int | None
) -> dict[str, Any] | None:
    """The undo of the last switch, while the profile is still as that switch left it."""
    undo = request.session.get(SWITCH_UNDO_KEY)
    if not undo or (undo["profile"], undo["version"]) != (profile_id, version):
        return None
    return undo if time.time() - undo["at"] < SWITCH_UNDO_SECONDS else None


def _edited(request: HtmxHttpRequest, profile_id: int) -> HttpResponse:
    """The answer to an edit made: htmx gets the profile's section at once; a plain form a
    redirect, so that a reload never repeats the edit."""
    if request.htmx:
        return _programs(request, profile_id=profile_id)
    return redirect("profile", profile_id=profile_id)


@require_safe
@login_required
def programs(request: HtmxHttpRequest, preset: str = DEFAULT_PRESET) -> HttpResponse:
    return _programs(request, preset=preset)


@require_safe
@login_required
def profile(request: HtmxHttpRequest, profile_id: int) -> HttpResponse:
    return _programs(request, profile_id=profile_id)


@require_POST
@login_required
def programs_new_chats(request: HtmxHttpRequest) -> HttpResponse:
    """Make a profile (or a preset, or ``default``) what the person's new chats start with."""
    toolset = request.POST.get("toolset", "")
    try:
        profile_id = int(request.POST.get("profile") or 0) or None
    except ValueError:
        profile_id = None
    try:
        services.new_chat_default_set(user=request.user, toolset=toolset)
    except ServiceError as exc:
        return _programs(request, failed=exc.message, status=exc.status)
    messages.success(request, f"New chats start with {toolset.strip() or DEFAULT_PRESET}.")
    if profile_id is not None:
        return redirect("profile", profile_id=profile_id)
    return redirect("programs_preset", preset=toolset.strip() or DEFAULT_PRESET)


def _change(
    request: HtmxHttpRequest, profile_id: int, action: Callable[[ToolProfile], object], done: str
) -> HttpResponse:
    """Apply one edit to the person's profile through its service; a refused one
    re-renders the page with the reason."""
    profile = found_or_404(services.profile_get_for_user, user=request.user, profile_id=profile_id)
    try:
        action(profile)
    except ServiceError as exc:
        return _programs(request, profile_id=profile_id, failed=exc.message, status=exc.status)
    messages.success(request, done)
    return redirect("profile", profile_id=profile_id)


@require_POST
@login_required
def profile_new(request: HtmxHttpRequest) -> HttpResponse:
    name = request.POST.get("name", "")
    try:
        profile = services.profile_create(user=request.user, name=name)
    except ServiceError as exc:
        return _programs(request, failed=exc.message, status=exc.status)
    messages.success(request, f"Profile {profile.name} created: every tool, nothing removed yet.")
    return redirect("profile", profile_id=profile.pk)


@require_POST
@login_required
def profile_rename(request: HtmxHttpRequest, profile_id: int) -> HttpResponse:
    name = request.POST.get("name", "")
    return _change(
        request,
        profile_id,
        lambda profile: services.profile_rename(
            user=request.user, profile=profile, version=posted_version(request), name=name
        ),
        f"Renamed to {name.strip()}.",
    )


@require_POST
@login_required
def profile_mode(request: HtmxHttpRequest, profile_id: int) -> HttpResponse:
    """Switch between "all except" and "only": without ``confirm`` this only says what the
    switch will pin or list as removed and asks; with it, it switches and offers Undo."""
    profile = found_or_404(services.profile_get_for_user, user=request.user, profile_id=profile_id)
    mode, version = request.POST.get("mode", ""), posted_version(request)
    confirmed = request.POST.get("confirm") == "1"
    try:
        if confirmed:
            switched = services.profile_mode_switch(
                user=request.user, profile=profile, version=version, mode=mode
            )
            switch = switched.switch
        else:
            switch = services.profile_mode_switch_preview(
                user=request.user, profile=profile, version=version, mode=mode
            )
    except ServiceError as exc:
        return _programs(request, profile_id=profile_id, failed=exc.message, status=exc.status)
    if not switch.changes:
        messages.info(request, switch.done)
    elif not confirmed:
        return _programs(request, profile_id=profile_id, confirm=switch)
    else:
        request.session[SWITCH_UNDO_KEY] = {
            "profile": profile_id,
            "version": switched.profile.version,
            "at": time.time(),
            "done": switch.done,
            "mode": switch.previous_mode,
            "tools": list(switch.previous_tools),
        }
    return _edited(request, profile_id)


@require_POST
@login_required
def profile_mode_undo(request: HtmxHttpRequest, profile_id: int) -> HttpResponse:
    """Undo a switch: put back the mode and list it replaced, if nothing changed since."""
    profile = found_or_404(services.profile_get_for_user, user=request.user, profile_id=profile_id)
    mode = request.POST.get("mode", "")
    try:
        services.profile_mode_switch_undo(
            user=request.user,
            profile=profile,
            version=posted_version(request),
            mode=mode,
            tools=request.POST.getlist("tools"),
        )
    except Stale:
        failed = (
            "Not undone: this profile changed after the switch (in another tab?), and "
            "undoing now would overwrite that change. It is shown below as it is now."
        )
        return _programs(request, profile_id=profile_id, failed=failed, status=409)
    except ServiceError as exc:
        return _programs(request, profile_id=profile_id, failed=exc.message, status=exc.status)
    request.session.pop(SWITCH_UNDO_KEY, None)
    messages.success(request, f"Undone: back to {services.mode_name(mode)}, as it was.")
    return _edited(request, profile_id)


@require_POST
@login_required
def profile_tool(request: HtmxHttpRequest, profile_id: int, action: str) -> HttpResponse:
    tool = request.POST.get("tool", "")
    edit = {"remove": services.profile_tool_remove, "add": services.profile_tool_add}.get(action)
    if edit is None:
        raise Http404("no such action")
    return _change(
        request,
        profile_id,
        lambda profile: edit(
            user=request.user, profile=profile, version=posted_version(request), tool=tool
        ),
        f"{tool} {'removed from' if action == 'remove' else 'added back to'} this profile.",
    )


POLICY_WORDS = {
    "": "back to the default",
    "auto": "set to run without asking",
    "ask": "set to ask every time",
    "deny": "set to never run",
}


@require_POST
@login_required
def profile_tool_policy(request: HtmxHttpRequest, profile_id: int) -> HttpResponse:
    """A tool's approval policy in this profile: auto, ask, deny, or the default."""
    tool, policy = request.POST.get("tool", ""), request.POST.get("policy", "")
    return _change(
        request,
        profile_id,
        lambda profile: services.profile_tool_policy(
            user=request.user,
            profile=profile,
            version=posted_version(request),
            tool=tool,
            policy=policy,
        ),
        f"{tool} {POLICY_WORDS.get(policy, 'changed')} in this profile.",
    )


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
def profile_delete(request: HtmxHttpRequest, profile_id: int) -> HttpResponse:
    profile = found_or_404(services.profile_get_for_user, user=request.user, profile_id=profile_id)
    if request.method != "POST":
        return render(request, "profiles_app/profile_delete.html", {"profile": profile})
    try:
        services.profile_delete(user=request.user, profile=profile, version=posted_version(request))
    except ServiceError as exc:
        return _programs(request, profile_id=profile_id, failed=exc.message, status=exc.status)
    messages.success(request, f"Profile {profile.name} deleted.")
    return redirect("programs")


@require_safe
@login_required
def profiles_export(request: HttpRequest) -> HttpResponse:
    response = JsonResponse(
        services.profile_export(user=request.user), json_dumps_params={"indent": 2}
    )
    response["Content-Disposition"] = 'attachment; filename="toolhub-profiles.json"'
    return response


@require_POST
@login_required
def profiles_import(request: HtmxHttpRequest) -> HttpResponse:
    upload = request.FILES.get("file")
    try:
        if upload is None:
            raise Invalid("choose a JSON file to import")
        # Django measures every upload; one of unknown size is refused, never read whole.
        if upload.size is None or upload.size > IMPORT_MAX_BYTES:
            raise Invalid(f"the file is over {IMPORT_MAX_BYTES // 1024} KiB")
        try:
            data = json_loads_bounded(upload.read())
        except (ValueError, UnicodeDecodeError):
            raise Invalid("the file is not JSON") from None
        report = services.profile_import(user=request.user, data=data)
    except ServiceError as exc:
        return _programs(request, failed=exc.message, status=exc.status)
    summary = f"Imported {len(report.created)} profile{'s' if len(report.created) != 1 else ''}"
    if report.unknown_tools:
        unknown = sorted({name for names in report.unknown_tools.values() for name in names})
        summary += f"; not registered here (kept, shown as missing): {', '.join(unknown)}"
    messages.success(request, summary + ".")
    for name, how in report.mapped.items():
        messages.info(request, f"'{name}' {how}.")
    if report.active:
        messages.info(request, f"{report.active[0].upper()}{report.active[1:]}.")
    return redirect("programs")
