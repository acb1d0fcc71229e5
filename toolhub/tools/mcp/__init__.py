"""MCP servers as a tool source: connect through the official ``mcp`` SDK, register each
server's tools, call them, and live through the server going away. ``config`` holds the
names and limits; ``tools`` turns a listing into ``Tool`` objects, ``resources`` and
``prompts`` do the same for a server's resources and prompts, and ``results`` turns what
a call returns into a ``ToolResult``; ``connection`` is one server's connection, over
``transport``, keeping its ``listing`` fresh and its server's ``liveness`` checked;
``scoped`` is a chat's or person's own, and ``pool`` says which connection a call goes
through; ``callers`` says whose call a server's question belongs to, ``answering`` puts it to that
person, ``asks`` and ``forms`` say what it may ask; ``oauth`` (with ``oauth_sign_in`` and
``oauth_bearer``) is the sign-in and the grant a connection sends; and ``manager`` keeps
them all.

Invariants:
- **Names.** A server's tool ``t`` is the tool ``<server>__<t>``. Server names are
  ``[a-z0-9][a-z0-9-]*`` (no underscore), so the first ``__`` always splits a name back
  into its server and tool. A tool name outside ``[A-Za-z0-9_-]``, or too long for the
  64-character limit providers share, is cleaned and suffixed with 8 hex digits of the
  sha256 of the original, so two different names never meet.
- **Order and fingerprint.** The registry lays out tools of source ``mcp`` after all
  others, sorted by name (registry.py), and ``sync_origin`` keeps unchanged tools as they
  are: a reconnect, or a server listing its tools in another order, leaves the array and
  its fingerprint byte-identical. A changed listing reaches turns at their next
  resolution; a running turn keeps the array it froze.
- **Going away.** A connected server is probed every second over stdio, every 3 s over
  HTTP (``ping``, or ``server/discover`` where the protocol has no ping), so silence is
  found within seconds; a probe unanswered while the server answered other requests or
  reported progress is a busy server, not a hung one. A lost connection's process is stopped in the
  background: the next connection does not wait for it. A server that was connected
  and is lost is ``reconnecting`` for ``hold`` seconds: its tools stay available at
  layer 4, so the array and its fingerprint do not change for a blip, and every call,
  the ones already waiting included, fails at once with the reason. After the hold they
  are unavailable ("MCP server X disconnected") until it returns. The connection retries
  with exponential backoff throughout. Only removing or disabling the server unregisters
  its tools.
- **Timeouts.** A tool's ``timeout`` is an idle limit that each progress notification
  restarts; ``timeout_ceiling`` bounds the whole call (``execution._until_done``).
- **Annotations.** A tool's MCP annotations decide plan mode and approval, read as the
  spec defines them (``readOnlyHint`` defaults to false, ``destructiveHint`` to true and
  counts only when the tool is not read-only). Only a tool the server marks read-only is
  offered in plan mode; every other one is ``unsafe_in=("plan",)``, with the reason.
  A destructive one asks the person first unless its server's ``approve_destructive`` is
  off. A tool without annotations is unknown: hidden in plan mode, run without asking,
  as before annotations were read. A hint is believed only as a JSON boolean exactly as
  it came over the wire: the SDK parses ``"true"`` or ``1`` into ``True``, so the
  transport's read stream is watched (``transport.watched``) and a hint the SDK changed,
  or any other odd one, makes the tool destructive, never read-only.
- **Untrusted text.** Names, titles and descriptions from a server are cut to a fixed
  length with control characters removed before they are registered, so nothing a server
  says reaches a prompt or a page unbounded. Input schemas pass through unchanged (they
  must be valid JSON Schema and below a size cap); arguments are validated against them
  by ``Tool.execute`` before anything is sent.
- **OAuth.** A streamable HTTP server with ``auth="oauth"`` connects with the grant a
  staff member's sign-in stored (``oauth``: the SDK's client auth helpers over an
  ``McpOAuthStore``); its access token is refreshed once for every process, through the
  store, never twice with one refresh token. Without a grant that works it
  is ``needs_sign_in``: not retried, its tools unavailable with that reason, until a
  sign-in changes ``oauth_generation`` and a reconcile reconnects it.
- **Asked mid-call.** A server's form (elicitation) or request for the model (sampling,
  only where its operator allows it) goes to the person whose call caused it, known by
  construction, never guessed: on 2026-07-28 it rides the call's own answer; over
  streamable HTTP it rides the call's own response stream, in its context (``CALLER``);
  a handshake-era stdio server's names no call, so a chat's calls to it go through
  connections that carry one call at a time (``one_call_each``), and a call given up on
  closes its connection. On the server's own connection (calls of no chat) a request
  naming no call goes to the one call waiting and is refused when several are, or when
  another's call was lately given up on (``WaitingCalls.owner``). It ends with its call.
- **Own connections.** A server with workspace roots gets a connection per chat whose only
  root is the chat's workspace; one that takes each person's own credential gets one per
  person carrying theirs (and never the server's own in its place); a handshake-era
  stdio server gets one per chat's call, kept for the chat's next. At most ``max_chats``
  per server: past that an idle one closes, and with every one busy a call waits. The server-wide
  connection lists, and what it offers decides what may be called on any of them.
- **One loop.** Every connection lives on one event loop in one daemon thread: the SDK's
  clients are anyio task groups that must be entered and left by the same task. Callers
  on any loop or thread reach it through ``run_coroutine_threadsafe``; cancelling the
  caller cancels the request.
"""

from __future__ import annotations

from toolhub.tools.mcp.config import (
    CONTROL_CHARS,
    ENV_NAME,
    HEADER_NAME,
    MAX_DESCRIPTION_CHARS,
    SERVER_NAME,
    ConflictingSettings,
    McpLogLine,
    McpPrompt,
    McpResource,
    McpServerConfig,
    McpStatus,
    McpUnavailableError,
    tool_name,
)
from toolhub.tools.mcp.manager import McpManager
from toolhub.tools.mcp.oauth import (
    McpOAuthError,
    McpOAuthGrant,
    McpOAuthStore,
    McpSignInNeeded,
)
from toolhub.tools.mcp.oauth_sign_in import (
    OAuthSignIn,
    oauth_sign_in_begin,
    oauth_sign_in_finish,
)
from toolhub.tools.mcp.prompts import prompt_problem
from toolhub.tools.mcp.results import result_text
from toolhub.tools.mcp.tools import Effect, McpTool, build_tools, tool_effect

__all__ = [
    "CONTROL_CHARS",
    "ENV_NAME",
    "HEADER_NAME",
    "MAX_DESCRIPTION_CHARS",
    "SERVER_NAME",
    "ConflictingSettings",
    "Effect",
    "McpLogLine",
    "McpManager",
    "McpOAuthError",
    "McpOAuthGrant",
    "McpOAuthStore",
    "McpPrompt",
    "McpResource",
    "McpServerConfig",
    "McpSignInNeeded",
    "McpStatus",
    "McpTool",
    "McpUnavailableError",
    "OAuthSignIn",
    "build_tools",
    "oauth_sign_in_begin",
    "oauth_sign_in_finish",
    "prompt_problem",
    "result_text",
    "tool_effect",
    "tool_name",
]
