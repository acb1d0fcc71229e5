"""The Programs page: tool profiles, listed, edited, exported and imported."""

from __future__ import annotations

from django.urls import path

from profiles_app import views

profile = "programs/profile/<int:profile_id>/"

urlpatterns = [
    path("programs/", views.programs, name="programs"),
    path("programs/preset/<str:preset>/", views.programs, name="programs_preset"),
    path("programs/new/", views.profile_new, name="profile_new"),
    path("programs/export/", views.profiles_export, name="profiles_export"),
    path("programs/import/", views.profiles_import, name="profiles_import"),
    path("programs/new-chats/", views.programs_new_chats, name="programs_new_chats"),
    path(profile, views.profile, name="profile"),
    path(f"{profile}rename/", views.profile_rename, name="profile_rename"),
    path(f"{profile}mode/", views.profile_mode, name="profile_mode"),
    path(f"{profile}mode/undo/", views.profile_mode_undo, name="profile_mode_undo"),
    path(f"{profile}tools/policy/", views.profile_tool_policy, name="profile_tool_policy"),
    path(f"{profile}tools/<str:action>/", views.profile_tool, name="profile_tool"),
    path(f"{profile}delete/", views.profile_delete, name="profile_delete"),
]
