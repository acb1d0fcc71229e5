from __future__ import annotations

from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Chats"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from sessions_app.services import MessengerAdapter, PlanModeAdapter
        from toolhub.lib.chat_services import chat_services_provide

        chat_services_provide(messenger=MessengerAdapter(), plan_mode=PlanModeAdapter())
