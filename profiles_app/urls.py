"""The Programs page: tool profiles, listed, edited, exported and imported."""

from __future__ import annotations

from django.urls import path

from profiles_app import views

profile = "programs/profile/<int:profile_id>/"

urlpatterns = [
    path("programs/", views.programs, name="programs"),
    path("programs/preset/<str:preset>/", views.programs, name="programs_preset"),
    path("programs/new/", views.program_new, name="program_new"),
    path("programs/export/", views.programs_export, name="programs_export"),
    path("programs/import/", views.programs_import, name="programs_import"),
    path("programs/new-chats/", views.programs_new_chats, name="programs_new_chats"),
    path(profile, views.program, name="program"),
    path(f"{profile}rename/", views.program_rename, name="program_rename"),
    path(f"{profile}mode/", views.program_mode, name="program_mode"),
    path(f"{profile}mode/undo/", views.program_mode_undo, name="program_mode_undo"),
    path(f"{profile}tools/policy/", views.program_tool_policy, name="program_tool_policy"),
    path(f"{profile}tools/<str:action>/", views.program_tool, name="program_tool"),
    path(f"{profile}delete/", views.program_delete, name="program_delete"),
]
