"""What tool_search costs and where: the glossary's words a query implies, encodings made
in the background when tools register, kept on disk for other processes, and a turn that
never waits for the model before its first search."""

from __future__ import annotations

import gc
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import weakref
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import plain_tool
from toolhub.tools import (
    ToolRegistry,
    embedding_cache,
    embedding_model,
    embeddings,
    glossary,
    token_store,
)
from toolhub.tools.resolve import resolve
from toolhub.tools.search import ToolIndex, document_text
from toolhub.tools.turn import TurnTools

_tool = plain_tool


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


# Where the tests' processes keep the rewritten model: the suite rewrites it once, not
# once per temporary cache file.
MODEL_DIR = embeddings.rewritten_dir or Path(tempfile.gettempdir()) / "toolhub-test-models"


@pytest.fixture
def cache_file(tmp_path):
    path = tmp_path / "encodings.sqlite3"
    before = (embeddings.enabled, embeddings.cache_path, embeddings.rewritten_dir)
    embeddings.configure(semantic_search=embeddings.enabled, cache_file=path, model_dir=MODEL_DIR)
    embeddings.forget_in_memory()
    yield path
    embeddings.configure(semantic_search=before[0], cache_file=before[1], model_dir=before[2])


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
    # As in a serving process, the tools register before the background starts. What
    # earlier tests of this process queued is dropped: encoded afresh into this test's
    # empty cache it cost up to 40 s, and it is not what this test is about.
    embeddings._background.stop()
    assert embeddings.wait_prepared(timeout=60)
    registry = ToolRegistry()
    tools = [
        _tool(f"bg_tool_{n}", f"Background encoding check {n} of a tool.", registry)
        for n in range(5)
    ]
    embeddings.start()

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


