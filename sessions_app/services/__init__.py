"""Chat sessions' services, by concern; every caller imports them from here.

- ``chats``: create, rename, bin and restore, search, a new chat's start, the intent the
  composer writes (validated as intent only; every write names the version it read).
- ``reads``: a person's chat and its agent in one statement, where every endpoint, page
  and socket starts.
- ``policy``: "Allow for this chat" and the call policy (ask, allow or deny per call).
- ``context``: what a chat's tools run with, and the resolution of its next turn, with
  the tier plan kept so the array does not churn.
- ``results``: what its calls returned, read back by the chat's owner only.
- ``branches``: the versions of edited messages and regenerated answers, and the switch
  between them.

The event log is ``sessions_app.eventlog``; a tool's files are ``sessions_app.result_files``.
"""

from __future__ import annotations

from sessions_app.services.branches import (
    Branch,
    SwitchWhileRunning,
    last_user_message,
    session_branch_switch,
    session_branches,
)
from sessions_app.services.chats import (
    SEARCH_MAX_CHARS,
    SEARCH_RESULTS,
    TITLE_CHARS,
    UNDO_SECONDS,
    session_create,
    session_delete,
    session_intent_merge,
    session_new_or_empty,
    session_restore,
    session_title_from_model,
    session_trash,
    session_update,
    session_with_draft,
    sessions_of,
    sessions_purge_binned,
    sessions_search,
)
from sessions_app.services.context import (
    MessengerAdapter,
    PersonalResultCache,
    PersonalResultStore,
    PlanModeAdapter,
    RewindRefused,
    TurnContext,
    session_context,
    session_plan_store,
    session_resolve,
    turn_context,
    turn_frame_apply,
)
from sessions_app.services.policy import (
    CallRules,
    chat_profile,
    session_allow_for_chat,
    session_allowed_revoke,
    session_call_rules,
)
from sessions_app.services.reads import session_get_for_user
from sessions_app.services.results import (
    INSPECTOR_CALLS,
    call_result_get,
    full_result_get,
    session_recent_calls,
)

__all__ = [
    "INSPECTOR_CALLS",
    "SEARCH_MAX_CHARS",
    "SEARCH_RESULTS",
    "TITLE_CHARS",
    "UNDO_SECONDS",
    "Branch",
    "CallRules",
    "MessengerAdapter",
    "PersonalResultCache",
    "PersonalResultStore",
    "PlanModeAdapter",
    "RewindRefused",
    "SwitchWhileRunning",
    "TurnContext",
    "call_result_get",
    "chat_profile",
    "full_result_get",
    "last_user_message",
    "session_allow_for_chat",
    "session_allowed_revoke",
    "session_branch_switch",
    "session_branches",
    "session_call_rules",
    "session_context",
    "session_create",
    "session_delete",
    "session_get_for_user",
    "session_intent_merge",
    "session_new_or_empty",
    "session_plan_store",
    "session_recent_calls",
    "session_resolve",
    "session_restore",
    "session_title_from_model",
    "session_trash",
    "session_update",
    "session_with_draft",
    "sessions_of",
    "sessions_purge_binned",
    "sessions_search",
    "turn_context",
    "turn_frame_apply",
]
