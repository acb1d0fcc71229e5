"""Profiles — tool profiles and agent profiles — and global disables. All store intent:
short lists of names a person or an operator wrote, never an expansion of the registry
(docs/architecture.md, hard line 1).

A profile with no owner is shared: visible to everyone, editable by staff. ``version``
increases on every write; a write that names an older version is a conflict.

An agent (agent profile) is a system prompt, a provider and model, a tool intent and a
deferred-loading strategy; chats are with an agent. The ``default`` agent is created by a
migration and always exists. Its table keeps the name it had in ``agent_app``, so moving
it here changed no row.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from toolhub.lib.intent_field import IntentField
from toolhub.lib.sealing import SealedTextField
from toolhub.tools.intent import MAX_NAMES, PROFILE_NAME_PATTERN
from toolhub.tools.layers import OPERATOR_DISABLED
from toolhub.tools.tool import NAME_PATTERN

profile_name_validator = RegexValidator(
    PROFILE_NAME_PATTERN,
    "1 to 64 letters, digits, spaces, dots, dashes or underscores, starting and ending "
    "with a letter or digit.",
)
tool_name_validator = RegexValidator(NAME_PATTERN.pattern, "not a valid tool name")


def _unique_names(prefix: str) -> list[models.BaseConstraint]:
    """Names unique per owner, and among shared objects (no owner)."""
    return [
        models.UniqueConstraint(fields=["owner", "name"], name=f"{prefix}_unique_per_owner"),
        models.UniqueConstraint(
            fields=["name"],
            condition=models.Q(owner__isnull=True),
            name=f"{prefix}_unique_shared_name",
        ),
    ]


class OwnedNamed(models.Model):
    """A named, versioned object that is personal, or shared when it has no owner.

    Names are unique per owner, and among shared objects. ``version`` increases on every
    write (services update with ``WHERE version = read``).
    """

    name = models.CharField(max_length=64, validators=[profile_name_validator])
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="%(class)ss",
        help_text="Empty for a shared one (staff only).",
    )
    version = models.PositiveIntegerField(default=1)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        ordering = ["name", "id"]
        constraints = _unique_names("%(app_label)s_%(class)s")

    def __str__(self) -> str:
        return self.name if self.owner_id else f"{self.name} (shared)"

    @property
    def is_shared(self) -> bool:
        return self.owner_id is None


class ToolProfile(OwnedNamed):
    class Mode(models.TextChoices):
        ALL_EXCEPT = "all_except", "All tools except"
        ONLY = "only", "Only these tools"

    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.ALL_EXCEPT)
    tools = models.JSONField(
        default=list,
        blank=True,
        help_text=f"Names removed (all except) or picked (only); at most {MAX_NAMES}.",
    )
    approvals = models.JSONField(
        default=dict,
        blank=True,
        help_text="Tool name -> auto, ask or deny, as the person set it for this profile.",
    )

    class Meta(OwnedNamed.Meta):
        constraints = [
            *OwnedNamed.Meta.constraints,
            models.CheckConstraint(
                condition=models.Q(mode__in=["all_except", "only"]), name="profile_mode_valid"
            ),
        ]


class GlobalDisable(models.Model):
    tool = models.CharField(max_length=64, unique=True, validators=[tool_name_validator])
    reason = models.CharField(max_length=500)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tool"]

    def __str__(self) -> str:
        return f"{self.tool} (disabled)"

    @property
    def explanation(self) -> str:
        who = "ops"
        if self.created_by is not None:
            who = self.created_by.email or self.created_by.get_username()
        return f"{OPERATOR_DISABLED}{who}: {self.reason}"


class ToolApprovalPolicy(models.Model):
    """An operator's ``auto`` or ``ask`` for one tool, for everybody (their ``deny`` is a
    global disable). Changes bump the disables generation and go to the admin log."""

    class Policy(models.TextChoices):
        AUTO = "auto", "Run without asking"
        ASK = "ask", "Ask every time"

    tool = models.CharField(max_length=64, unique=True, validators=[tool_name_validator])
    policy = models.CharField(max_length=8, choices=Policy.choices)
    reason = models.CharField(max_length=500)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tool"]
        verbose_name = "approval policy"
        verbose_name_plural = "approval policies"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(policy__in=["auto", "ask"]), name="approval_policy_valid"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool}: {self.policy}"


class DisablesGeneration(models.Model):
    """One row whose ``token`` changes in the same transaction as every change to the
    global disables. A process may keep its own copy of the disables only while the token
    it read them with is still the one stored, so no copy outlives a committed change
    (docs/security.md, "Global disables"). The token is random rather than a counter: a
    rolled-back change, or a flushed test database, can never bring an old value back
    with different rows behind it."""

    token = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "global disables generation"

    def __str__(self) -> str:
        return f"global disables generation {self.token}"


class NewChatDefault(models.Model):
    """What a person's new chats start with: an agent (``agent``; empty: ``default``) and a
    toolset (unless the chat's agent names its own): one of their profiles or a shared one
    (``profile``, so a rename follows it and a delete clears it), or a preset by name.
    Neither: the built-in ``default``."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="new_chat_default",
    )
    profile = models.ForeignKey(
        ToolProfile, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    preset = models.CharField(max_length=64, blank=True)
    # The agent new chats start with (their own or a shared one); empty: ``default``.
    agent = models.ForeignKey(
        "Agent", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(profile__isnull=True) | models.Q(preset=""),
                name="new_chat_default_one_choice",
            )
        ]

    def __str__(self) -> str:
        return f"new chats of {self.user_id}: {self.toolset or 'default'}"

    @property
    def toolset(self) -> str:
        """The toolset name, or "" for the built-in default."""
        return self.profile.name if self.profile is not None else self.preset


