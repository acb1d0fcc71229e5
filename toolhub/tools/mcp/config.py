"""MCP server configuration as the runtime takes it, the names its tools get, and the
status of a connection."""

from __future__ import annotations

import hashlib
import logging
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from toolhub.tools.netguard import Reach, url_refusal
from toolhub.tools.registry import Skipped
from toolhub.tools.tool import NAME_PATTERN

logger = logging.getLogger(__name__)

TRANSPORTS = ("stdio", "streamable_http")
AUTHS = ("none", "oauth")
# RFC 6749's scope: scope tokens of printable ASCII but space, '"' and '\\', one space apart
# (or none at all).
SCOPE_LIST = r"[\x21\x23-\x5b\x5d-\x7e]+(?: [\x21\x23-\x5b\x5d-\x7e]+)*"
OAUTH_SCOPES = re.compile(rf"^(?:{SCOPE_LIST})?$")
SERVER_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,23}$")
SEPARATOR = "__"
MAX_NAME = 64
MAX_DESCRIPTION_CHARS = 1_024
MAX_LABEL_CHARS = 80
MAX_SCHEMA_CHARS = 32_768
# A server's instructions join the system prompt while any of its tools is offered.
MAX_INSTRUCTIONS_CHARS = 2_000
# The log messages a connection keeps (staff read them on the ops page), and their size.
LOG_LINES = 200
MAX_LOG_CHARS = 1_000
# Long enough for the SDK's stdio shutdown: 2 s for the server to exit after stdin
# closes, 2 s after SIGTERM, then SIGKILL.
CLOSE_SECONDS = 8.0
# A server may ask for a tool to stay resident (or be deferred) through the tool's _meta.
DEFER_META_KEY = "toolhub/defer"
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
# Invisible beyond those: word joiners and invisible operators, the byte order mark, and
# the tag characters, which can spell out text no person sees (and a model reads).
HIDDEN_CHARS = re.compile("[\u2060-\u2064\ufeff\U000e0000-\U000e007f]")
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]+")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,200}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,200}$")
PLAN = "plan"
# The hints that decide plan mode and approval: the SDK's field name, the wire's.
HINTS = (("read_only_hint", "readOnlyHint"), ("destructive_hint", "destructiveHint"))


def visible(text: str) -> str:
    """``text`` without control, bidi and other invisible characters (newlines and tabs
    kept): what a person reads is all there is."""
    return HIDDEN_CHARS.sub("", CONTROL_CHARS.sub("", text))


def untrusted_text(text: str | None, limit: int) -> str:
    """Untrusted text, made safe to show and to prompt with: control and bidi characters
    removed (newlines and tabs kept), cut to ``limit`` characters with an ellipsis."""
    cleaned = visible(text or "").strip()
    if len(cleaned) > limit:
        cleaned = cleaned[: limit - 1].rstrip() + "…"
    return cleaned


