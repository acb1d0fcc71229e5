"""WSGI entry point, for HTTP-only hosting; the product itself runs on ASGI (toolhub.asgi)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolhub.settings")

application = get_wsgi_application()