@pytest.mark.processes
def test_another_process_reads_the_encodings_from_disk_without_running_the_model(
    semantic, cache_file
):
    tools = [_tool(f"disk_tool_{n}", f"Shared on disk, tool number {n}.") for n in range(3)]
    ToolIndex(tools).search("shared on disk")
    texts = [document_text(tool) for tool in tools]
    script = textwrap.dedent(
        f"""
        from toolhub.tools import embeddings
        from toolhub.tools.embedding_model import Encoding
        embeddings.configure(
            semantic_search=True, cache_file={str(cache_file)!r}, model_dir={str(MODEL_DIR)!r}
        )
        encoder = embeddings._encoder()
        def refuse(texts, **kwargs):
            raise SystemExit("the model ran for " + repr(texts))
        encoder.model.encode = refuse
        index = embeddings.SemanticIndex.build({texts!r})
        print(index.sentence(Encoding(index._vectors[0], None)).round(3).tolist())
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
    embeddings.configure(semantic_search=True, cache_file=cache_file, model_dir=MODEL_DIR)
    embeddings.forget_in_memory()
    index = ToolIndex(TEAM_TOOLS)

    hits = index.search("DM priya on slack")

    assert hits[0].tool.name == "chat_send_direct_message"
    assert "embedding cache" in caplog.text


def test_semantic_search_switched_off_encodes_nothing_in_the_background(monkeypatch):
    started = []
    before = (embeddings.enabled, embeddings.cache_path, embeddings.rewritten_dir)
    monkeypatch.setattr(embeddings._background, "_kick", lambda: started.append(True))
    embeddings.configure(semantic_search=False, cache_file=None)
    try:
        ToolIndex(TEAM_TOOLS).search("post to a channel")
        _tool("never_encoded", "Registered while semantic search is off.", ToolRegistry())
        assert started == []
    finally:
        monkeypatch.undo()
        embeddings.configure(semantic_search=before[0], cache_file=before[1], model_dir=before[2])


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
        assert len(batch) <= embedding_cache._BATCH
        assert len(batch) == 1 or len(batch) * max(batch) <= embedding_cache._BATCH_TOKENS


@pytest.mark.processes
def test_processes_encoding_the_same_tools_at_once_share_one_cache_file_without_error(
    semantic, tmp_path
):
    cache = tmp_path / "shared.sqlite3"
    script = textwrap.dedent(
        f"""
        from toolhub.tools import embeddings
        embeddings.configure(
            semantic_search=True, cache_file={str(cache)!r}, model_dir={str(MODEL_DIR)!r}
        )
        odd = "\\u00e9\\u0000\\U0001f600"
        texts = [f"concurrent tool {{n}}: does thing {{n}} {{odd}}" for n in range(40)]
        index = embeddings.SemanticIndex.build(texts)
        print(len(index._texts))
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
    rows = sqlite3.connect(cache).execute("SELECT COUNT(*) FROM encodings").fetchone()[0]
    # The 40 texts once each, plus whatever built-in tools the background encoded.
    assert rows >= 40
    keys = sqlite3.connect(cache).execute("SELECT COUNT(DISTINCT key) FROM encodings").fetchone()
    assert keys[0] == rows


# --- the rewritten model and compact token vectors


def _child(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


_SEARCH_IN_A_NEW_PROCESS = """
    import logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    from toolhub.tools import embeddings
    embeddings.configure(semantic_search=True, cache_file={cache!r}, model_dir={models!r})
    index = embeddings.SemanticIndex.build(["Post a message to a channel.", "Delete a file."])
    query = index.encode("send a note to the team channel")
    print(embeddings._encoder().model.tag.split("/")[0])
    print(index.sentence(query).argmax())
"""


@pytest.mark.processes
def test_the_model_is_rewritten_once_per_machine_into_one_a_quarter_of_the_float_size(
    semantic, tmp_path
):
    models = tmp_path / "models"
    script = _SEARCH_IN_A_NEW_PROCESS.format(cache=str(tmp_path / "c.sqlite3"), models=str(models))

    first = _child(script)
    made = embedding_model.rewritten_model(models)
    inode = made.stat().st_ino
    second = _child(script)

    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert (
        first.stdout.split() == second.stdout.split() == [f"{embedding_model.MODEL}-dynamic", "0"]
    )
    assert "rewriting the embedding model" in first.stderr
    assert "rewriting the embedding model" not in second.stderr
    assert made.stat().st_ino == inode
    # int8 weights: the packaged model's weights folded to float32 take ~90 MB.
    assert made.stat().st_size < 30_000_000
    assert [path.name for path in models.iterdir() if not path.name.endswith(".lock")] == [
        made.name
    ]


@pytest.mark.processes
def test_a_rewritten_model_that_does_not_load_is_removed_and_the_packaged_one_answers(
    semantic, tmp_path
):
    models = tmp_path / "models"
    models.mkdir()
    broken = embedding_model.rewritten_model(models)
    broken.write_bytes(b"\x00not a model\xff" * 64)
    script = _SEARCH_IN_A_NEW_PROCESS.format(cache=str(tmp_path / "c.sqlite3"), models=str(models))

    child = _child(script)

    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == [embedding_model.MODEL, "0"]
    assert "did not load; running the packaged one" in child.stderr
    assert not broken.exists()


@pytest.mark.processes
def test_a_model_directory_that_cannot_be_made_leaves_the_packaged_model_answering(
    semantic, tmp_path
):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    script = _SEARCH_IN_A_NEW_PROCESS.format(
        cache=str(tmp_path / "c.sqlite3"), models=str(blocker / "models")
    )

    child = _child(script)

    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == [embedding_model.MODEL, "0"]
    assert "could not be rewritten" in child.stderr


def test_a_tool_texts_token_vectors_kept_as_int8_score_as_the_float_ones(semantic):
    encoder = embeddings._encoder()
    np = encoder.np
    texts = [tool.description for tool in TEAM_TOOLS]
    full = encoder.model.encode(texts)
    compact = [item.compact(np) for item in full]
    query = encoder.query("tell priya something privately")

    for item, small in zip(full, compact, strict=True):
        assert small.tokens.dtype == np.int8
        assert small.tokens.nbytes * 4 == item.tokens.nbytes
        assert np.abs(small.widened(np) - item.tokens).max() < 0.01
    exact = embeddings.SemanticIndex(encoder, texts, full).token(query, range(len(texts)))
    kept = embeddings.SemanticIndex(encoder, texts, compact).token(query, range(len(texts)))
    assert np.abs(exact - kept).max() < 0.01
    assert exact.argmax() == kept.argmax() == texts.index("Send a private message to one person.")


def test_a_search_while_the_model_is_still_loading_ranks_lexically_instead_of_waiting(
    semantic, monkeypatch
):
    monkeypatch.setattr(embeddings, "_SEARCH_WAIT_SECONDS", 0.2)
    index = ToolIndex(TEAM_TOOLS)
    # Another thread is loading (or rewriting) the model.
    assert embeddings._load_lock.acquire(timeout=10)
    try:
        hits = index.search("post a message to a channel")
    finally:
        embeddings._load_lock.release()

    assert hits[0].tool.name == "chat_send_message"
    assert index.modes == ("lexical",)
    assert ToolIndex(TEAM_TOOLS).modes == ("lexical", "semantic", "hybrid")


def _scores_as_held(index, texts, query):
    """Whether ``index`` scores ``query`` as an index that holds its token vectors does."""
    encoder = embeddings._encoder()
    held = embeddings.SemanticIndex(encoder, texts, encoder.documents(texts))
    rows = list(range(len(texts)))
    return (
        index.interaction(query, rows, [2] * len(rows))
        == held.interaction(query, rows, [2] * len(rows))
    ).all()


def test_an_index_over_a_disk_cache_holds_no_token_vectors_and_scores_as_one_that_does(
    semantic, cache_file, monkeypatch
):
    texts = [tool.description for tool in TEAM_TOOLS]
    reading = embeddings.SemanticIndex.build(texts)
    # Memory keeps one encoding: the others are read from the file when scored.
    monkeypatch.setattr(embedding_cache, "_MEMORY_ENTRIES_WITH_DISK", 1)
    embeddings.forget_in_memory()
    query = embeddings._encoder().query("tell priya something privately")

    assert reading is not None
    assert reading._encoded == []
    assert reading._stored is not None
    assert _scores_as_held(reading, texts, query)


def test_a_token_file_cut_short_under_an_index_costs_speed_never_a_search(
    semantic, cache_file, caplog
):
    texts = [tool.description for tool in TEAM_TOOLS]
    reading = embeddings.SemanticIndex.build(texts)
    query = embeddings._encoder().query("tell priya something privately")
    assert reading is not None
    assert reading._stored is not None
    generation = reading._stored.generation
    os.ftruncate(generation.descriptor, 100)

    assert _scores_as_held(reading, texts, query)
    assert reading._stored is None
    assert "token file read failed" in caplog.text
    # The next index starts a fresh file rather than trust the one cut short.
    later = embeddings.SemanticIndex.build(texts)
    assert later is not None
    assert later._stored is not None
    assert later._stored.generation is not generation


def test_an_index_whose_token_file_cannot_be_made_reads_the_encoding_cache_instead(
    semantic, cache_file, monkeypatch, caplog
):
    def no_file(*args, **kwargs):
        raise OSError("no space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", no_file)
    texts = [tool.description for tool in TEAM_TOOLS]
    reading = embeddings.SemanticIndex.build(texts)
    query = embeddings._encoder().query("tell priya something privately")

    assert reading is not None
    assert reading._stored is None
    assert "no token file for an index" in caplog.text
    assert _scores_as_held(reading, texts, query)


def test_an_index_without_a_disk_cache_holds_its_token_vectors_and_has_no_token_file(semantic):
    before = (embeddings.enabled, embeddings.cache_path, embeddings.rewritten_dir)
    embeddings.configure(semantic_search=True, cache_file=None, model_dir=MODEL_DIR)
    try:
        texts = [tool.description for tool in TEAM_TOOLS]
        index = embeddings.SemanticIndex.build(texts)
    finally:
        embeddings.configure(semantic_search=before[0], cache_file=before[1], model_dir=before[2])

    assert index is not None
    assert index._stored is None
    assert len(index._encoded) == len(texts)


@pytest.fixture
def store(monkeypatch):
    """A token store of the test's own, so what other tests placed does not count."""
    fresh = token_store.TokenStore()
    monkeypatch.setattr(token_store, "_store", fresh)
    return fresh


def _rows(index):
    """Where ``index``'s documents are in the token store (it has them there)."""
    assert index is not None
    assert index._stored is not None
    return index._stored


def test_two_indexes_over_the_same_tools_in_one_process_share_the_token_store(
    semantic, cache_file, store
):
    texts = [tool.description for tool in TEAM_TOOLS]
    first = embeddings.SemanticIndex.build(texts)
    size = store.size()
    # Other resolutions of the same tools: another profile's order, a toggle's subset.
    second = embeddings.SemanticIndex.build(texts[::-1])
    third = embeddings.SemanticIndex.build(texts[:3])

    assert size > 0
    assert store.size() == size
    assert _rows(first).generation is _rows(second).generation
    assert _rows(third).generation is _rows(first).generation
    query = embeddings._encoder().query("tell priya something privately")
    assert _scores_as_held(second, texts[::-1], query)
    assert _scores_as_held(third, texts[:3], query)


def test_a_new_text_appended_after_an_index_was_built_does_not_disturb_its_reads(
    semantic, cache_file, store
):
    texts = [tool.description for tool in TEAM_TOOLS]
    first = embeddings.SemanticIndex.build(texts[:3])
    size = store.size()
    grown = embeddings.SemanticIndex.build(texts)

    assert _rows(grown).generation is _rows(first).generation
    assert store.size() > size
    query = embeddings._encoder().query("tell priya something privately")
    assert _scores_as_held(first, texts[:3], query)
    assert _scores_as_held(grown, texts, query)


def test_indexes_built_from_several_threads_at_once_write_each_text_once_and_read_it_whole(
    semantic, cache_file, store, monkeypatch
):
    texts = [tool.description for tool in TEAM_TOOLS]
    assert embeddings.SemanticIndex.build(texts) is not None
    size = store.size()
    # Another store of the test's own, for the threads (the fixture restores the first).
    store_alone = token_store.TokenStore()
    monkeypatch.setattr(token_store, "_store", store_alone)
    built = []

    def build(order):
        built.append((order, embeddings.SemanticIndex.build(order)))

    threads = [threading.Thread(target=build, args=(texts[k:] + texts[:k],)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert store_alone.size() == size
    query = embeddings._encoder().query("tell priya something privately")
    for order, index in built:
        assert _rows(index).generation is _rows(built[0][1]).generation
        assert _scores_as_held(index, order, query)


def test_a_build_past_the_stores_bound_starts_a_new_generation_and_an_old_index_still_reads(
    semantic, cache_file, store, monkeypatch
):
    monkeypatch.setattr(token_store, "_GENERATION_BYTES", 1)
    texts = [tool.description for tool in TEAM_TOOLS]
    old = embeddings.SemanticIndex.build(texts)
    new = embeddings.SemanticIndex.build(texts)

    assert _rows(new).generation is not _rows(old).generation
    # The new generation has every text again; the old one is written no more.
    assert store.size() == _rows(old).generation.end
    assert not _rows(old).generation.file.closed
    query = embeddings._encoder().query("tell priya something privately")
    assert _scores_as_held(old, texts, query)
    assert _scores_as_held(new, texts, query)


def test_a_generation_no_index_uses_any_more_is_closed(semantic, cache_file, store, monkeypatch):
    monkeypatch.setattr(token_store, "_GENERATION_BYTES", 1)
    texts = [tool.description for tool in TEAM_TOOLS]
    old = embeddings.SemanticIndex.build(texts)
    generation = weakref.ref(_rows(old).generation)
    inode = _inode(_rows(old).generation.descriptor)
    new = embeddings.SemanticIndex.build(texts)
    assert _rows(new).generation is not generation()

    del old
    gc.collect()

    assert generation() is None
    # Its file went with it: no descriptor of the process opens it any more.
    assert inode not in _open_inodes()


def _inode(descriptor):
    status = os.fstat(descriptor)
    return status.st_dev, status.st_ino


def _open_inodes():
    inodes = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            inodes.add(_inode(int(name)))
        except OSError:
            continue
    return inodes
