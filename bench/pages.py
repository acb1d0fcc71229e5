"""Server time of the HTML pages with 50 profiles and 200 tools, on PostgreSQL.

Creates (or reuses) the database ``toolhub_bench`` on the PostgreSQL at BENCH_DATABASE_URL
(default postgres://postgres@127.0.0.1:5432/toolhub_bench), registers 150 extra tools next
to the built-in pack (200 or more in all), makes a staff user with 50 profiles, a chat
of 200 messages and 50 tool cards (100 turns), 20 global disables, and 500 provider calls
over 20 chats and 4 models, then renders each page through Django's full request handling
in-process (middleware, sessions, CSP, templates) and prints the p50 and p95 server time and
the queries of one request, per page: the Programs page, one profile on it, the chat page,
its inspector, the ops page, the settings page (with the usage tables), and one agent on
the Agents page.
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _django import django_setup  # noqa: E402

DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolhub_bench"
)
PROFILES = 50
TOOLS = 200
ROUNDS = 60


def _register_tools() -> None:
    from toolhub.tools import function, registry

    def make(number: int):
        def tool(text: str = "") -> str:
            return text

        tool.__doc__ = f"Bench tool number {number}: echoes its text.\n\nArgs:\n    text: Any."
        return tool

    for number in range(max(0, TOOLS - len(registry.all_tools()))):
        registry.register(
            function(make(number), name=f"bench_tool_{number}", register_globally=False)
        )


def _setup():
    django_setup(DATABASE_URL)
    from django.contrib.auth import get_user_model

    from profiles_app import services as profiles
    from profiles_app.models import Agent, GlobalDisable, ToolProfile
    from sessions_app.eventlog import events_append
    from sessions_app.models import ChatSession, ProviderCall
    from sessions_app.services import session_create
    from toolhub.tools import registry
    from toolhub.tools.layers import META_TOOLS

    _register_tools()
    user, _ = get_user_model().objects.get_or_create(
        username="bench-pages", defaults={"is_staff": True}
    )
    ToolProfile.objects.filter(owner=user).delete()
    ChatSession.objects.filter(owner=user).delete()
    GlobalDisable.objects.all().delete()
    # The meta tools can be neither removed from a profile nor disabled.
    names = [tool.name for tool in registry.all_tools() if tool.name not in META_TOOLS]
    created = [
        profiles.profile_create(user=user, name=f"bench-{number}", tools=names[number : number + 5])
        for number in range(PROFILES)
    ]
    for name in names[-20:]:
        profiles.tool_disable_globally(user=user, tool=name, reason="bench")
    session = session_create(user=user)
    # 200 messages and 50 tool cards: 100 turns, each a question and a streamed answer,
    # every other one with a tool call (half of them approved) and a 2 KB result.
    for turn in range(100):
        items = [
            ("user_message", {"text": f"message {turn}: " + "words " * 30}),
            ("turn_started", {"demo": False}),
            *[("text_delta", {"text": "part "}) for _ in range(3)],
            ("assistant_message", {"text": "answer", "html": "<p>answer " + "text " * 60 + "</p>"}),
        ]
        if turn % 2 == 0:
            call = {"call_id": f"call-{turn}", "name": "bash", "arguments": {"command": "ls -la"}}
            items.append(("tool_call", call))
            if turn % 4 == 0:
                items += [
                    ("approval_request", call),
                    ("approval_answered", {"call_id": call["call_id"], "outcome": "allowed"}),
                ]
            result = {**call, "status": "ok", "content": "file.txt\n" * 200, "elapsed_ms": 12}
            items.append(("tool_result", result))
        items += [
            ("usage", {"input_tokens": 1500, "output_tokens": 40, "cache_read_input_tokens": 900}),
            ("turn_finished", {"reason": "end_turn"}),
        ]
        events_append(session_id=session.pk, turn=str(turn), items=items)
    chats = [session, *(session_create(user=user, title=f"chat {n}") for n in range(19))]
    models = ("claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-5", "llama3")
    ProviderCall.objects.bulk_create(
        ProviderCall(
            session=chats[n % len(chats)],
            turn=str(n),
            model=models[n % len(models)],
            fingerprint="f" * 64,
            input_tokens=1_500 + n,
            output_tokens=40,
            cache_read_input_tokens=900,
        )
        for n in range(500)
    )
    agent, _ = Agent.objects.update_or_create(
        owner=user, name="bench-agent", defaults={"tool_intent": {"toolset": "bench-1"}}
    )
    return user, created[0], session, agent


def main() -> None:
    logging.disable(logging.WARNING)
    user, profile, session, agent = _setup()
    from django.conf import settings

    # Templates link static files; the manifest would need collectstatic first.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    pages = {
        "programs": "/programs/",
        "program": f"/programs/profile/{profile.pk}/",
        "chat": f"/chat/{session.pk}/",
        "inspector": f"/chat/{session.pk}/inspector/",
        "ops": "/ops/tools/",
        "settings": "/settings/",
        "agent": f"/agents/{agent.pk}/",
    }
    from toolhub.tools import registry

    print(f"pages-bench tools={len(registry.all_tools())} profiles={PROFILES}")
    for label, url in pages.items():
        first = client.get(url, secure=True)
        assert first.status_code == 200, (url, first.status_code, first.content[:300])
        with CaptureQueriesContext(connection) as queries:
            client.get(url, secure=True)
        # Read now: the next request outside the context resets the query log.
        query_count = len(queries.captured_queries)
        times = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            client.get(url, secure=True)
            times.append((time.perf_counter() - started) * 1000)
        times.sort()
        print(
            f"pages-bench {label:<9} p50={statistics.median(times):.1f}ms "
            f"p95={times[int(len(times) * 0.95) - 1]:.1f}ms queries={query_count}"
        )


if __name__ == "__main__":
    main()
