from __future__ import annotations

from django.apps import AppConfig


class AgentConfig(AppConfig):
    name = "agent_app"
    default_auto_field = "django.db.models.BigAutoField"
