"""How people ask for a tool, written once per definition by a model: found by
tool_search, asked about once across processes and restarts, never on a turn's path,
bounded in size and in spend, and harmless when the model fails."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import plain_tool
from toolhub.tools import phrasings
from toolhub.tools.search import ToolIndex, document_text

_tool = plain_tool


TOOLS = [
    _tool("chat_post_message", "Post a message to a channel."),
    _tool("fs_delete_file", "Delete a file in the workspace."),
]


class Model:
    """What asks for phrasings: answers each request with ``phrases`` for every tool it
    was sent, and records what it was sent."""

    def __init__(self, phrases=("holler at the whole team",)):
        self.phrases = list(phrases)
        self.sent: list[list[dict]] = []
        self.gate: threading.Event | None = None

    def __call__(self, system, text):
        assert system == phrasings.PROMPT
        rows = json.loads(text)
        self.sent.append(rows)
        if self.gate is not None:
            self.gate.wait(10)
        return json.dumps({row["number"]: self.phrases for row in rows})


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "phrasings.sqlite3"
    yield path
    phrasings.configure(ask=None, store_file=None)


def _asked_names(model):
    return sorted(row["name"] for rows in model.sent for row in rows)


def test_a_tool_is_found_by_how_people_ask_for_it_once_a_model_wrote_that(store):
    model = Model()
    # Held until the first search is done: the model answering first is not the case here.
    model.gate = threading.Event()
    phrasings.configure(ask=model, store_file=store)
    assert ToolIndex(TOOLS).search("holler", mode="lexical") == []
    model.gate.set()

    assert phrasings.wait_written(timeout=10)
    hits = ToolIndex(TOOLS).search("holler", mode="lexical")

    # Both tools got the same phrasing here; each is found by it, by name order.
    assert [hit.tool.name for hit in hits] == ["chat_post_message", "fs_delete_file"]
    assert document_text(TOOLS[0]).endswith("Asked as: holler at the whole team")
    assert _asked_names(model) == ["chat_post_message", "fs_delete_file"]


def test_a_restart_reads_the_phrasings_and_asks_the_model_nothing(store):
    first = Model()
    phrasings.configure(ask=first, store_file=store)
    ToolIndex(TOOLS)
    assert phrasings.wait_written(timeout=10)

    again = Model()
    phrasings.configure(ask=again, store_file=store)
    ToolIndex(TOOLS).search("holler")
    assert phrasings.wait_written(timeout=10)

    assert again.sent == []
    assert phrasings.known(TOOLS[0]) == "holler at the whole team"


def test_a_changed_description_is_asked_about_again_and_never_keeps_the_old_phrasing(store):
    model = Model()
    phrasings.configure(ask=model, store_file=store)
    ToolIndex(TOOLS[:1])
    assert phrasings.wait_written(timeout=10)
    changed = _tool("chat_post_message", "Post a message to a channel or a thread.")

    assert phrasings.known(changed) == ""
    model.phrases = ["reply in a thread"]
    ToolIndex([changed])
    assert phrasings.wait_written(timeout=10)

    assert phrasings.known(changed) == "reply in a thread"
    assert phrasings.known(TOOLS[0]) == "holler at the whole team"
    assert len(model.sent) == 2


@pytest.mark.parametrize(
    "answer",
    [
        "I cannot help with that.",
        '{"1": "not a list"}',
        "[1, 2, 3]",
        '{"1": [1, 2, {"x": 3}]}',
        "{broken json",
    ],
)
def test_an_answer_that_gives_no_phrases_costs_the_tool_its_phrasing_for_an_hour(store, answer):
    calls = []

    def model(system, text):
        calls.append(text)
        return answer

    phrasings.configure(ask=model, store_file=store)
    ToolIndex(TOOLS[:1])
    assert phrasings.wait_written(timeout=10)
    ToolIndex(TOOLS[:1])  # the next turn
    assert phrasings.wait_written(timeout=10)
    phrasings.configure(ask=model, store_file=store)  # a restart
    ToolIndex(TOOLS[:1])
    assert phrasings.wait_written(timeout=10)

    assert len(calls) == 1
    assert phrasings.known(TOOLS[0]) == ""
    assert ToolIndex(TOOLS).search("post a message")[0].tool.name == "chat_post_message"


def test_a_model_that_fails_is_asked_again_only_after_the_retry_time(store, monkeypatch):
    calls = []

    def failing(system, text):
        calls.append(text)
        raise TimeoutError("no answer")

    phrasings.configure(ask=failing, store_file=store)
    ToolIndex(TOOLS[:1])
    assert phrasings.wait_written(timeout=10)
    monkeypatch.setattr(phrasings, "RETRY_SECONDS", 0.0)
    model = Model()
    phrasings.configure(ask=model, store_file=store)
    ToolIndex(TOOLS[:1])
    assert phrasings.wait_written(timeout=10)

    assert len(calls) == 1
    assert phrasings.known(TOOLS[0]) == "holler at the whole team"


def test_wanting_phrasings_never_waits_for_the_model(store):
    model = Model()
    model.gate = threading.Event()
    phrasings.configure(ask=model, store_file=store)
    try:
        index = ToolIndex(TOOLS)
        hits = index.search("delete a file")

        assert hits[0].tool.name == "fs_delete_file"
        assert not phrasings.wait_written(timeout=0.2)
    finally:
        model.gate.set()
    assert phrasings.wait_written(timeout=10)


def test_no_more_definitions_than_the_hourly_budget_go_to_the_model(store, monkeypatch):
    monkeypatch.setattr(phrasings, "HOURLY_DEFINITIONS", 10)
    model = Model()
    phrasings.configure(ask=model, store_file=store)
    many = [_tool(f"bulk_tool_{n}", f"Bulk tool number {n} of a large server.") for n in range(40)]

    ToolIndex(many)
    assert phrasings.wait_written(timeout=10)

    assert len(_asked_names(model)) <= 10


def test_without_a_model_nothing_is_asked_and_stored_phrasings_are_still_read(store):
    model = Model()
    phrasings.configure(ask=model, store_file=store)
    ToolIndex(TOOLS[:1])
    assert phrasings.wait_written(timeout=10)

    phrasings.configure(ask=None, store_file=store)
    ToolIndex(TOOLS)

    assert len(model.sent) == 1
    assert phrasings.known(TOOLS[0]) == "holler at the whole team"
    assert phrasings.known(TOOLS[1]) == ""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=400), max_size=30))
def test_any_answer_becomes_at_most_one_bounded_printable_line(phrases):
    definitions = [phrasings.definition_of(TOOLS[0])]

    found = phrasings.parse(json.dumps({"1": phrases}), definitions)

    for text in found.values():
        assert 0 < len(text) <= phrasings.MAX_CHARS
        assert text.isprintable()
        assert text == text.strip(" ;")


@pytest.mark.processes
def test_processes_wanting_the_same_tools_at_once_ask_the_model_once_per_definition(tmp_path):
    store, log = tmp_path / "shared.sqlite3", tmp_path / "asked.jsonl"
    script = textwrap.dedent(
        f"""
        import json, time
        from toolhub.tools import function, phrasings
        def model(system, text):
            rows = json.loads(text)
            with open({str(log)!r}, "a") as out:
                out.write(json.dumps([row["name"] for row in rows]) + "\\n")
            time.sleep(0.2)
            return json.dumps({{row["number"]: ["some request"] for row in rows}})
        phrasings.configure(ask=model, store_file={str(store)!r})
        tools = [
            function(lambda: 0, name=f"shared_tool_{{n}}", description=f"Shared tool {{n}}.",
                     parameters={{"type": "object", "properties": {{}}}},
                     register_globally=False)
            for n in range(12)
        ]
        phrasings.want(tools)
        assert phrasings.wait_written(timeout=60)
        """
    )
    children = [
        subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    errors = [child.communicate(timeout=120)[1] for child in children]

    assert [child.returncode for child in children] == [0, 0, 0], errors
    asked = [name for line in log.read_text().splitlines() for name in json.loads(line)]
    assert sorted(asked) == sorted(f"shared_tool_{n}" for n in range(12))


@pytest.mark.processes
def test_a_phrasing_another_process_wrote_is_read_without_asking(store, monkeypatch):
    phrasings.configure(ask=None, store_file=store)
    assert phrasings.known(TOOLS[1]) == ""
    script = textwrap.dedent(
        f"""
        import json
        from toolhub.tools import function, phrasings
        def model(system, text):
            return json.dumps({{"1": ["bin that file", "\\u0000odd\\u2028bytes"]}})
        phrasings.configure(ask=model, store_file={str(store)!r})
        tool = function(lambda: 0, name="fs_delete_file",
                        description="Delete a file in the workspace.",
                        parameters={{"type": "object", "properties": {{}}}},
                        register_globally=False)
        phrasings.want([tool])
        assert phrasings.wait_written(timeout=60)
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert child.returncode == 0, child.stderr

    monkeypatch.setattr(phrasings, "REFRESH_SECONDS", 0.0)
    assert phrasings.known(TOOLS[1]) == "bin that file; odd bytes"
    assert ToolIndex(TOOLS).search("bin that file", mode="lexical")[0].tool.name == "fs_delete_file"
