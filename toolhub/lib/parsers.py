"""The API's JSON parser: DRF's, with nesting bounded, so a deep body is a JSON 400, never
a RecursionError's 500 (toolhub.lib.storable.json_loads_bounded).

Its own module: DRF reads its settings, this class among them, while rest_framework.views
is being imported, so the class cannot live beside the views' helpers in toolhub.lib.api.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import exceptions, parsers

from toolhub.lib.storable import json_loads_bounded


class BoundedJSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            return json_loads_bounded(stream.read().decode(encoding))
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
