"""How often one chat turn changes app: a turn with one inline tool call (the demo model
asks for ``current_time``, which runs inline and asks nobody), traced call by call.

A *hop* is a call from a function of one part into a function of another: between the
three apps (``agent_app``, ``sessions_app``, ``profiles_app``), and from an app into the
shared layers below them (``toolhub.lib``, the runtime ``toolhub.tools``). Calls within a
part, and calls into Django or other libraries, are not hops. Every thread is traced (the
turn's database work runs on threads of its own), from the frame the socket would hand in
to the turn's last event. docs/architecture.md, "One chat turn, hop by hop", draws the
same turn.

Prints ``hops turn app_changes=N call_sites=S runtime_calls=M`` (S: the distinct
caller → callee pairs among the N) and, with ``-v``, each app-to-app hop
in order (caller → callee). Database: BENCH_DATABASE_URL (default
postgres://postgres@127.0.0.1:5432/toolhub_bench_hops); the channel layer in memory.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _django import django_setup, recreate_database  # noqa: E402

DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolhub_bench_hops"
)
APPS = ("agent_app", "sessions_app", "profiles_app")
RUNTIME = ("toolhub/lib", "toolhub/tools")


def _part(filename: str) -> str | None:
    path = Path(filename)
    try:
        relative = path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    for part in (*APPS, *RUNTIME):
        if relative.startswith(part + "/"):
            return part
    return None


class Tracer:
    def __init__(self) -> None:
        self.app_hops: list[tuple[str, str]] = []
        self.runtime = 0
        self._lock = threading.Lock()

    def __call__(self, frame, event, arg):  # sys.setprofile's signature
        if event != "call" or frame.f_back is None:
            return
        callee = _part(frame.f_code.co_filename)
        caller = _part(frame.f_back.f_code.co_filename)
        if callee is None or caller is None or callee == caller:
            return
        with self._lock:
            if callee in APPS and caller in APPS:
                where = f"{frame.f_back.f_code.co_qualname} → {frame.f_code.co_qualname}"
                self.app_hops.append((f"{caller} → {callee}", where))
            elif caller in APPS:
                self.runtime += 1


async def _turn(session, tracer: Tracer) -> None:
    from agent_app.turns import turn_start, wait_for_turns

    # Every thread, those already running included (the turn's database threads).
    threading.setprofile_all_threads(tracer)
    try:
        await turn_start(session=session, text="use current_time", attended=True)
        await wait_for_turns()
    finally:
        threading.setprofile_all_threads(None)


def main() -> None:
    recreate_database(DATABASE_URL)
    django_setup(DATABASE_URL)
    os.environ.pop("ANTHROPIC_API_KEY", None)
    from django.contrib.auth import get_user_model

    from sessions_app.models import SessionEvent
    from sessions_app.services import session_create

    user = get_user_model().objects.create_user("hops", password=None)
    session = session_create(user=user)
    # Once untraced, so what a process does once (caches, the index) is not counted.
    asyncio.run(_warm(session))
    session = session_create(user=user)
    tracer = Tracer()
    asyncio.run(_turn(session, tracer))
    kinds = list(SessionEvent.objects.filter(session=session).values_list("kind", flat=True))
    if "tool_result" not in kinds or "turn_finished" not in kinds:
        raise SystemExit(f"the turn did not call its tool and finish: {kinds}")
    sites = set(tracer.app_hops)
    print(
        f"hops turn app_changes={len(tracer.app_hops)} call_sites={len(sites)} "
        f"runtime_calls={tracer.runtime}"
    )
    calls = Counter(pair for pair, _ in tracer.app_hops)
    distinct = Counter(pair for pair, _ in sites)
    for pair in sorted(calls):
        print(f"hops pair {pair.replace(' → ', '->')}={calls[pair]} sites={distinct[pair]}")
    if "-v" in sys.argv:
        for pair, where in tracer.app_hops:
            print(f"  {pair}: {where}")


async def _warm(session) -> None:
    from agent_app.turns import turn_start, wait_for_turns

    await turn_start(session=session, text="use current_time", attended=True)
    await wait_for_turns()


if __name__ == "__main__":
    main()
