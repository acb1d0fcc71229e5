"""The operators' page of model providers: the environment's, and the connections staff
add, change, refresh and remove here (docs/models.md).

Saving or refreshing a provider asks its models endpoint once, bounded by
``LIST_SECONDS``; what it answers is stored, so no other page waits on a provider. A
provider that cannot be asked keeps its earlier list and its manual models, and the page
says why. Everything here is staff only: anyone else gets the 404 the other operators'
pages give.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST, require_safe

from agent_app.providers import ProviderError, provider_for
from agent_app.views import check_staff
from profiles_app.models import ProviderConnection
from profiles_app.services.connections import (
    BUILTIN,
    DEMO,
    ENV_LABELS,
    ModelEntry,
    connection_delete,
    connection_get,
    connection_listing_store,
    connection_models,
    connection_save,
    connections_all,
    provider_offer,
)
from toolhub.lib.errors import Forbidden, ServiceError

log = logging.getLogger(__name__)

LIST_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class ProviderRow:
    """A provider as the page shows it."""

    name: str
    label: str
    kind: str
    reaches: str
    from_env: bool
    models: tuple[ModelEntry, ...]
    connection: ProviderConnection | None
    # Whether the chats' pickers offer it now.
    offered: bool


def models_refresh(*, user: Any, name: str) -> tuple[int, str]:
    """Ask provider ``name``'s models endpoint and keep the answer: (how many it listed,
    why it could not be asked). A provider of the environment gets a row for its list."""
    if not user.is_staff:
        raise Forbidden("model providers are managed by staff")
    if name == DEMO:
        return 1, ""
    if name in BUILTIN and connection_get(name) is None:
        connection_save(user=user, name=name, kind=name, base_url="", api_key=None, manual="")
    try:
        provider = provider_for(name)
        listed = async_to_sync(_listed)(provider)
    except ProviderError as exc:
        problem = exc.message
    except TimeoutError:
        problem = f"no answer within {LIST_SECONDS:.0f} s"
    except Exception as exc:
        # By type only: an error's words may hold the request's headers, the key among them.
        log.info("listing %s's models failed: %s", name, type(exc).__name__)
        problem = f"its answer could not be read ({type(exc).__name__})"
    else:
        return connection_listing_store(name=name, listed=listed), ""
    connection_listing_store(name=name, listed=None, problem=problem)
    return 0, problem


async def _listed(provider: Any) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = await asyncio.wait_for(provider.list_models(), LIST_SECONDS)
    return result


def _rows() -> list[ProviderRow]:
    rows = {connection.name: connection for connection in connections_all()}
    shown = []
    for name, label in ENV_LABELS.items():
        offer = provider_offer(name)
        connection = rows.pop(name, None)
        if offer is None:
            continue
        shown.append(
            ProviderRow(name, label, name, _env_reaches(name), True, offer.models, connection, True)
        )
    for connection in rows.values():
        if connection.from_env:
            continue
        shown.append(
            ProviderRow(
                connection.name,
                connection.name,
                connection.kind,
                connection.base_url or "api.anthropic.com",
                False,
                _models_or_none(connection),
                connection,
                connection.enabled,
            )
        )
    return shown


def _env_reaches(name: str) -> str:
    if name == "anthropic":
        return str(settings.ANTHROPIC_BASE_URL or "api.anthropic.com")
    return str(settings.OPENAI_BASE_URL)


def _models_or_none(connection: ProviderConnection) -> tuple[ModelEntry, ...]:
    try:
        return connection_models(connection)
    except ServiceError:
        return ()


def _page(
    request: HttpRequest, *, failed: str = "", form: Any = None, status: int = 200
) -> HttpResponse:
    context = {
        "rows": _rows(),
        "kinds": ProviderConnection.Kind.choices,
        "failed": failed,
        "form": form or {},
    }
    return render(request, "agent_app/providers.html", context, status=status)


@require_safe
@login_required
def ops_providers(request: HttpRequest) -> HttpResponse:
    check_staff(request)
    return _page(request)


@require_POST
@login_required
def ops_provider_save(request: HttpRequest) -> HttpResponse:
    """Add a connection or change one (its key only when one is typed), then list its
    models."""
    check_staff(request)
    form = {key: request.POST.get(key, "") for key in ("name", "kind", "base_url", "manual")}
    key = request.POST.get("api_key", "")
    try:
        connection = connection_save(
            user=request.user,
            name=form["name"],
            kind=form["kind"],
            base_url=form["base_url"],
            # An empty box keeps the stored key; "Remove the key" clears it.
            api_key="" if request.POST.get("clear_key") == "on" else key or None,
            manual=form["manual"],
            enabled=request.POST.get("enabled", "on") == "on",
        )
    except ServiceError as exc:
        # Drawn again as sent (the key is never sent back): nothing typed is lost.
        return _page(request, failed=exc.message, form=form, status=exc.status)
    _said(request, connection.name, *models_refresh(user=request.user, name=connection.name))
    return redirect("ops_providers")


@require_POST
@login_required
def ops_provider_refresh(request: HttpRequest, name: str) -> HttpResponse:
    check_staff(request)
    if name != DEMO and provider_offer(name) is None and connection_get(name) is None:
        raise Http404("no such provider")
    _said(request, name, *models_refresh(user=request.user, name=name))
    return redirect("ops_providers")


@require_POST
@login_required
def ops_provider_delete(request: HttpRequest, name: str) -> HttpResponse:
    check_staff(request)
    try:
        connection_delete(user=request.user, name=name)
    except ServiceError as exc:
        if exc.status == 404:
            raise Http404("no such provider") from None
        return _page(request, failed=exc.message, status=exc.status)
    messages.success(request, f"Removed {name}. Agents and chats that name it must pick another.")
    return redirect("ops_providers")


def _said(request: HttpRequest, name: str, count: int, problem: str) -> None:
    if problem:
        messages.warning(
            request,
            f"Saved {name}, but its models could not be listed: {problem}. "
            "Its manual models, if any, are offered.",
        )
    else:
        messages.success(request, f"Saved {name}: it lists {count} model{'s' * (count != 1)}.")
