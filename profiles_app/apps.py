from __future__ import annotations

from django.apps import AppConfig


class ProfilesConfig(AppConfig):
    name = "profiles_app"
    verbose_name = "Tools, profiles and agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from profiles_app.services import AgentsAdapter
        from toolhub.lib.chat_services import chat_services_provide

        chat_services_provide(agents=AgentsAdapter())
