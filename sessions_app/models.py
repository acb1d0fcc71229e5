"""Chat sessions, their durable event log and the record of every provider call.

A session stores its tool *intent*, the tier plan and the loaded deferred set (checkpoint
state the runtime hands back each turn), never an expanded tool list. ``SessionEvent``
rows are numbered per session from 1 without gaps (``seq``, unique with the session):
``last_seq`` on the session is advanced with a conditional UPDATE, so two writers can
never take the same number. At most one turn runs per session: ``turn_id`` is claimed
with a conditional UPDATE and held by a renewed lease, so a crashed process frees it
(within ``TOOLHUB_TURN_LOST_AFTER``).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from toolhub.lib.intent_field import IntentField
from toolhub.tools.files import size_in_words


class ChatSession(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_sessions"
    )
    agent = models.ForeignKey(
        "profiles_app.Agent", on_delete=models.PROTECT, related_name="sessions"
    )
    title = models.CharField(max_length=200, blank=True)
    # The model the person picked for this chat, and its provider (a built-in one or a
    # connection's name); both empty: the agent's.
    provider = models.CharField(max_length=40, blank=True)
    model = models.CharField(max_length=100, blank=True)
    tool_intent = IntentField(default=dict, blank=True)
    plan_mode = models.BooleanField(default=False)
    channel = models.CharField(max_length=16, default="web")
    tier_plan = models.JSONField(null=True, blank=True)
    loaded_tools = models.JSONField(default=list, blank=True)
    # Tools the person allowed to run without asking for the rest of this chat ("Allow for
    # this chat"): names they gave, never an expansion (toolhub.tools.approval).
    allowed_tools = models.JSONField(default=list, blank=True)
    last_seq = models.PositiveBigIntegerField(default=0)
    # The running turn, if any: claimed with a conditional UPDATE (one turn per session
    # across processes), held by a lease the runner renews; an expired lease is free.
    turn_id = models.CharField(max_length=36, blank=True)
    turn_channel = models.CharField(max_length=120, blank=True)
    turn_lease = models.DateTimeField(null=True, blank=True)
    # What the running turn waits for from the person: {"kind": "approval"|"question",
    # "call_id": ...}, or null.
    turn_waiting = models.JSONField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)
    # Deleted from the chat page, still restorable ("Undo") until it is purged
    # (sessions_app.services.session_trash); every read of a person's chats skips it.
    deleted = models.DateTimeField(null=True, blank=True)
    # Pinned to the top of the chats list; archived: out of the list (search still finds
    # it, and its page shows it), until unarchived (sessions_app.sidebar).
    pinned = models.BooleanField(default=False)
    archived = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "chat"
        ordering = ["-updated", "-created"]
        indexes = [
            models.Index(fields=["owner", "-updated"]),
            # The turn reaper's scan (agent_app.turns.claim.turns_reap) reads only the rows
            # a turn holds: the index stays as small as the number of running turns.
            models.Index(
                fields=["turn_lease"],
                condition=~models.Q(turn_id=""),
                name="session_turn_lease_held",
            ),
            # The purge of binned chats reads only those.
            models.Index(
                fields=["deleted"],
                condition=models.Q(deleted__isnull=False),
                name="session_binned",
            ),
        ]

    def __str__(self) -> str:
        # Named from its first message as that message is sent (toolhub.lib.titles).
        return self.title or "New chat"


class SessionEvent(models.Model):
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField()
    turn = models.CharField(max_length=36, blank=True)
    kind = models.CharField(max_length=32)
    data = models.JSONField(default=dict)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "chat event"
        ordering = ["session", "seq"]
        constraints = [models.UniqueConstraint(fields=["session", "seq"], name="event_seq_unique")]
        indexes = [
            # A person's tool calls, counted when a chat's tier plan is (re)built
            # (sessions_app.services.context._usage): read through this, not all their events.
            models.Index(
                fields=["session"], condition=models.Q(kind="tool_call"), name="event_tool_calls"
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id} #{self.seq} {self.kind}"


class ProviderCall(models.Model):
    session = models.ForeignKey(
        ChatSession, on_delete=models.CASCADE, related_name="provider_calls"
    )
    turn = models.CharField(max_length=36)
    provider = models.CharField(max_length=16, blank=True)
    model = models.CharField(max_length=100)
    fingerprint = models.CharField(max_length=64)
    resident_tokens = models.PositiveIntegerField(default=0)
    catalog_tokens = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_read_input_tokens = models.PositiveIntegerField(default=0)
    cache_creation_input_tokens = models.PositiveIntegerField(default=0)
    # Our cl100k estimate of the same request; input over estimate calibrates per model.
    estimated_input_tokens = models.PositiveIntegerField(default=0)
    # The provider reported no usage: input and output are toolhub's own count.
    usage_estimated = models.BooleanField(default=False)
    latency_ms = models.PositiveIntegerField(default=0)
    # The prices the call was made at, US dollars per million tokens, when its provider's
    # list gives them (docs/models.md); empty: the price table's, by model.
    price_input = models.FloatField(null=True, blank=True)
    price_output = models.FloatField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "model call"
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.model} {self.fingerprint[:8]}"


class FullResult(models.Model):
    """A tool's whole output where the chat got it cut (the runtime's full-result store,
    for tools declared ``persist_full``): the cut result names it, and the session's owner
    reads it back at ``/api/sessions/<session>/results/<id>/``. Bounded per session and
    in size (sessions_app.services.context.PersonalResultStore)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="results")
    tool = models.CharField(max_length=128)
    text = models.TextField()
    # The output's length before any cut of the stored copy.
    chars = models.PositiveBigIntegerField()
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["session", "-created"])]

    def __str__(self) -> str:
        return f"{self.tool} result {str(self.id)[:8]}"


class ResultFile(models.Model):
    """A file a tool offered the person (an MCP server's PDF, a recording): kept with its
    session, downloaded by the session's owner from the tool's card, never sent to a
    model. Its name and type are ``ToolFile``'s, already safe (toolhub/tools/files.py);
    bounded per session (sessions_app.result_files.result_files_store)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="files")
    # The turn and the tool call whose result offered it.
    turn = models.CharField(max_length=36)
    call_id = models.CharField(max_length=200)
    name = models.CharField(max_length=200)
    media_type = models.CharField(max_length=200)
    size = models.PositiveBigIntegerField()
    data = models.BinaryField()
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created"]

    def __str__(self) -> str:
        return f"{self.name} ({self.size:,} bytes)"


class Attachment(models.Model):
    """A file the person attached to a message, stored in the chat's workspace under
    ``name`` (sessions_app.uploads). Uploaded first, then named by the message that sends
    it (``sent``); bounded per file, message and chat (the ``TOOLHUB_UPLOAD_*`` settings).
    The workspace copy is the agent's to change: this row keeps what was uploaded."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="attachments")
    # The file's name in the workspace, cleaned and made unique when it was stored.
    name = models.CharField(max_length=255)
    media_type = models.CharField(max_length=100)
    size = models.PositiveBigIntegerField()
    # Named by a message: no longer waiting in the composer, and no longer removable.
    sent = models.BooleanField(default=False)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created"]
        indexes = [models.Index(fields=["session", "created"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.size:,} bytes)"

    @property
    def size_words(self) -> str:
        return size_in_words(self.size)
