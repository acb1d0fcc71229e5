from __future__ import annotations

from django.apps import AppConfig


class AgentConfig(AppConfig):
    name = "agent_app"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        # Bind @shared_task functions to toolhub's Celery app in every Django process.
        import toolhub.celery  # noqa: F401
        from toolhub.tools import embeddings, load_plugins

        embeddings.enabled = settings.TOOLHUB_SEMANTIC_SEARCH
        # Plugins register once per process, in a fixed order, before any turn resolves.
        load_plugins(settings.TOOLHUB_TOOL_MODULES)
