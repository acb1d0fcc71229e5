"""The chat pages."""

from __future__ import annotations

from django.urls import path

from sessions_app import attachment_views, views, workspace_views

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
    path("chat/<uuid:session_id>/attachments/", attachment_views.chat_attach, name="chat_attach"),
    path(
        "chat/<uuid:session_id>/attachments/<uuid:file_id>/remove/",
        attachment_views.chat_attachment_remove,
        name="chat_attachment_remove",
    ),
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
    # The Files panel: the workspace's list, a preview, a download, a picture, the zip.
    path(
        "chat/<uuid:session_id>/workspace/",
        workspace_views.chat_workspace,
        name="chat_workspace",
    ),
    path(
        "chat/<uuid:session_id>/workspace/preview/",
        workspace_views.chat_workspace_preview,
        name="chat_workspace_preview",
    ),
    path(
        "chat/<uuid:session_id>/workspace/download/",
        workspace_views.chat_workspace_download,
        name="chat_workspace_download",
    ),
    path(
        "chat/<uuid:session_id>/workspace/image/",
        workspace_views.chat_workspace_image,
        name="chat_workspace_image",
    ),
    path(
        "chat/<uuid:session_id>/workspace/zip/",
        workspace_views.chat_workspace_zip,
        name="chat_workspace_zip",
    ),
]
