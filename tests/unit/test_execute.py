"""Tool.execute: dispatch, errors, caps, streaming, cancellation, timeouts, caching, approval."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import pytest

from toolhub.tools import CancelToken, TailAccumulator, ToolContext, ToolResult, function
from toolhub.tools.caching import MemoryResultCache, MemoryResultStore


def _tool(fn, **kwargs):
    return function(register_globally=False, **kwargs)(fn)


async def test_sync_and_async_functions_both_run_and_return_text():
    def add(a: int, b: int) -> int:
        return a + b

    async def shout(text: str) -> str:
        await asyncio.sleep(0)
        return text.upper()

    assert (await _tool(add).execute({"a": 2, "b": 3})).content == "5"
    assert (await _tool(shout).execute({"text": "hi"})).content == "HI"


async def test_structured_return_values_become_canonical_json():
    def info() -> dict:
        return {"b": 1, "a": ["é", 2]}

    assert (await _tool(info).execute()).content == '{"a":["é",2],"b":1}'


async def test_an_exception_becomes_an_error_result_and_never_escapes():
    def broken() -> str:
        raise RuntimeError("disk on fire")

    result = await _tool(broken).execute()

    assert result.is_error
    assert result.status == "error"
    assert "RuntimeError: disk on fire" in result.content


async def test_a_tool_may_return_its_own_error_result():
    def picky() -> ToolResult:
        return ToolResult.error("no")

    assert (await _tool(picky).execute()).is_error


async def test_a_long_result_keeps_head_and_tail_around_a_marker_within_the_cap():
    text = "H" * 600 + "M" * 5000 + "T" * 600

    def big() -> str:
        return text

    result = await _tool(big, max_result_chars=1000, head_ratio=0.5).execute()

    assert result.truncated
    assert len(result.content) <= 1000
    assert result.content.startswith("H" * 400)
    assert result.content.endswith("T" * 400)
    assert "characters omitted" in result.content


async def test_head_ratio_decides_how_much_of_the_start_is_kept():
    def big() -> str:
        return "".join(str(i % 10) for i in range(10_000))

    result = await _tool(big, max_result_chars=1000, head_ratio=0.8).execute()
    head, _, tail = result.content.partition("[…")

    assert len(head.rstrip("\n")) > 3 * len(tail.split("…]", 1)[1].strip("\n"))


async def test_persist_full_keeps_the_whole_text_and_links_it_from_the_marker():
    store = MemoryResultStore()
    text = "x" * 5000

    def big() -> str:
        return text

    result = await _tool(big, max_result_chars=500, persist_full=True).execute(
        ctx=ToolContext(store=store)
    )

    assert result.full_ref is not None
    assert f"full output: {result.full_ref}" in result.content
    assert store.get(result.full_ref) == text


async def test_the_ceiling_shrinks_to_thirty_percent_of_a_small_context_window():
    def big() -> str:
        return "y" * 50_000

    tool = _tool(big, max_result_chars=40_000)
    small = ToolContext(context_window_tokens=1000)  # 4,000 chars, 30% = 1,200

    assert tool.effective_ceiling(small) == 1200
    assert len((await tool.execute(ctx=small)).content) <= 1200
    assert tool.effective_ceiling(ToolContext(context_window_tokens=1_000_000)) == 40_000


async def test_on_update_receives_every_chunk_with_a_bounded_tail():
    updates = []

    async def chatty(ctx: ToolContext) -> str:
        for i in range(5):
            ctx.update(f"line {i}\n")
        return "done"

    tool = _tool(chatty, stream_capacity_chars=14)
    result = await tool.execute(ctx=ToolContext(on_update=updates.append))

    assert result.content == "done"
    assert [update.chunk for update in updates] == [f"line {i}\n" for i in range(5)]
    assert updates[-1].tail == "line 3\nline 4\n"
    assert updates[-1].total_chars == 35


def test_the_tail_accumulator_evicts_the_oldest_text_and_counts_everything():
    tail = TailAccumulator(10)
    for chunk in ("abcdef", "ghijkl", "mn"):
        tail.append(chunk)

    assert tail.text == "efghijklmn"
    assert tail.total_chars == 14
    assert tail.dropped_chars == 4
    tail.append("0123456789ABCDEF")
    assert tail.text == "6789ABCDEF"


def _sleeper():
    """A tool that sleeps for long, and the event it sets once it has stopped."""
    stopped = asyncio.Event()

    async def slow() -> str:
        try:
            await asyncio.sleep(30)
        finally:
            stopped.set()
        return "never"

    return slow, stopped


async def test_cancelling_the_token_stops_an_async_tool_and_yields_cancelled():
    slow, stopped = _sleeper()

    token = CancelToken()
    running = asyncio.create_task(_tool(slow).execute(ctx=ToolContext(cancel=token)))
    await asyncio.sleep(0.05)
    token.cancel()
    result = await running

    assert result.status == "cancelled"
    assert result.is_error
    assert stopped.is_set()


async def test_a_sync_tool_sees_the_cancel_token_from_its_thread():
    seen = threading.Event()

    def polling(ctx: ToolContext) -> str:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if ctx.cancel.cancelled:
                seen.set()
                return "stopped"
            time.sleep(0.01)
        return "ran out"

    token = CancelToken()
    running = asyncio.create_task(_tool(polling).execute(ctx=ToolContext(cancel=token)))
    await asyncio.sleep(0.05)
    token.cancel()

    assert (await running).status == "cancelled"
    assert await asyncio.to_thread(seen.wait, 2)


async def test_a_tool_that_returns_as_stop_is_pressed_is_reported_stopped_not_ok():
    # Stop sets the flag at once and reaches the event loop a step later; a tool may
    # return in between (here it presses Stop itself, then returns at once).
    token = CancelToken()

    def finishing(ctx: ToolContext) -> str:
        token.cancel()
        return "done anyway"

    result = await _tool(finishing).execute(ctx=ToolContext(cancel=token))

    assert (result.status, result.content) == ("cancelled", "finishing: cancelled")


async def test_cancelling_the_caller_propagates_and_cancels_the_tool():
    slow, stopped = _sleeper()

    running = asyncio.create_task(_tool(slow).execute())
    await asyncio.sleep(0.05)
    running.cancel()

    with pytest.raises(asyncio.CancelledError):
        await running
    assert stopped.is_set()


async def test_a_tool_that_overruns_its_timeout_is_stopped_with_an_error():
    async def slow() -> str:
        await asyncio.sleep(30)
        return "never"

    result = await _tool(slow, timeout=0.1).execute()

    assert result.is_error
    assert "timed out after 0.1 s" in result.content


async def test_with_a_ceiling_progress_restarts_the_timeout_until_the_ceiling():
    async def reporting(steps: int, ctx: ToolContext) -> str:
        for step in range(steps):
            ctx.update(f"step {step}\n")
            await asyncio.sleep(0.02)
        return f"{steps} steps"

    async def silent(ctx: ToolContext) -> str:
        await asyncio.sleep(30)
        return "never"

    # 20 steps 0.02 s apart: 0.4 s in all, past the 0.1 s timeout, never that long silent.
    kept = await _tool(reporting, timeout=0.1, timeout_ceiling=5).execute({"steps": 20})
    capped = await _tool(reporting, timeout=0.1, timeout_ceiling=0.2).execute({"steps": 500})
    quiet = await _tool(silent, timeout=0.1, timeout_ceiling=0.05).execute()

    assert kept.content == "20 steps"
    assert "stopped at its limit of 0.2 s, still reporting progress" in capped.content
    # A ceiling below the timeout is the timeout: a silent call is told it was silent.
    assert "timed out after 0.1 s without progress" in quiet.content


async def test_a_model_passed_timeout_is_clamped_and_used_as_argument_and_budget():
    seen = []

    async def wait(seconds: float, timeout: float = 10) -> str:
        seen.append(timeout)
        await asyncio.sleep(seconds)
        return "finished"

    tool = _tool(wait, timeout_min=0.05, timeout_max=0.2)

    too_long = await tool.execute({"seconds": 5, "timeout": 3600})
    too_short = await tool.execute({"seconds": 0.1, "timeout": 0.001})

    assert seen == [0.2, 0.05]
    assert "timed out after 0.2 s" in too_long.content
    assert "timed out after 0.05 s" in too_short.content
    assert tool.parameters["properties"]["timeout"]["default"] == 10


async def test_cached_results_are_reused_until_the_ttl_expires():
    now = [0.0]
    cache = MemoryResultCache(clock=lambda: now[0])
    calls = []

    def lookup(key: str) -> str:
        calls.append(key)
        return f"value {len(calls)}"

    tool = _tool(lookup, cache=True, cache_ttl=60)
    ctx = ToolContext(user_id="u1", cache=cache)

    first = await tool.execute({"key": "a"}, ctx)
    second = await tool.execute({"key": "a"}, ctx)
    now[0] = 61
    third = await tool.execute({"key": "a"}, ctx)

    assert (first.content, second.content, third.content) == ("value 1", "value 1", "value 2")
    assert second.cached
    assert calls == ["a", "a"]


async def test_one_users_cached_result_never_reaches_another_user():
    cache = MemoryResultCache()

    def whoami(ctx: ToolContext) -> str:
        return f"secret of {ctx.user_id}"

    tool = _tool(whoami, cache=True)

    alice = await tool.execute(ctx=ToolContext(user_id="alice", cache=cache))
    bob = await tool.execute(ctx=ToolContext(user_id="bob", cache=cache))

    assert alice.content == "secret of alice"
    assert bob.content == "secret of bob"


async def test_a_shared_cache_tool_reuses_results_across_users():
    cache = MemoryResultCache()
    calls = []

    def public(q: str) -> str:
        calls.append(q)
        return q

    tool = _tool(public, cache=True, cache_per_user=False)
    await tool.execute({"q": "x"}, ToolContext(user_id="alice", cache=cache))
    await tool.execute({"q": "x"}, ToolContext(user_id="bob", cache=cache))

    assert calls == ["x"]


async def test_errors_are_never_cached():
    cache = MemoryResultCache()
    calls = []

    def flaky() -> str:
        calls.append(1)
        raise RuntimeError("try again")

    tool = _tool(flaky, cache=True)
    await tool.execute(ctx=ToolContext(cache=cache))
    await tool.execute(ctx=ToolContext(cache=cache))

    assert len(calls) == 2


def test_requires_approval_as_bool_or_callable_and_a_raising_rule_asks():
    def run(command: str) -> str:
        return command

    always = _tool(run, requires_approval=True)
    never = _tool(run, name="run2")
    risky = _tool(run, name="run3", requires_approval=lambda args, ctx: "rm" in args["command"])
    broken = _tool(run, name="run4", requires_approval=lambda args, ctx: 1 / 0)
    ctx = ToolContext()

    assert always.needs_approval({"command": "ls"}, ctx)
    assert not never.needs_approval({"command": "ls"}, ctx)
    assert risky.needs_approval({"command": "rm -rf x"}, ctx)
    assert not risky.needs_approval({"command": "ls"}, ctx)
    assert broken.needs_approval({"command": "ls"}, ctx)


def test_a_tool_is_frozen_and_stays_callable_from_python():
    def double(n: int) -> int:
        return 2 * n

    tool = _tool(double, expose=False)

    assert tool(4) == 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        tool.name = "other"


def test_invalid_declarations_fail_at_decoration():
    def noop() -> str:
        return ""

    with pytest.raises(ValueError, match="runs_on"):
        _tool(noop, runs_on="gpu")
    with pytest.raises(ValueError, match="must match"):
        _tool(noop, name="has space")
    with pytest.raises(ValueError, match="timeout_min"):
        _tool(noop, timeout_min=10, timeout_max=1)


async def test_one_calls_timeout_does_not_cancel_the_next_call_on_the_same_token():
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "finished"

    tool = _tool(slow, timeout=0.1)
    ctx = ToolContext(cancel=CancelToken())

    first = await tool.execute({"seconds": 5}, ctx)
    second = await tool.execute({"seconds": 0}, ctx)

    assert "timed out" in first.content
    assert second.content == "finished"
    assert not ctx.cancel.cancelled


async def test_a_broken_cache_or_store_degrades_to_a_miss_never_a_failed_tool():
    class Broken:
        def get(self, key):
            raise ConnectionError("cache down")

        def set(self, key, value, ttl):
            raise ConnectionError("cache down")

        def put(self, *, tool, text, ctx):
            raise ConnectionError("store down")

    def big() -> str:
        return "z" * 5000

    tool = _tool(big, cache=True, persist_full=True, max_result_chars=500)
    result = await tool.execute(ctx=ToolContext(cache=Broken(), store=Broken()))

    assert result.status == "ok"
    assert result.truncated
    assert result.full_ref is None


async def test_a_required_argument_with_a_declared_default_may_be_left_out_as_the_server_allows():
    """Playwright MCP's browser_take_screenshot marks ``scale`` required and declares its
    default; the server takes ``{}``, so toolhub does too, and still checks a given value."""
    seen = []

    def screenshot(**arguments) -> str:
        seen.append(arguments)
        return "shot"

    tool = function(
        screenshot,
        name="browser_take_screenshot",
        description="Take a screenshot.",
        parameters={
            "type": "object",
            "properties": {
                "scale": {"type": "string", "enum": ["css", "device"], "default": "css"},
                "path": {"type": "string"},
            },
            "required": ["scale", "path"],
        },
        register_globally=False,
    )

    left_out = await tool.execute({"path": "a.png"}, ToolContext())
    wrong = await tool.execute({"path": "a.png", "scale": 5}, ToolContext())
    no_path = await tool.execute({}, ToolContext())

    assert (left_out.status, left_out.content) == ("ok", "shot")
    assert seen == [{"path": "a.png"}]
    assert wrong.is_error
    assert "scale" in wrong.content
    assert no_path.content.endswith("missing required argument 'path'")
