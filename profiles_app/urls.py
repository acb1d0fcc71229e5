"""Pages of the profiles app."""

from __future__ import annotations

from django.urls import path

from profiles_app import views

urlpatterns = [
    path("ops/tools/", views.ops_tools, name="ops_tools"),
    path("ops/tools/disable/", views.ops_tool_disable, name="ops_tool_disable"),
    path("ops/tools/enable/", views.ops_tool_enable, name="ops_tool_enable"),
]
