"""The Agents page: a person's agents and the shared ones; create, edit, duplicate and
delete, through the same services as ``/api/agents/``, with the same errors.

An agent stores intent (a toolset name and the rest of its tool intent); the page shows
what it expands to now, for its own model's window and strategy: the token meter and the
tools it hides, with why. Edits name the version they read: a stale one is refused and
the page says so. Another person's agent is a 404.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from agent_app.providers import ProviderError, provider_for
from agent_app.providers.windows import agent_window, turn_model
from profiles_app.models import DEFAULT_AGENT, Agent
from profiles_app.services import (
    agent_check_deletable,
    agent_create,
    agent_delete,
    agent_duplicate,
    agent_get_for_user,
    agent_tool_set,
    agent_update,
    agents_visible_to,
    catalog_context,
    global_disables,
    profile_lookup_for,
    profiles_for_user,
    shared_first,
)
from profiles_app.services.connections import connections_all, provider_offers
from toolhub.lib.errors import Invalid, ServiceError, found_or_404
from toolhub.lib.versioned import posted_version
from toolhub.tools import ResolvedToolset, ToolIntent, UnknownToolsetError, resolve, token_cost
from toolhub.tools.layers import AGENT_REMOVALS, META_TOOLS, hidden_words

# One line each, as the page explains the deferred-loading strategies.
STRATEGY_WORDS = {
    "call_tool": "The tool array never changes: found tools are called through call_tool, "
    "so the prompt cache always holds.",
    "promote": "Found tools join the array for the rest of the turn: one cache change when "
    "a tool is found.",
    "native": "The provider defers tools itself (Anthropic): everything is sent, deferred "
    "ones flagged; falls back to call_tool elsewhere.",
}


@dataclass(frozen=True, slots=True)
class ProviderState:
    value: str
    label: str
    # Why a turn with it could not reach it ("" when it is configured).
    problem: str
    # What it reaches, when configured.
    reaches: str = ""


def _configured(value: str) -> tuple[str, str]:
    """(problem, what it reaches) from the settings alone: no page view calls out."""
    if value == "anthropic":
        if not (settings.ANTHROPIC_API_KEY or settings.ANTHROPIC_BASE_URL):
            return "no ANTHROPIC_API_KEY is set", ""
        return "", settings.ANTHROPIC_BASE_URL or "api.anthropic.com"
    if value == "openai":
        if not settings.OPENAI_BASE_URL:
            return "no OPENAI_BASE_URL is set", ""
        return "", settings.OPENAI_BASE_URL
    return "", "offline, on this server"


def provider_states(*, staff: bool) -> list[ProviderState]:
    """Each provider an agent can name, and whether a turn with it can reach it here: the
    built-in ones, then the connections staff made (docs/models.md). Where each reaches
    is for ``staff`` only: a URL may name an inner host or carry a credential."""
    states = []
    for value, label in Agent.Provider.choices:
        chosen = value or settings.TOOLHUB_PROVIDER
        try:
            provider_for(value)
        except ProviderError as exc:
            problem, reaches = exc.message, ""
        else:
            problem, reaches = _configured(chosen)
        if not value:
            label = f"{label} ({chosen})"
        # The demo's "offline, on this server" is no address; the others' URLs are.
        shown = reaches if staff or chosen == "demo" else ""
        states.append(ProviderState(value, label, problem, shown))
    for connection in connections_all():
        if connection.from_env:
            continue
        problem = "" if connection.enabled else "turned off by staff"
        reaches = (connection.base_url or "api.anthropic.com") if staff else ""
        states.append(ProviderState(connection.name, connection.name, problem, reaches))
    return states


def _expanded(request: HttpRequest, agent: Agent) -> dict[str, Any]:
    """What the agent's tools are now, on its model and in its window: token meter and
    hidden tools."""
    try:
        provider = provider_for(agent.provider)
        model = turn_model(agent=agent, provider=provider)
    except ProviderError as exc:
        model = agent.model or f"unavailable: {exc.message}"
    window = agent_window(agent)
    try:
        resolved = resolve(
            agent_intent=agent.tool_intent,
            profile_lookup=profile_lookup_for(request.user),
            disabled=global_disables(),
            ctx=catalog_context(user=request.user),
            strategy=agent.strategy,
            context_window_tokens=window.tokens,
            budget_tokens=agent.tier_budget,
        )
    except UnknownToolsetError as exc:
        return {
            "model": model,
            "window": window,
            "problem": f"{exc.args[0]}; pick another profile",
        }
    hidden = _hidden_json(resolved)
    return {
        "model": model,
        "window": window,
        "cost": token_cost(resolved),
        "resident": len(resolved.resident),
        "deferred": len(resolved.deferred),
        "offered": _offered_json(resolved),
        "hidden": hidden,
        "restorable": any(item["restorable"] for item in hidden),
    }


def _offered_json(resolved: ResolvedToolset) -> list[dict[str, Any]]:
    deferred = {tool.name for tool in resolved.deferred}
    return [
        {
            "name": tool.name,
            "label": tool.label,
            "summary": (tool.description.strip().splitlines() or [""])[0],
            "deferred": tool.name in deferred,
            "meta": tool.name in META_TOOLS,
        }
        for tool in resolved.offered
    ]


def _hidden_json(resolved: ResolvedToolset) -> list[dict[str, Any]]:
    return [
        {
            "name": item.name,
            "layer": item.layer,
            "words": hidden_words(item.layer, item.reason),
            # What the agent's own intent took out, it can put back.
            "restorable": item.reason in AGENT_REMOVALS,
        }
        for item in resolved.hidden
    ]


FORM_FIELDS = ("name", "description", "provider", "model", "system_prompt", "toolset", "strategy")


def _form_of(agent: Agent) -> dict[str, Any]:
    """The edit form's values as stored."""
    return {
        **{key: getattr(agent, key) for key in FORM_FIELDS if key != "toolset"},
        "toolset": ToolIntent.parse(agent.tool_intent).toolset or "",
        "context_window": agent.context_window or "",
        "plan_mode": agent.plan_mode,
    }


