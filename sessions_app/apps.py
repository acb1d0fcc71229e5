from __future__ import annotations

from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "sessions_app"
    default_auto_field = "django.db.models.BigAutoField"
