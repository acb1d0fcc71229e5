"""The REST API under /api/ (README, "The API") and its OpenAPI schema."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from agent_app import api as turns
from agent_app import api_mcp
from profiles_app.api import agents, models, operators, preferences, profiles
from sessions_app import api as sessions
from sessions_app import api_attachments
from sessions_app import api_workspace as workspace
from toolhub.lib.api import not_found

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # A page for people: signed out, it leads to the sign-in and back, not to a bare 401
    # (the schema itself answers API clients as every endpoint does).
    path(
        "docs/",
        login_required(SpectacularSwaggerSplitView.as_view(url_name="api-schema")),
        name="api-docs",
    ),
    path("tools/", profiles.ToolCatalogView.as_view()),
    path("profiles/", profiles.ProfileListView.as_view()),
    path("profiles/import/", profiles.ProfileImportView.as_view()),
    path("profiles/export/", profiles.ProfileExportView.as_view()),
    path("profiles/<int:profile_id>/", profiles.ProfileDetailView.as_view()),
    path("global-disables/", operators.GlobalDisableListView.as_view()),
    path("global-disables/<str:tool>/", operators.GlobalDisableDetailView.as_view()),
    path("tool-policies/", operators.ToolPolicyListView.as_view()),
    path("tool-policies/<str:tool>/", operators.ToolPolicyDetailView.as_view()),
    path("audit/", operators.AuditView.as_view()),
    path("settings/", preferences.SettingsView.as_view()),
    path("models/", models.ModelListView.as_view()),
    path("usage/", sessions.UsageView.as_view()),
    path("sessions/", sessions.SessionListView.as_view()),
    path("sessions/import/", sessions.SessionImportView.as_view()),
    path("sessions/<uuid:session_id>/", sessions.SessionDetailView.as_view()),
    path("sessions/<uuid:session_id>/events/", sessions.SessionEventsView.as_view()),
    path("sessions/<uuid:session_id>/usage/", sessions.SessionUsageView.as_view()),
    path("sessions/<uuid:session_id>/export/", sessions.SessionExportView.as_view()),
    path("sessions/<uuid:session_id>/branches/", sessions.SessionBranchesView.as_view()),
    path(
        "sessions/<uuid:session_id>/attachments/",
        api_attachments.SessionAttachmentsView.as_view(),
    ),
    path(
        "sessions/<uuid:session_id>/attachments/<uuid:file_id>/",
        api_attachments.SessionAttachmentView.as_view(),
    ),
    path("sessions/<uuid:session_id>/toolset/", turns.SessionToolsetView.as_view()),
    path("sessions/<uuid:session_id>/toolset/reset/", turns.SessionToolsetResetView.as_view()),
    path("sessions/<uuid:session_id>/messages/", turns.SessionMessagesView.as_view()),
    path("sessions/<uuid:session_id>/approve/", turns.SessionApproveView.as_view()),
    path("sessions/<uuid:session_id>/elicit/", turns.SessionElicitView.as_view()),
    path(
        "sessions/<uuid:session_id>/results/<uuid:result_id>/",
        sessions.SessionResultView.as_view(),
    ),
    # The workspace's files, as the Files panel shows them.
    path("sessions/<uuid:session_id>/workspace/", workspace.SessionWorkspaceListView.as_view()),
    path(
        "sessions/<uuid:session_id>/workspace/download/",
        workspace.SessionWorkspaceFileView.as_view(),
    ),
    path("sessions/<uuid:session_id>/workspace/zip/", workspace.SessionWorkspaceZipView.as_view()),
    path(
        "sessions/<uuid:session_id>/files/<uuid:file_id>/",
        sessions.SessionFileView.as_view(),
    ),
    path("agents/", agents.AgentListView.as_view()),
    path("agents/<int:agent_id>/", agents.AgentDetailView.as_view()),
    path("agents/<int:agent_id>/duplicate/", agents.AgentDuplicateView.as_view()),
    path("mcp-credentials/", api_mcp.McpCredentialListView.as_view()),
    path("mcp-credentials/<int:server_id>/", api_mcp.McpCredentialDetailView.as_view()),
    path("mcp-servers/", api_mcp.McpServerListView.as_view()),
    path("mcp-servers/<int:server_id>/", api_mcp.McpServerDetailView.as_view()),
    # Anything else under /api/ is a JSON 404, never Django's HTML page.
    re_path(r"^[\s\S]*$", not_found),
]