def _form_posted(request: HttpRequest) -> dict[str, Any]:
    """The edit form's values as sent: a refused edit is shown with them, nothing lost."""
    return {
        **{key: request.POST.get(key, "") for key in FORM_FIELDS},
        "context_window": request.POST.get("context_window", "").strip(),
        "plan_mode": request.POST.get("plan_mode") == "on",
    }


def _window_posted(text: str) -> int | None:
    """The context window field: empty for the server's, else a whole number of tokens
    (the service checks its range)."""
    if not text:
        return None
    cleaned = text.replace(",", "").replace("_", "").replace(" ", "")
    if not cleaned.isascii() or not cleaned.isdigit() or len(cleaned) > 9:
        raise Invalid(
            "The context window is a whole number of tokens, or empty to use what the "
            "model's server reports.",
            fields={"context_window": ["not a number"]},
        )
    return int(cleaned)


def _page(
    request: HttpRequest,
    *,
    agent_id: int | None = None,
    failed: str = "",
    status: int = 200,
    form: dict[str, Any] | None = None,
    new_name: str = "",
) -> HttpResponse:
    agents = shared_first(agents_visible_to(request.user))
    chosen: Agent | None
    if agent_id is None:
        chosen = next((agent for agent in agents if agent.name == DEFAULT_AGENT), agents[0])
    else:
        chosen = next((agent for agent in agents if agent.pk == agent_id), None)
    if chosen is None:
        raise Http404("no such agent")
    editable = not chosen.is_shared or request.user.is_staff
    context = {
        "agents": agents,
        "chosen": chosen,
        "editable": editable,
        # The shared default agent always exists.
        "deletable": editable and not (chosen.is_shared and chosen.name == DEFAULT_AGENT),
        "form": form or _form_of(chosen),
        # A refused edit shows what was sent; this says what is stored now.
        "stored": _form_of(chosen) if form else None,
        "new_name": new_name,
        "toolsets": [view.name for view in profiles_for_user(user=request.user)],
        "providers": provider_states(staff=request.user.is_staff),
        # The Model box suggests what the providers list (any id may still be typed).
        "model_suggestions": sorted(
            {entry.id for offer in provider_offers() for entry in offer.models}
        ),
        "strategies": STRATEGY_WORDS,
        "failed": failed,
        **_expanded(request, chosen),
    }
    return render(request, "agent_app/agents.html", context, status=status)


