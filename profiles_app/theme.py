"""The look every page is drawn with (``<html data-theme>``, compact tool cards): the
person's choice, read once per request (one primary-key query), so a change made anywhere
shows on the next page."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from profiles_app.models import Preferences

_ON_REQUEST = "_toolhub_preferences"


def request_preferences(request: HttpRequest) -> Preferences:
    """The signed-in person's preferences (unsaved defaults if they never chose), read
    once for the request whoever asks first: the page's view or its template."""
    found = getattr(request, _ON_REQUEST, None)
    if found is None:
        user = request.user
        if not user.is_authenticated:
            # Asked by pages behind login_required and by ``theme`` for a signed-in person.
            raise PermissionDenied
        found = Preferences.objects.filter(user=user).first() or Preferences(user=user)
        setattr(request, _ON_REQUEST, found)
    return found


def theme(request: HttpRequest) -> dict[str, Any]:
    """Context processor: ``theme`` is system, light or dark."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"theme": Preferences.Theme.SYSTEM}
    # Lazy: only a template that draws it (base.html) pays the query, not every partial.
    return {"theme": SimpleLazyObject(lambda: request_preferences(request).theme)}
