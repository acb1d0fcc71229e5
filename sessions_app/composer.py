"""The composer's three-state controls (Tools, Web search) and the words under them.

What the words say is what the next turn sends: they are computed here from the real
resolver's answers, never by a rule of the page's own. For each toolset of the Profile
select, two resolutions decide everything (tools on, web search following; tools on, web
search on), and ``composer_words`` combines them with the two controls:

- Web search **On** layers ``web_search`` on top of whatever the rest gives, Tools Off
  included (``toolhub.tools.resolve``): the turn sends it unless a rule blocks it
  (unavailable: not installed, no key, an operator's disable).
- Web search **Follow** sends it when the profile does and tools are on.
- Web search **Off** never sends it.

The page receives the whole table (every toolset, Tools state and Web search state) as
JSON, so a change of a control shows its words without a round trip and without a second
copy of the rule in JavaScript. A test checks every cell against the resolver
(``tests/integration/sessions_app/test_composer_words.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from django.db import transaction

from profiles_app.services import global_disables, profile_lookup_preloaded
from sessions_app.models import ChatSession
from sessions_app.services import session_context, session_intent_merge, session_update
from toolhub.lib.errors import Invalid
from toolhub.tools import ToolIntent, UnknownToolsetError, resolve
from toolhub.tools.layers import hidden_words
from toolhub.tools.presets import DEFAULT_PRESET

WEB_SEARCH = "web_search"
STATES = ("follow", "on", "off")


def composer_state(flag: bool | None) -> str:
    """A stored override as the composer's three-state control shows it."""
    return "follow" if flag is None else "on" if flag else "off"


@dataclass(frozen=True, slots=True)
class Follow:
    """What "follow" comes to for one composer control: on or off, and why, in words."""

    on: bool
    hint: str
    # Why web search cannot be offered whatever the control says ("" when it can).
    unavailable: str = ""
    # The agent's own setting, which "follow" takes (None: the profile decides). On, it
    # adds web search as the control's On does, tools off included.
    agent_says: bool | None = None


@dataclass(frozen=True, slots=True)
class ComposerWords:
    """What one combination of the controls sends, and the words under each control."""

    tools: str
    web: str
    # Whether the turn sends web_search.
    web_on: bool
    # The "· on/off" beside Web search's Follow: what following would give now.
    web_follow_on: bool


def composer_words(
    *, tools_follow: Follow, web: Follow, tools_state: str, web_state: str
) -> ComposerWords:
    """The one rule the page shows (module docstring)."""
    tools_on = tools_follow.on if tools_state == "follow" else tools_state == "on"
    # Following an agent that says on or off is that agent's On or Off.
    acts_as = web_state
    if web_state == "follow" and web.agent_says is not None:
        acts_as = "on" if web.agent_says else "off"
    if acts_as == "on":
        web_on = not web.unavailable
    elif acts_as == "follow":
        web_on = tools_on and web.on
    else:
        web_on = False
    return ComposerWords(
        tools=_tools_words(tools_follow, tools_state, tools_on=tools_on, web_on=web_on),
        web=_web_words(web, web_state, tools_on=tools_on, web_on=web_on),
        web_on=web_on,
        web_follow_on=web_on
        if web_state == "follow"
        else (
            composer_words(
                tools_follow=tools_follow, web=web, tools_state=tools_state, web_state="follow"
            ).web_on
        ),
    )


def _web_words(web: Follow, web_state: str, *, tools_on: bool, web_on: bool) -> str:
    if web.unavailable:
        return f"Unavailable: {web.unavailable}."
    if web_state == "off":
        return "Off: never offered in this chat."
    if web_state == "on":
        return (
            "On: added to the profile's tools."
            if tools_on
            else "On: sent on its own, though tools are off."
        )
    if tools_on:
        return web.hint
    if web_on:
        return f"{web.hint[:-1]}, sent though tools are off."
    return "Tools are off, so web search is too."