def tool_name(server: str, remote: str) -> str:
    """The registry name of ``server``'s tool ``remote`` (the scheme in the docstring)."""
    name = f"{server}{SEPARATOR}{remote}"
    if NAME_PATTERN.fullmatch(name):
        return name
    digest = hashlib.sha256(remote.encode()).hexdigest()[:8]
    room = MAX_NAME - len(server) - len(SEPARATOR) - 1 - len(digest)
    stem = _NOT_NAME.sub("_", remote).strip("_")[:room] or "tool"
    return f"{server}{SEPARATOR}{stem}-{digest}"


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One server as configured by staff. Frozen and comparable: a changed config
    reconnects, an equal one is left alone."""

    name: str
    transport: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    defer: bool = True
    # Seconds without progress; progress restarts it, up to the ceiling for the whole call.
    timeout: float = 60.0
    timeout_ceiling: float = 600.0
    allowlist: tuple[str, ...] | None = None
    # Ask the person before a tool this server marks destructive runs.
    approve_destructive: bool = True
    # MCP sampling: the server may ask the chat's model, each time with the person's yes.
    sampling: bool = False
    # MCP roots: one connection per chat, whose only root is the chat's workspace.
    workspace_roots: bool = False
    # The header (streamable HTTP) or environment variable (stdio) that carries each
    # person's own credential on a connection of their own; "" for none.
    user_credential: str = ""

    # OAuth 2.1 (streamable HTTP only): "oauth" connects with the tokens a staff member's
    # sign-in stored, through the SDK's client auth (``oauth.py``).
    auth: str = "none"
    # Asked for at sign-in; empty: what the server's metadata says.
    oauth_scopes: str = ""
    # A client registered with the authorization server beforehand; empty: toolhub
    # registers itself (dynamic client registration) at sign-in.
    oauth_client_id: str = ""
    oauth_client_secret: str = ""
    # Which sign-in the connection uses: a new sign-in, or a grant found not to work any
    # more, changes it, so every process reconnects with what is stored now. A refresh of
    # the access token does not.
    oauth_generation: int = 0
    # Whether the URL, OAuth discovery and every connection may reach loopback and private
    # addresses (link-local and cloud metadata never: ``toolhub.tools.netguard``).
    allow_private: bool = False
    # The tokens this server's connection holds now: not configuration (never compared),
    # but secrets redact() hides like the configured ones.
    held_secrets: set[str] = field(default_factory=set, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not SERVER_NAME.fullmatch(self.name):
            raise ValueError(
                f"MCP server name {self.name!r} must be lowercase letters, digits and "
                "hyphens, at most 24 characters"
            )
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}")
        if self.transport == "stdio" and not self.command:
            raise ValueError("a stdio server needs a command")
        if self.transport == "streamable_http" and not self.url:
            raise ValueError("a streamable HTTP server needs a URL")
        if self.transport == "streamable_http":
            refused = url_refusal(self.url, self.reach)
            if refused is not None:
                hint = (
                    "" if self.allow_private else " (TOOLHUB_MCP_ALLOW_PRIVATE allows private ones)"
                )
                raise ValueError(f"the URL cannot be used: {refused}{hint}")
        if self.timeout <= 0 or self.timeout_ceiling <= 0:
            raise ValueError("timeout and timeout_ceiling must be positive")
        for key, value in self.headers:
            if not HEADER_NAME.fullmatch(key):
                raise ValueError(f"header name {key[:60]!r} is not a valid HTTP header name")
            if value != value.strip() or CONTROL_CHARS.search(value):
                # Checked here, not by the HTTP client, whose error would quote the value.
                raise ValueError(
                    f"the value of header {key} has surrounding spaces or control characters"
                )
        for key, _value in self.env:
            if not ENV_NAME.fullmatch(key):
                raise ValueError(f"environment name {key[:60]!r} is not a valid variable name")
        if self.user_credential:
            name = HEADER_NAME if self.transport == "streamable_http" else ENV_NAME
            if not name.fullmatch(self.user_credential):
                what = "an HTTP header" if self.transport == "streamable_http" else "a variable"
                raise ValueError(f"the personal credential's name is not {what} name")
        self._check_oauth()

    @property
    def reach(self) -> Reach:
        return Reach(private=self.allow_private)

    def with_credential(self, value: str) -> McpServerConfig:
        """This server as one person's connection sees it: their credential in its header
        or variable (replacing the server's own of that name). Raises ``ValueError`` for
        a value no header or variable can carry."""
        pair = ((self.user_credential, value),)
        if self.transport == "streamable_http":
            kept = tuple(item for item in self.headers if item[0].lower() != pair[0][0].lower())
            return replace(self, headers=kept + pair)
        if "\0" in value:
            raise ValueError("a variable cannot carry a NUL")
        kept = tuple(item for item in self.env if item[0] != self.user_credential)
        return replace(self, env=kept + pair)

    def _check_oauth(self) -> None:
        if self.auth not in AUTHS:
            raise ValueError(f"auth must be one of {AUTHS}")
        if self.auth == "oauth" and self.transport != "streamable_http":
            raise ValueError("OAuth is for streamable HTTP servers")
        if self.auth == "oauth" and self.user_credential:
            # The grant's bearer token would go with every person's call, over theirs.
            raise ConflictingSettings(
                "a server that signs in with OAuth cannot also take each person's own credential"
            )
        if not OAUTH_SCOPES.fullmatch(self.oauth_scopes):
            raise ValueError("OAuth scopes are scope names separated by single spaces")
        for what, value in (
            ("OAuth client id", self.oauth_client_id),
            ("OAuth client secret", self.oauth_client_secret),
        ):
            if value != value.strip() or CONTROL_CHARS.search(value):
                raise ValueError(f"the {what} has surrounding spaces or control characters")

    def redact(self, text: str) -> str:
        """``text`` with every secret value of this server replaced (errors, logs): its
        environment and header values, its OAuth client secret and the tokens its
        connection holds now."""
        configured = [value for _key, value in (*self.env, *self.headers)]
        for value in (*configured, self.oauth_client_secret, *tuple(self.held_secrets)):
            if len(value) >= 4:
                text = text.replace(value, "***")
        return text


@dataclass(frozen=True, slots=True)
class McpStatus:
    """What a page shows about one server in this process."""

    name: str
    state: str  # connecting | connected | reconnecting | disconnected | needs_sign_in
    error: str = ""
    tools: int = 0
    skipped: tuple[Skipped, ...] = ()
    since: float = field(default_factory=time.time)
    # A stdio server's last stderr lines when it failed (cut, secrets redacted).
    stderr: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class McpLogLine:
    """One ``notifications/message`` from a server, cut and cleaned."""

    at: float
    level: str
    logger: str
    text: str


@dataclass(frozen=True, slots=True)
class McpPromptArgument:
    name: str
    description: str = ""
    required: bool = False


@dataclass(frozen=True, slots=True)
class McpPrompt:
    """A server's prompt as the composer offers it (a slash command), text cleaned."""

    server: str
    name: str
    title: str
    description: str
    arguments: tuple[McpPromptArgument, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "server": self.server,
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "arguments": [
                {"name": a.name, "description": a.description, "required": a.required}
                for a in self.arguments
            ],
        }


@dataclass(frozen=True, slots=True)
class McpResource:
    """A resource a server lists, as the composer offers it after "@"."""

    server: str
    uri: str
    name: str
    mime_type: str = ""
    description: str = ""

    def to_json(self) -> dict[str, str]:
        return {
            "server": self.server,
            "uri": self.uri,
            "name": self.name,
            "mime_type": self.mime_type,
            "description": self.description,
        }


def instructions_note(server: str, text: str | None) -> str:
    """A server's instructions as the system prompt carries them ("" when it gave none)."""
    cleaned = untrusted_text(text, MAX_INSTRUCTIONS_CHARS)
    if not cleaned:
        return ""
    # No leading blank line: the catalog's pieces must not start with white space, or
    # the tokenizer joins them with the newline before and the count is off
    # (toolhub.tools.catalog).
    return f"MCP server {server} says how to use its tools:\n{cleaned}\n"


class McpUnavailableError(Exception):
    pass


class McpNotSent(McpUnavailableError):
    """A request refused before anything of it went to the server."""


class ConflictingSettings(ValueError):
    """Settings that are each valid but cannot go together."""


class CredentialStore(Protocol):
    """A person's own credential for a server (the apps keep them; write-only)."""

    async def get(self, *, server: str, user_id: str) -> str | None: ...


# No wire form was seen for a tool (a listing built in code, not read off a stream).
NOT_SEEN: Any = object()
# Two entries of one name whose annotations differ: which one the SDK kept is not known.
CONFLICTING_HINT: Any = object()
