"""The business rules of tool profiles and global disables, one keyword-only function each.

- ``rules``: validation, access and versioning every write shares
- ``profiles``: a profile's writes, and how a name resolves
- ``switch``: "all except" ⇄ "only", with a preview and an undo
- ``transfer``: export, import, and what new chats start with
- ``catalog``: every tool and, for a person, why it is hidden
- ``disables``: global disables, operators' approval policies, and their audit
- ``agents``: agent profiles, and the directory ``list_agents`` reads
- ``preferences``: a person's own settings (what new chats start with, the look)

Callers import from here; the modules import each other only downwards (rules first).
"""

from __future__ import annotations

from profiles_app.services.agents import (
    EDITABLE as AGENT_FIELDS,
)
from profiles_app.services.agents import (
    AgentsAdapter,
    agent_check_deletable,
    agent_create,
    agent_current,
    agent_delete,
    agent_duplicate,
    agent_get_for_user,
    agent_tool_set,
    agent_update,
    agents_visible_to,
    default_agent,
    shared_first,
)
from profiles_app.services.catalog import (
    ProfileCatalog,
    catalog_context,
    profile_catalog,
    tool_catalog,
)
from profiles_app.services.disables import (
    AuditEntry,
    OpsTool,
    audit_entries,
    global_disable_audit,
    global_disable_rows,
    global_disables,
    operator_policies,
    tool_disable_globally,
    tool_enable_globally,
    tool_policy_clear,
    tool_policy_rows,
    tool_policy_set,
    tools_for_ops,
)
from profiles_app.services.preferences import (
    PersonalSettings,
    new_chat_agent,
    personal_settings,
    personal_settings_update,
)
from profiles_app.services.profiles import (
    ProfileView,
    profile_create,
    profile_delete,
    profile_get_for_user,
    profile_lookup_for,
    profile_lookup_preloaded,
    profile_offers,
    profile_rename,
    profile_token_cost,
    profile_tool_add,
    profile_tool_policy,
    profile_tool_remove,
    profile_update,
    profiles_for_user,
    toolset_check_exists,
)
from profiles_app.services.rules import (
    audit_write,
    check_operator,
    clean_tools,
    profiles_visible_to,
    refuse_meta_tool,
)
from profiles_app.services.switch import (
    ModeSwitch,
    ModeSwitched,
    ProfileChange,
    mode_name,
    profile_change,
    profile_mode_switch,
    profile_mode_switch_preview,
    profile_mode_switch_undo,
)
from profiles_app.services.transfer import (
    EXPORT_FORMAT,
    ImportReport,
    new_chat_default_set,
    new_chat_toolset,
    profile_export,
    profile_import,
)

__all__ = [
    "AGENT_FIELDS",
    "EXPORT_FORMAT",
    "AgentsAdapter",
    "AuditEntry",
    "ImportReport",
    "ModeSwitch",
    "ModeSwitched",
    "OpsTool",
    "PersonalSettings",
    "ProfileCatalog",
    "ProfileChange",
    "ProfileView",
    "agent_check_deletable",
    "agent_create",
    "agent_current",
    "agent_delete",
    "agent_duplicate",
    "agent_get_for_user",
    "agent_tool_set",
    "agent_update",
    "agents_visible_to",
    "audit_entries",
    "audit_write",
    "catalog_context",
    "check_operator",
    "clean_tools",
    "default_agent",
    "global_disable_audit",
    "global_disable_rows",
    "global_disables",
    "mode_name",
    "new_chat_agent",
    "new_chat_default_set",
    "new_chat_toolset",
    "operator_policies",
    "personal_settings",
    "personal_settings_update",
    "profile_catalog",
    "profile_change",
    "profile_create",
    "profile_delete",
    "profile_export",
    "profile_get_for_user",
    "profile_import",
    "profile_lookup_for",
    "profile_lookup_preloaded",
    "profile_mode_switch",
    "profile_mode_switch_preview",
    "profile_mode_switch_undo",
    "profile_offers",
    "profile_rename",
    "profile_token_cost",
    "profile_tool_add",
    "profile_tool_policy",
    "profile_tool_remove",
    "profile_update",
    "profiles_for_user",
    "profiles_visible_to",
    "refuse_meta_tool",
    "shared_first",
    "tool_catalog",
    "tool_disable_globally",
    "tool_enable_globally",
    "tool_policy_clear",
    "tool_policy_rows",
    "tool_policy_set",
    "tools_for_ops",
    "toolset_check_exists",
]