def _tools_words(tools_follow: Follow, tools_state: str, *, tools_on: bool, web_on: bool) -> str:
    if tools_state == "follow":
        words = tools_follow.hint
        return f"{words} Web search is still sent." if not tools_on and web_on else words
    if tools_state == "on":
        return "On: this chat offers its profile's tools."
    return (
        "Off: this chat sends no tools but web search."
        if web_on
        else "Off: this chat sends no tools."
    )


@dataclass(frozen=True, slots=True)
class ComposerFollow:
    """What each of the composer's "follow" choices resolves to, per toolset of its
    Profile select, and the words of every combination of the controls."""

    tools: Follow
    web_search: dict[str, Follow]

    def words(self, toolset: str, tools_state: str, web_state: str) -> ComposerWords:
        web = self.web_search.get(toolset) or Follow(on=False, hint="")
        return composer_words(
            tools_follow=self.tools, web=web, tools_state=tools_state, web_state=web_state
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "tools": asdict(self.tools),
            "web_search": {k: asdict(v) for k, v in self.web_search.items()},
            "words": {
                toolset: {
                    tools: {web: asdict(self.words(toolset, tools, web)) for web in STATES}
                    for tools in STATES
                }
                for toolset in self.web_search
            },
        }


def _tools_follow(session: ChatSession) -> Follow:
    # A chat's `enabled: null` follows the agent, then the default (on).
    agent = session.agent
    enabled = ToolIntent.parse(agent.tool_intent).enabled
    if enabled is None:
        return Follow(on=True, hint="Follow: on (the default).")
    word = "on" if enabled else "off"
    return Follow(on=enabled, hint=f"Follow: {word} (the agent “{agent.name}” has tools {word}).")


def session_composer_follow(*, session: ChatSession, toolsets: list[str]) -> ComposerFollow:
    """Resolve, for every toolset the composer offers, whether web_search would be offered
    with the chat's web search override cleared ("follow") and with it on, through the
    real resolver (memoized, so a page load of an unchanged chat recomputes nothing).

    Tools are taken as on here; ``composer_words`` combines the answers with the Tools
    control. The toolset is what the composer would send for that choice (``default`` is
    sent as null: follow the agent's toolset)."""
    agent = session.agent
    intent = ToolIntent.parse(session.tool_intent)
    agent_intent = ToolIntent.parse(agent.tool_intent)
    inputs: dict[str, Any] = {
        "agent_intent": agent_intent,
        # One query for every profile, however many resolutions ask.
        "profile_lookup": profile_lookup_preloaded(session.owner_id),
        "disabled": global_disables(),
        "ctx": session_context(session=session),
        "strategy": agent.strategy,
    }
    web: dict[str, Follow] = {}
    for name in toolsets:
        toolset = None if name == DEFAULT_PRESET else name
        on = {"toolset": toolset, "enabled": True}
        follow_on, why = _web_search_offered(intent, {**on, "web_search": None}, inputs)
        on_works, blocked = _web_search_offered(intent, {**on, "web_search": True}, inputs)
        if follow_on:
            if agent_intent.web_search:
                why = f"the agent “{agent.name}” has it on"
            elif intent.picked is not None or agent_intent.picked is not None:
                why = "it is among the picked tools"
            else:
                why = f"the {toolset or agent_intent.toolset or DEFAULT_PRESET} profile has it"
        elif agent_intent.web_search is False and on_works:
            why = f"the agent “{agent.name}” has it off"
        web[name] = Follow(
            on=follow_on,
            hint=f"Follow: {'on' if follow_on else 'off'} ({why}).",
            unavailable="" if on_works else blocked,
            agent_says=agent_intent.web_search,
        )
    return ComposerFollow(tools=_tools_follow(session), web_search=web)


