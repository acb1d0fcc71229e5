"""Pages of the runtime: the Agents page, a chat's inspector and the operators' page."""

from __future__ import annotations

from django.urls import path

from agent_app import agents_page, providers_page, views

urlpatterns = [
    path("agents/", agents_page.agents, name="agents"),
    path("agents/new/", agents_page.agent_new, name="agent_new"),
    path("agents/<int:agent_id>/", agents_page.agent_page, name="agent_page"),
    path("agents/<int:agent_id>/duplicate/", agents_page.agent_copy, name="agent_copy"),
    path("agents/<int:agent_id>/delete/", agents_page.agent_remove, name="agent_remove"),
    path("agents/<int:agent_id>/tools/<str:action>/", agents_page.agent_tool, name="agent_tool"),
    path("chat/<uuid:session_id>/inspector/", views.chat_inspector, name="chat_inspector"),
    path("chat/<uuid:session_id>/prompts/", views.chat_prompts, name="chat_prompts"),
    path("chat/<uuid:session_id>/resources/", views.chat_resources, name="chat_resources"),
    path(
        "chat/<uuid:session_id>/resources/attach/",
        views.chat_resource_attach,
        name="chat_resource_attach",
    ),
    path("chat/<uuid:session_id>/prompts/fill/", views.chat_prompt_fill, name="chat_prompt_fill"),
    path("chat/<uuid:session_id>/inspector/reset/", views.chat_plan_reset, name="chat_plan_reset"),
    path(
        "chat/<uuid:session_id>/inspector/allowed/revoke/",
        views.chat_allowed_revoke,
        name="chat_allowed_revoke",
    ),
    path("settings/mcp/", views.mcp_credentials_page, name="mcp_credentials"),
    path("ops/tools/", views.ops_tools, name="ops_tools"),
    path("ops/providers/", providers_page.ops_providers, name="ops_providers"),
    path("ops/providers/save/", providers_page.ops_provider_save, name="ops_provider_save"),
    path(
        "ops/providers/<str:name>/refresh/",
        providers_page.ops_provider_refresh,
        name="ops_provider_refresh",
    ),
    path(
        "ops/providers/<str:name>/delete/",
        providers_page.ops_provider_delete,
        name="ops_provider_delete",
    ),
    path("ops/tools/disable/", views.ops_tool_disable, name="ops_tool_disable"),
    path("ops/tools/enable/", views.ops_tool_enable, name="ops_tool_enable"),
    path("ops/tools/policy/", views.ops_tool_policy, name="ops_tool_policy"),
    path("ops/tools/policy/clear/", views.ops_tool_policy_clear, name="ops_tool_policy_clear"),
    path("ops/mcp/<int:server_id>/enabled/", views.ops_mcp_enabled, name="ops_mcp_enabled"),
    path(
        "ops/mcp/<int:server_id>/oauth/sign-in/",
        views.ops_mcp_oauth_sign_in,
        name="ops_mcp_oauth_sign_in",
    ),
    path(
        "ops/mcp/<int:server_id>/oauth/callback/",
        views.ops_mcp_oauth_callback,
        name="ops_mcp_oauth_callback",
    ),
]