@require_safe
@login_required
def agents(request: HttpRequest) -> HttpResponse:
    return _page(request)


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
def agent_page(request: HttpRequest, agent_id: int) -> HttpResponse:
    """One agent; a POST is its edit form, all fields at once, at the version it read."""
    agent = found_or_404(agent_get_for_user, user=request.user, agent_id=agent_id)
    if request.method != "POST":
        return _page(request, agent_id=agent_id)
    form = _form_posted(request)
    intent = ToolIntent.parse(agent.tool_intent).to_json()
    intent["toolset"] = form["toolset"] or None
    try:
        agent_update(
            user=request.user,
            agent=agent,
            version=posted_version(request),
            context_window=_window_posted(form["context_window"]),
            name=form["name"],
            description=form["description"],
            provider=form["provider"],
            model=form["model"].strip(),
            system_prompt=form["system_prompt"],
            tool_intent=intent,
            strategy=form["strategy"],
            plan_mode=form["plan_mode"],
        )
    except ServiceError as exc:
        return _page(request, agent_id=agent_id, failed=exc.message, status=exc.status, form=form)
    messages.success(request, "Agent saved.")
    return redirect("agent_page", agent_id=agent_id)


@require_POST
@login_required
def agent_tool(request: HttpRequest, agent_id: int, action: str) -> HttpResponse:
    """Remove a tool from what the agent offers, or add it back (its own intent)."""
    if action not in ("remove", "add"):
        raise Http404("no such action")
    agent = found_or_404(agent_get_for_user, user=request.user, agent_id=agent_id)
    tool = request.POST.get("tool", "")
    try:
        agent_tool_set(
            user=request.user,
            agent=agent,
            version=posted_version(request),
            tool=tool,
            offered=action == "add",
        )
    except ServiceError as exc:
        return _page(request, agent_id=agent_id, failed=exc.message, status=exc.status)
    done = "removed from" if action == "remove" else "added back to"
    messages.success(request, f"{tool} {done} {agent.name}.")
    return redirect("agent_page", agent_id=agent_id)


@require_POST
@login_required
def agent_new(request: HttpRequest) -> HttpResponse:
    name = request.POST.get("name", "")
    try:
        agent = agent_create(user=request.user, name=name)
    except ServiceError as exc:
        return _page(request, failed=exc.message, status=exc.status, new_name=name)
    messages.success(request, f"Agent {agent.name} created: set its model and tools below.")
    return redirect("agent_page", agent_id=agent.pk)


@require_POST
@login_required
def agent_copy(request: HttpRequest, agent_id: int) -> HttpResponse:
    agent = found_or_404(agent_get_for_user, user=request.user, agent_id=agent_id)
    try:
        copy = agent_duplicate(user=request.user, agent=agent)
    except ServiceError as exc:
        return _page(request, agent_id=agent_id, failed=exc.message, status=exc.status)
    messages.success(request, f"{copy.name} is a copy of {agent.name}, yours to change.")
    return redirect("agent_page", agent_id=copy.pk)


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
def agent_remove(request: HttpRequest, agent_id: int) -> HttpResponse:
    """Delete, after a confirmation page that says what happens to its chats."""
    agent = found_or_404(agent_get_for_user, user=request.user, agent_id=agent_id)
    try:
        # Asked before the question: no confirmation for what would be refused.
        agent_check_deletable(user=request.user, agent=agent)
        if request.method != "POST":
            context = {"agent": agent, "chats": agent.sessions.count()}
            return render(request, "agent_app/agent_delete.html", context)
        moved = agent_delete(user=request.user, agent=agent, version=posted_version(request))
    except ServiceError as exc:
        return _page(request, agent_id=agent_id, failed=exc.message, status=exc.status)
    note = ""
    if moved:
        note = (
            f"; its {moved} chats go on with default"
            if moved > 1
            else "; its chat goes on with default"
        )
    messages.success(request, f"Agent {agent.name} deleted{note}.")
    return redirect("agents")
