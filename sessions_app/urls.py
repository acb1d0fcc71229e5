"""The chat pages."""

from __future__ import annotations

from django.urls import path

from sessions_app import views

urlpatterns = [
    path("settings/", views.settings_page, name="settings"),
    path("chat/", views.chat, name="chat"),
    path("chat/new/", views.chat_new, name="chat_new"),
    path("chat/import/", views.chat_import_page, name="chat_import"),
    path("chat/search/", views.chat_search, name="chat_search"),
    path("chat/<uuid:session_id>/", views.chat_session, name="chat_session"),
    path("chat/<uuid:session_id>/options/", views.chat_options, name="chat_options"),
    path("chat/<uuid:session_id>/rename/", views.chat_rename, name="chat_rename"),
    path("chat/<uuid:session_id>/export/<str:form>/", views.chat_export, name="chat_export"),
    path("chat/<uuid:session_id>/delete/", views.chat_delete, name="chat_delete"),
    path("chat/<uuid:session_id>/branch/", views.chat_branch, name="chat_branch"),
    path("chat/<uuid:session_id>/keep/<str:how>/", views.chat_keep, name="chat_keep"),
    path("chat/<uuid:session_id>/restore/", views.chat_restore, name="chat_restore"),
    path(
        "chat/<uuid:session_id>/calls/<int:call_seq>/result/",
        views.chat_call_result,
        name="chat_call_result",
    ),
    path(
        "chat/<uuid:session_id>/files/<uuid:file_id>/",
        views.chat_result_file,
        name="chat_result_file",
    ),
]
