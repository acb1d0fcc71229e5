from __future__ import annotations

from django.apps import AppConfig


class ProfilesConfig(AppConfig):
    name = "profiles_app"
    default_auto_field = "django.db.models.BigAutoField"