class Preferences(models.Model):
    """How the pages look for one person: the theme and whether tool cards start compact."""

    class Theme(models.TextChoices):
        SYSTEM = "system", "Follow the system"
        LIGHT = "light", "Light"
        DARK = "dark", "Dark"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    theme = models.CharField(max_length=8, choices=Theme.choices, default=Theme.SYSTEM)
    compact_cards = models.BooleanField(default=False)

    class Meta:
        verbose_name_plural = "preferences"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(theme__in=["system", "light", "dark"]),
                name="preferences_theme_valid",
            )
        ]

    def __str__(self) -> str:
        return f"preferences of {self.user_id}"


DEFAULT_AGENT = "default"


class Agent(OwnedNamed):
    """An agent profile: what a chat's model is told, which model, and which tools."""

    class Strategy(models.TextChoices):
        CALL_TOOL = "call_tool", "call_tool (array never changes)"
        PROMOTE = "promote", "promote (found tools join the array)"
        NATIVE = "native", "native (provider-side deferral)"

    class Provider(models.TextChoices):
        DEFAULT = "", "The configured default"
        DEMO = "demo", "Demo (offline)"
        ANTHROPIC = "anthropic", "Anthropic"
        OPENAI = "openai", "OpenAI-compatible"

    description = models.CharField(
        max_length=500, blank=True, help_text="What this agent is for, as the pickers show it."
    )
    system_prompt = models.TextField(blank=True, max_length=20_000)
    # A built-in provider (``Provider``) or a provider connection's name; empty: the
    # configured default (profiles_app.services.connections checks which exist).
    provider = models.CharField(max_length=40, blank=True)
    model = models.CharField(max_length=100, blank=True)
    # Empty: the window the model's server reports, else an assumed one (a turn says which).
    context_window = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=None,
        help_text="Tokens; empty: as the model's server reports. Smaller than the server's "
        "keeps conversations shorter; larger is not used.",
    )
    tool_intent = IntentField(default=dict, blank=True)
    strategy = models.CharField(max_length=16, choices=Strategy.choices, default=Strategy.CALL_TOOL)
    tier_budget = models.PositiveIntegerField(
        null=True, blank=True, help_text="Resident tool tokens; empty: 5% of the window."
    )
    plan_mode = models.BooleanField(
        default=False, help_text="New chats with this agent start in plan mode."
    )

    class Meta(OwnedNamed.Meta):
        # The table and its constraints keep the names they had in agent_app.
        db_table = "agent_app_agent"
        constraints = _unique_names("agent_app_agent")


connection_name_validator = RegexValidator(
    r"^[a-z0-9][a-z0-9-]{0,38}[a-z0-9]$|^[a-z0-9]$",
    "1 to 40 lower-case letters, digits or dashes, starting and ending with a letter or digit.",
)


class ProviderConnection(models.Model):
    """A model provider staff connected in the app: an Anthropic or OpenAI-compatible API
    at a base URL, with a key, and the models it offers (docs/models.md).

    Agents and chats name it by ``name``, as they name a built-in provider. ``api_key`` is
    sealed at rest and never shown back. ``listed`` is what the provider's models endpoint
    last answered; ``manual`` the models staff wrote, which add to it and override its
    window and prices. A connection whose ``from_env`` is set mirrors a provider the
    environment configures (ANTHROPIC_API_KEY, OPENAI_BASE_URL): its URL and key stay the
    environment's.
    """

    class Kind(models.TextChoices):
        ANTHROPIC = "anthropic", "Anthropic"
        OPENAI = "openai", "OpenAI-compatible"

    name = models.CharField(max_length=40, unique=True, validators=[connection_name_validator])
    kind = models.CharField(max_length=16, choices=Kind.choices)
    base_url = models.URLField(max_length=500, blank=True)
    api_key = SealedTextField(blank=True)
    # [{"id": ..., "window": int | null}] as the models endpoint listed them.
    listed = models.JSONField(default=list, blank=True)
    listed_at = models.DateTimeField(null=True, blank=True)
    # Why the last listing failed ("" when it worked or was never tried).
    listing_problem = models.CharField(max_length=500, blank=True)
    # Staff's own lines: "model id, context window, input $/M, output $/M" (all but the id
    # optional).
    manual = models.TextField(blank=True, max_length=20_000)
    enabled = models.BooleanField(default=True)
    from_env = models.BooleanField(default=False)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
