"""The request a page view receives: Django's, with ``request.htmx`` as django-htmx's
middleware sets it on every request (``toolhub.settings.MIDDLEWARE``), so a view that
reads it says so in its signature and is checked."""

from __future__ import annotations

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    # Declared, never instantiated: Django builds the request, the middleware adds this.
    htmx: HtmxDetails
