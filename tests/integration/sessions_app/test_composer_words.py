"""The words under the composer's controls say what the next turn sends.

Every cell of the table the page receives (sessions_app.composer) is checked against the
resolver the turn uses: for each profile, Tools state, Web search state, the agent's own
tools and web search settings, plan mode, and web search available, missing its key or
turned off by an operator, the intent the composer would send is merged into the chat as
a chat frame merges it, and ``session_resolve`` says what the turn offers.
"""

from __future__ import annotations

import itertools

import pytest

from profiles_app.models import Agent
from profiles_app.services import profile_create, tool_disable_globally
from sessions_app.composer import STATES, session_composer_follow
from sessions_app.services import session_create, session_resolve
from toolhub.tools import ToolIntent

pytestmark = pytest.mark.django_db

OVERRIDE = {"follow": None, "on": True, "off": False}
PROFILES = ["default", "research", "reading", "no-web", "web-only"]


@pytest.fixture
def profiles(owner):
    profile_create(user=owner, name="reading", mode="only", tools=["read", "grep"])
    profile_create(user=owner, name="no-web", mode="all_except", tools=["web_search"])
    profile_create(user=owner, name="web-only", mode="only", tools=["web_search"])
    return PROFILES


@pytest.mark.parametrize("web_search", ["available", "no key", "turned off"])
def test_every_combination_of_the_controls_says_what_the_turn_sends(
    owner, staff, profiles, monkeypatch, web_search
):
    if web_search == "no key":
        monkeypatch.delenv("BRAVE_API_KEY", raising=False)
    else:
        monkeypatch.setenv("BRAVE_API_KEY", "test-key")
    if web_search == "turned off":
        tool_disable_globally(user=staff, tool="web_search", reason="quota spent")
    checked = 0
    wrong = []
    agents = itertools.product([None, False], [None, True, False], [False, True])
    for number, (agent_tools, agent_web, plan_mode) in enumerate(agents):
        agent = Agent.objects.create(
            owner=owner,
            name=f"agent {number}",
            tool_intent={"enabled": agent_tools, "web_search": agent_web},
        )
        session = session_create(user=owner, agent=agent.pk, plan_mode=plan_mode)
        follow = session_composer_follow(session=session, toolsets=profiles)
        stored = ToolIntent.parse(session.tool_intent)
        for toolset, tools, web in itertools.product(profiles, STATES, STATES):
            words = follow.words(toolset, tools, web)
            session.tool_intent = stored.merge(
                {
                    "toolset": None if toolset == "default" else toolset,
                    "enabled": OVERRIDE[tools],
                    "web_search": OVERRIDE[web],
                }
            ).to_json()
            sent = session_resolve(session=session).names
            case = (agent_tools, agent_web, plan_mode, toolset, tools, web, words)
            if words.web_on != ("web_search" in sent):
                wrong.append(("web_on", sent, case))
            says = words.tools.partition(".")[0]
            if says == "Off: this chat sends no tools but web search" and sent != ("web_search",):
                wrong.append(("only web search", sent, case))
            if says == "Off: this chat sends no tools" and sent:
                wrong.append(("nothing", sent, case))
            if words.web.startswith("Unavailable") and "web_search" in sent:
                wrong.append(("unavailable", sent, case))
            checked += 1

    assert wrong == []
    assert checked == 12 * len(profiles) * 9


def test_tools_off_with_web_search_on_says_web_search_is_still_sent(owner, monkeypatch):
    monkeypatch.setenv("BRAVE_API_KEY", "test-key")
    session = session_create(user=owner)
    follow = session_composer_follow(session=session, toolsets=["default"])

    words = follow.words("default", "off", "on")
    session.tool_intent = {"enabled": False, "web_search": True}

    assert (words.tools, words.web) == (
        "Off: this chat sends no tools but web search.",
        "On: sent on its own, though tools are off.",
    )
    assert session_resolve(session=session).names == ("web_search",)
