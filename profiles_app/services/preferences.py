"""A person's own settings: what new chats start with (an agent and a toolset), the theme
and whether tool cards start compact.

What new chats start with is intent like any other: names the person chose, resolved
when a chat is made (an agent that is gone, or no longer visible, falls back to
``default``; a deleted profile clears itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from profiles_app.models import Agent, NewChatDefault, Preferences
from profiles_app.services.agents import agents_visible_to, default_agent
from profiles_app.services.transfer import new_chat_default_set, new_chat_toolset
from toolhub.lib.errors import Invalid

THEMES = tuple(Preferences.Theme.values)


@dataclass(frozen=True, slots=True)
class PersonalSettings:
    """What the settings page and ``/api/settings/`` show."""

    new_chat_agent: int | None
    new_chat_toolset: str
    theme: str
    compact_cards: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "new_chat_agent": self.new_chat_agent,
            "new_chat_toolset": self.new_chat_toolset,
            "theme": self.theme,
            "compact_cards": self.compact_cards,
        }


FIELDS = ("new_chat_agent", "new_chat_toolset", "theme", "compact_cards")


def preferences_of(*, user: Any) -> Preferences:
    """The person's look (unsaved defaults when they never chose)."""
    return Preferences.objects.filter(user=user).first() or Preferences(user=user)


def personal_settings(*, user: Any) -> PersonalSettings:
    prefs = preferences_of(user=user)
    chosen = new_chat_agent(user=user)
    return PersonalSettings(
        # An agent the person can no longer use reads as default, as new chats see it.
        new_chat_agent=None if chosen.pk == default_agent().pk else chosen.pk,
        new_chat_toolset=new_chat_toolset(user=user),
        theme=prefs.theme,
        compact_cards=prefs.compact_cards,
    )


def personal_settings_update(*, user: Any, **fields: Any) -> PersonalSettings:
    """Change the settings given; each is checked as the page and the API check it, and
    nothing is stored unless all are valid."""
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise Invalid(f"unknown field {unknown[0]}", fields={unknown[0]: ["unknown"]})
    theme = fields.get("theme")
    if "theme" in fields and theme not in THEMES:
        raise Invalid("theme is system, light or dark", fields={"theme": [str(theme)]})
    compact = fields.get("compact_cards")
    if "compact_cards" in fields and not isinstance(compact, bool):
        raise Invalid("compact_cards is true or false", fields={"compact_cards": ["bool"]})
    agent = _clean_agent(user, fields["new_chat_agent"]) if "new_chat_agent" in fields else None
    with transaction.atomic():
        if "new_chat_toolset" in fields:
            try:
                new_chat_default_set(user=user, toolset=fields["new_chat_toolset"])
            except Invalid as exc:
                # Named as this form and /api/settings/ name the field.
                raise Invalid(exc.message, fields={"new_chat_toolset": ["invalid"]}) from None
        if "new_chat_agent" in fields:
            NewChatDefault.objects.update_or_create(user=user, defaults={"agent": agent})
        look: dict[str, Any] = {k: fields[k] for k in ("theme", "compact_cards") if k in fields}
        if look:
            Preferences.objects.update_or_create(user=user, defaults=look)
    return personal_settings(user=user)


def _clean_agent(user: Any, agent: Any) -> Agent | None:
    if agent is None:
        return None
    found = None
    if isinstance(agent, int) and not isinstance(agent, bool):
        found = agents_visible_to(user).filter(pk=agent).first()
    if found is None:
        raise Invalid("no such agent", fields={"new_chat_agent": ["not found"]})
    return found


def new_chat_agent(*, user: Any) -> Agent:
    """The agent ``user``'s new chats start with: their choice while they can still use
    it, else ``default``."""
    chosen = NewChatDefault.objects.filter(user=user).values_list("agent_id", flat=True).first()
    if chosen is not None:
        agent = agents_visible_to(user).filter(pk=chosen).first()
        if agent is not None:
            return agent
    return default_agent()
