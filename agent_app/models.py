"""Agents (agent profiles) and the per-person notes the remember/recall tools keep.

An agent stores a tool *intent* (``ToolIntent`` shape), never a tool list. An agent with
no owner is shared: visible to everyone, editable by staff. The ``default`` agent is
created by a migration and always exists.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from profiles_app.models import OwnedNamed

DEFAULT_AGENT = "default"


class Agent(OwnedNamed):
    class Strategy(models.TextChoices):
        CALL_TOOL = "call_tool", "call_tool (array never changes)"
        PROMOTE = "promote", "promote (found tools join the array)"
        NATIVE = "native", "native (provider-side deferral)"

    class Provider(models.TextChoices):
        DEFAULT = "", "The configured default"
        DEMO = "demo", "Demo (offline)"
        ANTHROPIC = "anthropic", "Anthropic"
        OPENAI = "openai", "OpenAI-compatible"

    system_prompt = models.TextField(blank=True, max_length=20_000)
    provider = models.CharField(max_length=16, choices=Provider.choices, blank=True)
    model = models.CharField(max_length=100, blank=True)
    context_window = models.PositiveIntegerField(default=200_000)
    tool_intent = models.JSONField(default=dict, blank=True)
    strategy = models.CharField(max_length=16, choices=Strategy.choices, default=Strategy.CALL_TOOL)
    tier_budget = models.PositiveIntegerField(
        null=True, blank=True, help_text="Resident tool tokens; empty: 5% of the window."
    )

    class Meta(OwnedNamed.Meta):
        pass


class Note(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notes"
    )
    text = models.TextField(max_length=4_000)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return self.text[:60]
