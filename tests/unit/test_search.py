"""tool_search's index: exact selection, a lexical ranker that holds for any catalog, and
the semantic ranker fused on top when the model is installed."""

from __future__ import annotations

import os

import pytest

from toolhub.tools import embeddings, function
from toolhub.tools.search import ToolIndex, stem, tokens


def _tool(name, description, **params):
    def body(**kwargs):
        return kwargs

    schema = {
        "type": "object",
        "properties": {
            key: {"type": "string", "description": text} for key, text in params.items()
        },
    }
    return function(
        body, name=name, description=description, parameters=schema, register_globally=False
    )


CATALOG = [
    _tool("repo_list_issues", "List issues in a repository, filtered by label or state."),
    _tool("weather_forecast", "Forecast of temperature and rain for a city.", city="City name"),
    _tool("convert_currency", "Convert an amount of money into another currency."),
    _tool("fsReadFile", "Read a file from disk.", path="Path of the file"),
    _tool("issue", "Open a single issue."),
]


def test_names_split_on_underscores_dots_dashes_and_case_and_words_are_stemmed():
    assert tokens("fs.readFile") == ["fs", "read", "file"]
    assert tokens("get-HTTPStatus_codes") == ["get", "http", "status", "code"]
    forms = [("files", "file"), ("batches", "batch"), ("created", "creating", "create")]
    for group in forms:
        assert len({stem(word) for word in group}) == 1, group
    assert stem("status") != stem("statu")
    assert stem("running") == stem("run")


def test_lexical_search_matches_word_forms_across_name_description_and_parameters():
    index = ToolIndex(CATALOG)

    hits = index.search("listing repository issues", 2, mode="lexical")
    by_form = [hit.tool.name for hit in hits]
    by_param = [hit.tool.name for hit in index.search("which city", 1, mode="lexical")]

    assert by_form[0] == "repo_list_issues"
    assert by_param == ["weather_forecast"]


def test_an_exact_tool_name_is_always_first():
    index = ToolIndex(CATALOG)

    for mode in index.modes:
        assert index.search("issue", 3, mode=mode)[0].tool.name == "issue"


def test_lexical_search_finds_nothing_for_unrelated_words():
    assert ToolIndex(CATALOG).search("quantum chromodynamics", 5, mode="lexical") == []


def test_select_keeps_the_asked_order_and_reports_unknown_names():
    found, missing = ToolIndex(CATALOG).select(["convert_currency", "nope", "issue", "issue"])

    assert [tool.name for tool in found] == ["convert_currency", "issue"]
    assert missing == ["nope"]


@pytest.fixture
def semantic():
    if not embeddings.available():
        if os.environ.get("TOOLHUB_REQUIRE_SERVICES") == "1":
            pytest.fail("the semantic extra is not installed (make installs it)")
        pytest.skip("the semantic extra is not installed")


def test_the_semantic_ranker_finds_a_paraphrase_that_shares_no_word(semantic):
    index = ToolIndex(CATALOG)

    lexical = index.search("is it going to be wet outside later", 5, mode="lexical")
    semantic_top = index.search("is it going to be wet outside later", 1, mode="semantic")
    hybrid_top = index.search("how many euros is fifty dollars", 1, mode="hybrid")

    assert "weather_forecast" not in [hit.tool.name for hit in lexical]
    assert semantic_top[0].tool.name == "weather_forecast"
    assert hybrid_top[0].tool.name == "convert_currency"
    assert index.modes == ("lexical", "semantic", "hybrid")


def test_token_similarity_of_a_text_to_itself_is_one(semantic):
    index = embeddings.SemanticIndex.build(["forecast of rain for a city", "convert money"])

    similarities = index.similarities("forecast of rain for a city")

    assert similarities.token[0] == pytest.approx(1.0, abs=1e-2)
    assert similarities.token[1] < similarities.token[0]
    assert similarities.sentence[1] < similarities.sentence[0]


def test_a_query_with_no_word_of_its_own_still_gets_an_answer_in_every_mode(semantic):
    index = ToolIndex(CATALOG)

    for mode in index.modes:
        for query in ("", "?!"):
            assert isinstance(index.search(query, 3, mode=mode), list)


def test_with_semantic_search_switched_off_the_index_is_lexical_only(monkeypatch):
    monkeypatch.setattr(embeddings, "enabled", False)

    index = ToolIndex(CATALOG)

    assert index.modes == ("lexical",)
    assert index.search("convert money", 1)[0].tool.name == "convert_currency"