def _web_search_offered(
    intent: ToolIntent, patch: dict[str, Any], inputs: dict[str, Any]
) -> tuple[bool, str]:
    """Whether a turn with the chat's ``intent`` changed by ``patch`` would offer
    web_search, and if not, why."""
    try:
        resolved = resolve(intent=intent.merge(patch), **inputs)
    except UnknownToolsetError as exc:
        return False, exc.args[0]
    if WEB_SEARCH in resolved.names:
        return True, ""
    hidden = resolved.reason_for(WEB_SEARCH)
    if hidden is None:
        return False, "web search is not installed"
    # An operator's disable in the words a person reads elsewhere (who, and why).
    return False, hidden_words(
        hidden.layer, hidden.reason
    ) if hidden.layer == "L5" else hidden.reason


# The composer's choices apply when made (``composer_apply``): each is stored at once, so
# what the next message uses is what the controls show, with or without a reload.
CHOICES = ("agent", "model", "toolset", "tools", "web_search", "plan_mode")
_INTENT_FIELD = {"tools": "enabled", "web_search": "web_search"}
_STATE_WORDS = {"follow": "follow the agent and the profile", "on": "on", "off": "off"}


def composer_apply(*, user: Any, session: ChatSession, choices: Mapping[str, str]) -> ChatSession:
    """Store the composer's choices that ``choices`` names (the form fields of its
    options panel: ``agent`` an id, ``model`` ``provider:model`` or empty (the agent's),
    ``toolset`` a profile's name or ``default``,
    ``tools``/``web_search`` follow, on or off, ``plan_mode`` on or off) and return the
    chat as it now is. Another field is refused, so a misspelt one never passes as
    applied; the choices apply all or none (a burst of them comes as one request)."""
    unknown = sorted(set(choices) - set(CHOICES))
    if unknown:
        raise Invalid(f"unknown choice {unknown[0]}", fields={unknown[0]: ["unknown"]})
    with transaction.atomic():
        return _apply(user=user, session=session, choices=choices)


def _apply(*, user: Any, session: ChatSession, choices: Mapping[str, str]) -> ChatSession:
    if "agent" in choices:
        chosen = choices["agent"]
        agent: Any = int(chosen) if chosen.isascii() and chosen.isdigit() else chosen
        session = session_update(user=user, session=session, version=session.version, agent=agent)
    if "model" in choices:
        session = session_update(
            user=user, session=session, version=session.version, model=choices["model"]
        )
    patch: dict[str, Any] = {}
    if "toolset" in choices:
        patch["toolset"] = None if choices["toolset"] == DEFAULT_PRESET else choices["toolset"]
    for name, field in _INTENT_FIELD.items():
        if name in choices:
            state = choices[name]
            if state not in STATES:
                raise Invalid(f"{name} is follow, on or off", fields={name: ["choice"]})
            patch[field] = None if state == "follow" else state == "on"
    if patch:
        session = session_intent_merge(session=session, patch=patch)
    if "plan_mode" in choices:
        on = choices["plan_mode"]
        if on not in ("on", "off"):
            raise Invalid("plan_mode is on or off", fields={"plan_mode": ["choice"]})
        session = session_update(
            user=user, session=session, version=session.version, plan_mode=on == "on"
        )
    return session


def composer_applied_words(*, session: ChatSession, choices: Mapping[str, str]) -> str:
    """The short confirmation of applied choices, in the words the panel shows."""
    said = []
    if "agent" in choices:
        said.append(f"{session.agent.name} answers")
    if "model" in choices:
        said.append(
            f"the model is {session.model}" if session.provider else "the agent's model answers"
        )
    if "toolset" in choices:
        toolset = ToolIntent.parse(session.tool_intent).toolset
        said.append(f"the profile is {toolset}" if toolset else "the agent's profile applies")
    for name, label in (("tools", "tools"), ("web_search", "web search")):
        if name in choices:
            said.append(f"{label} {_STATE_WORDS.get(choices[name], choices[name])}")
    if "plan_mode" in choices:
        said.append("plan mode is on" if session.plan_mode else "plan mode is off")
    if not said:
        return ""
    return f"From your next message, {', '.join(said)}."
