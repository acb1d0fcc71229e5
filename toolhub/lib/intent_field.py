"""``IntentField``: the one path every stored tool intent goes through.

A session's and an agent's ``tool_intent`` hold intent, never an expanded tool list
(docs/architecture.md, hard line 1). Whoever writes the column (a service, a REST or
socket frame, a
page, the admin, an import, a ``QuerySet.update``) hands the value to this field, which
parses it with ``ToolIntent.parse`` and stores its canonical form: an unknown key or a
malformed list is refused (a form error in the admin, ``ValueError`` elsewhere) before it
reaches the database, so nothing the inspector or a turn reads can be malformed.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from toolhub.tools.intent import IntentError, ToolIntent


class IntentField(models.JSONField):
    def validate(self, value: Any, model_instance: Any) -> None:
        super().validate(value, model_instance)
        try:
            ToolIntent.parse(value)
        except IntentError as exc:
            raise ValidationError(str(exc), code="invalid_intent") from None

    def get_prep_value(self, value: Any) -> Any:
        if value is not None and not hasattr(value, "resolve_expression"):
            # Canonical, whoever wrote it: parse refuses what is not an intent.
            value = ToolIntent.parse(value).to_json()
        return super().get_prep_value(value)
