"""The chat pages."""

from __future__ import annotations

from django.urls import path

from sessions_app import views

urlpatterns = [
    path("chat/", views.chat, name="chat"),
    path("chat/new/", views.chat_new, name="chat_new"),
    path("chat/<uuid:session_id>/", views.chat_session, name="chat_session"),
    path("chat/<uuid:session_id>/plan/", views.chat_plan_mode, name="chat_plan_mode"),
    path("chat/<uuid:session_id>/rename/", views.chat_rename, name="chat_rename"),
    path("chat/<uuid:session_id>/delete/", views.chat_delete, name="chat_delete"),
]
