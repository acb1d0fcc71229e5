"""What tool_search costs and where: the glossary's words a query implies, encodings made
in the background when tools register, kept on disk for other processes, and a turn that
never waits for the model before its first search."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolhub.tools import ToolRegistry, embeddings, function, glossary
from toolhub.tools.resolve import resolve
from toolhub.tools.search import ToolIndex, document_text
from toolhub.tools.turn import TurnTools


def _tool(name, description, registry=None, **fields):
    def body(**kwargs):
        return kwargs

    return function(
        body,
        name=name,
        description=description,
        parameters={"type": "object", "properties": {}},
        register_globally=registry is not None,
        registry=registry,
        **fields,
    )


TEAM_TOOLS = [
    _tool("chat_send_direct_message", "Send a private message to one person."),
    _tool("chat_send_message", "Post a message to a channel."),
    _tool("fs_list_directory", "List the entries of a directory in the workspace."),
    _tool("tracker_assign_ticket", "Assign a ticket to a person."),
    _tool("math_evaluate", "Evaluate an arithmetic expression and calculate the result."),
    _tool("repo_create_issue", "Open a new issue in a hosted source repository."),
]


@pytest.fixture
def semantic():
    if not embeddings.available():
        if os.environ.get("TOOLHUB_REQUIRE_SERVICES") == "1":
            pytest.fail("the semantic extra is not installed (make installs it)")
        pytest.skip("the semantic extra is not installed")


@pytest.fixture
def cache_file(tmp_path):
    path = tmp_path / "encodings.sqlite3"
    before = (embeddings.enabled, embeddings.cache_path)
    embeddings.configure(semantic_search=embeddings.enabled, cache_file=path)
    embeddings.forget_in_memory()
    yield path
    embeddings.configure(semantic_search=before[0], cache_file=before[1])


# --- the glossary


@pytest.mark.parametrize(
    ("query", "implied"),
    [
        ("DM priya on slack", ["direct", "message", "chat", "channel"]),
        ("ls the src folder", ["list", "directory"]),
        ("hand OPS-40 over to Dana", ["ticket"]),
        ("what is 17.5% of 2340", ["calculate"]),
        ("file a bug on github", ["repository"]),
        ("post it in #incidents", ["channel"]),
        ("upload report.pdf to s3", ["file", "bucket", "object", "storage"]),
        ("charge them €49", ["currency", "amount"]),
    ],
)
def test_a_query_in_peoples_words_implies_the_words_tools_are_described_in(query, implied):
    assert set(implied) <= set(glossary.expansion(query).split())


def test_words_the_glossary_does_not_know_imply_nothing():
    assert glossary.expansion("purple elephant symphony") == ""
    assert glossary.expansion("") == ""


def test_a_longer_phrase_wins_over_the_words_inside_it():
    # "google sheets" is a spreadsheet, not a web search for sheets.
    assert glossary.expansion("append a row to the google sheets budget") == "spreadsheet"


@settings(max_examples=200, deadline=None, derandomize=True)
@given(query=st.text(max_size=300))
def test_any_text_expands_without_error_into_words_only_the_glossary_and_shapes_give(query):
    known = set()
    for words in [*glossary.GLOSSARY.values(), *(words for _, words in glossary._SHAPES)]:
        known.update(words.split())

    implied = glossary.expansion(query)

    assert set(implied.split()) <= known


def test_a_huge_query_is_read_only_up_to_its_bound():
    tail = " slack" * 10_000

    assert glossary.expansion("x" * glossary.MAX_QUERY_CHARS + tail) == ""
    assert glossary.expansion("a" * 1_000_000 + "@") == ""


def test_lexical_search_finds_tools_through_the_words_a_query_implies(monkeypatch):
    monkeypatch.setattr(embeddings, "enabled", False)
    index = ToolIndex(TEAM_TOOLS)

    def first(query):
        return index.search(query, 1)[0].tool.name

    assert first("DM priya") == "chat_send_direct_message"
    assert first("drop it on slack") == "chat_send_message"
    assert first("ls src") == "fs_list_directory"
    assert first("what is 17.5% of 2340") == "math_evaluate"
    assert first("file a bug on github") == "repo_create_issue"
    # Implied words add evidence; they do not outweigh what the query says.
    assert first("assign the ticket for the slack bug") == "tracker_assign_ticket"


# --- encodings: made in the background, shared on disk, never on a turn's path


def test_making_an_index_and_a_turn_never_runs_the_model(monkeypatch):
    turn_thread = threading.current_thread()
    on_turn_path = []
    encoder = embeddings._encoder

    def watched():
        if threading.current_thread() is turn_thread:
            on_turn_path.append(True)
        return encoder()

    monkeypatch.setattr(embeddings, "_encoder", watched)
    registry = ToolRegistry()
    for number in range(200):
        _tool(f"fresh_tool_{number}", f"Does thing number {number}.", registry, defer=True)

    turn = TurnTools(resolve(registry))

    assert len(turn.index.names) == 200
    assert on_turn_path == []


def test_registered_tools_are_encoded_in_the_background_before_any_search(semantic, cache_file):
    registry = ToolRegistry()
    tools = [
        _tool(f"bg_tool_{n}", f"Background encoding check {n} of a tool.", registry)
        for n in range(5)
    ]

    assert embeddings.wait_prepared(timeout=60)
    encoder = embeddings._encoder()
    ran = []
    original = encoder.model.encode
    encoder.model.encode = lambda texts, **kw: ran.append(texts) or original(texts, **kw)
    try:
        index = ToolIndex(tools)
        index.search("background encoding check")
    finally:
        encoder.model.encode = original

    # Only the query ran: every tool text was already encoded.
    assert [list(texts) for texts in ran] == [["background encoding check"]]


def test_another_process_reads_the_encodings_from_disk_without_running_the_model(
    semantic, cache_file
):
    tools = [_tool(f"disk_tool_{n}", f"Shared on disk, tool number {n}.") for n in range(3)]
    ToolIndex(tools).search("shared on disk")
    texts = [document_text(tool) for tool in tools]
    script = textwrap.dedent(
        f"""
        from toolhub.tools import embeddings
        embeddings.configure(semantic_search=True, cache_file={str(cache_file)!r})
        encoder = embeddings._encoder()
        def refuse(texts, **kwargs):
            raise SystemExit("the model ran for " + repr(texts))
        encoder.model.encode = refuse
        index = embeddings.SemanticIndex.build({texts!r})
        print(index.sentence(embeddings.Encoding(index._vectors[0], None)).round(3).tolist())
        """
    )

    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )

    assert child.returncode == 0, child.stderr or child.stdout
    first = [float(value) for value in child.stdout.strip().strip("[]").split(",")]
    assert first[0] == pytest.approx(1.0, abs=1e-3)
    assert max(first[1:]) < 1.0


def test_a_cache_file_that_is_not_a_database_costs_speed_never_a_search(
    semantic, cache_file, caplog
):
    cache_file.write_bytes(b"\x00this is not sqlite\xff" * 100)
    embeddings.configure(semantic_search=True, cache_file=cache_file)
    embeddings.forget_in_memory()
    index = ToolIndex(TEAM_TOOLS)

    hits = index.search("DM priya on slack")

    assert hits[0].tool.name == "chat_send_direct_message"
    assert "embedding cache" in caplog.text


def test_semantic_search_switched_off_encodes_nothing_in_the_background(monkeypatch):
    started = []
    before = (embeddings.enabled, embeddings.cache_path)
    monkeypatch.setattr(embeddings._background, "_kick", lambda: started.append(True))
    embeddings.configure(semantic_search=False, cache_file=None)
    try:
        ToolIndex(TEAM_TOOLS).search("post to a channel")
        _tool("never_encoded", "Registered while semantic search is off.", ToolRegistry())
        assert started == []
    finally:
        monkeypatch.undo()
        embeddings.configure(semantic_search=before[0], cache_file=before[1])


def test_batches_go_shortest_first_and_stay_within_their_token_budget(semantic):
    encoder = embeddings._encoder()
    texts = [("word " * length).strip() for length in (300, 3, 40, 7, 120, 3, 60)] + [
        f"text {n}" for n in range(40)
    ]

    batches = list(encoder._batches(texts))
    lengths = [[encoder.model.token_count(text) for text in batch] for batch in batches]

    assert sorted(text for batch in batches for text in batch) == sorted(texts)
    flat = [length for batch in lengths for length in batch]
    assert flat == sorted(flat)
    for batch in lengths:
        assert len(batch) <= embeddings._BATCH
        assert len(batch) == 1 or len(batch) * max(batch) <= embeddings._BATCH_TOKENS


def test_processes_encoding_the_same_tools_at_once_share_one_cache_file_without_error(
    semantic, tmp_path
):
    cache = tmp_path / "shared.sqlite3"
    script = textwrap.dedent(
        f"""
        from toolhub.tools import embeddings
        embeddings.configure(semantic_search=True, cache_file={str(cache)!r})
        odd = "\\u00e9\\u0000\\U0001f600"
        texts = [f"concurrent tool {{n}}: does thing {{n}} {{odd}}" for n in range(40)]
        index = embeddings.SemanticIndex.build(texts)
        print(len(index._tokens))
        """
    )
    children = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [child.communicate(timeout=180) for child in children]

    assert [child.returncode for child in children] == [0, 0, 0], [err for _, err in outputs]
    assert [out.strip() for out, _ in outputs] == ["40", "40", "40"]
    rows = sqlite3.connect(cache).execute("SELECT COUNT(*) FROM encoding").fetchone()[0]
    # The 40 texts once each, plus whatever built-in tools the background encoded.
    assert rows >= 40
    keys = sqlite3.connect(cache).execute("SELECT COUNT(DISTINCT key) FROM encoding").fetchone()
    assert keys[0] == rows
