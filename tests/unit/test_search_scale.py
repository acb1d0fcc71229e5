"""tool_search among many tools: near-duplicates from other services, the same answer for
the same query, at most the asked number of hits, and the reverse score that tells a tool
the query is about from one that also does something the query never mentions."""

from __future__ import annotations

import dataclasses
import os

import pytest

from toolhub.tools import embeddings, function
from toolhub.tools.search import ToolIndex

SERVICES = ("northwind", "contoso", "fabrikam", "tailspin", "woodgrove", "litware")


def _tool(name: str, description: str):
    def body(**kwargs):
        return kwargs

    schema = {"type": "object", "properties": {"title": {"type": "string"}}}
    return function(
        body, name=name, description=description, parameters=schema, register_globally=False
    )


def _server_tool(server: str, name: str, description: str):
    """A tool as MCP server ``server`` lists it (its source, ``catalog.group_of``)."""
    return dataclasses.replace(
        _tool(f"{server}_{name}", description), origin=f"mcp:{server}", source="mcp"
    )


def _catalog():
    """Each service's tools for the same objects, and one service's calendar tools."""
    tools = []
    for service in SERVICES:
        tools += [
            _tool(f"{service}_create_ticket", f"Create a ticket in the {service} tracker."),
            _tool(f"{service}_close_ticket", f"Close a ticket in the {service} tracker."),
            _tool(f"{service}_list_tickets", f"List the tickets of the {service} tracker."),
            _tool(f"{service}_ticket_history", f"Show the change history of a {service} ticket."),
        ]
    tools.append(_tool("calendar_create_event", "Schedule a new event on a calendar."))
    return tools


@pytest.fixture(params=["with the embedding model", "lexical only"])
def model(request, monkeypatch):
    if request.param == "lexical only":
        monkeypatch.setattr(embeddings, "enabled", False)
    elif not embeddings.available():
        if os.environ.get("TOOLHUB_REQUIRE_SERVICES") == "1":
            pytest.fail("the semantic extra is not installed (make installs it)")
        pytest.skip("the semantic extra is not installed")
    return request.param


@pytest.mark.parametrize("service", SERVICES)
def test_among_near_duplicates_from_other_services_the_one_the_query_names_ranks_first(
    model, service
):
    index = ToolIndex(_catalog())

    hits = index.search(f"close a {service} ticket")

    assert hits[0].tool.name == f"{service}_close_ticket"


def test_a_tool_that_does_only_what_was_asked_ranks_above_one_that_also_does_more(model):
    index = ToolIndex(
        [
            _tool("tracker_close_ticket_history", "Manage the history of closing a ticket."),
            _tool("tracker_close_ticket", "Close a ticket."),
            _tool("mail_send", "Send an email."),
        ]
    )

    assert index.search("close a ticket")[0].tool.name == "tracker_close_ticket"


def test_the_same_query_gives_the_same_results_every_time(model):
    index = ToolIndex(_catalog())
    other = ToolIndex(list(reversed(_catalog())))

    first = [(hit.tool.name, hit.score) for hit in index.search("list tickets", 10)]

    for _ in range(3):
        assert [(hit.tool.name, hit.score) for hit in index.search("list tickets", 10)] == first
    assert [hit.tool.name for hit in other.search("list tickets", 10)] == [n for n, _ in first]


def test_tools_that_score_the_same_are_listed_by_name(model):
    # The same words (so the same text for both rankers), told apart only by their names.
    names = ("close_ticket", "close-ticket", "close__ticket")
    twins = [_tool(name, "Close a ticket in the tracker.") for name in names]

    hits = ToolIndex([*twins, *_catalog()]).search("close a ticket in the tracker")

    assert [hit.tool.name for hit in hits[:3]] == sorted(names)
    assert hits[0].score == hits[1].score


@pytest.mark.parametrize("limit", [1, 3, 5, 8])
def test_a_search_returns_at_most_the_number_of_results_asked_for(model, limit):
    index = ToolIndex(_catalog())

    hits = index.search("ticket", limit)

    assert 1 <= len(hits) <= limit
    assert len({hit.tool.name for hit in hits}) == len(hits)


def test_a_search_asking_for_more_results_than_there_are_related_tools_lists_only_those(model):
    index = ToolIndex(_catalog())

    hits = index.search("schedule a calendar event", 100)

    assert hits[0].tool.name == "calendar_create_event"
    assert len(hits) < 100


def test_the_reverse_score_is_higher_for_a_text_that_says_only_what_the_query_asks(model):
    if model == "lexical only":
        pytest.skip("late interaction is the model's")
    index = embeddings.SemanticIndex.build(
        ["close ticket: Close a ticket.", "close ticket history: Manage the history of a ticket."]
    )
    assert index is not None
    query = index.encode("close a ticket")

    forward, reverse, head = index.interaction(query, [0, 1], [2, 3])

    assert reverse[0] > reverse[1]
    assert head[0] > head[1]
    assert forward[0] >= forward[1]


def test_of_near_copies_the_one_from_the_source_the_query_is_about_ranks_above_a_kitchen_sinks(
    model,
):
    if model == "lexical only":
        pytest.skip("the source score is the model's")
    repositories = [
        ("create_issue", "Create an issue in a repository."),
        ("close_issue", "Close an issue in a repository."),
        ("list_pull_requests", "List the pull requests of a repository."),
        ("merge_pull_request", "Merge a pull request into its base branch."),
        ("list_commits", "List the commits of a repository branch."),
        ("create_branch", "Create a branch in a repository."),
        ("get_file", "Read a file from a repository."),
    ]
    # The same issue tool, from a server about everything (named to sort first, and
    # ranked first without the source score).
    everything = [
        ("create_issue", "Create an issue in a repository."),
        ("send_email", "Send an email to a recipient."),
        ("get_weather", "Get the weather forecast for a city."),
        ("play_song", "Play a song on the speaker."),
        ("book_flight", "Book a flight between two airports."),
        ("convert_currency", "Convert an amount between currencies."),
        ("translate_text", "Translate text into another language."),
    ]
    index = ToolIndex(
        [_server_tool("zeta", *tool) for tool in repositories]
        + [_server_tool("alpha", *tool) for tool in everything]
    )

    hits = index.search("create an issue in the repository")

    assert [hit.tool.name for hit in hits[:2]] == ["zeta_create_issue", "alpha_create_issue"]


def test_a_sources_closeness_to_a_query_is_its_tools_mean_closeness_so_a_kitchen_sink_is_far(
    model,
):
    """Normalizing the mean of a kitchen-sink server's varied tools would magnify what all
    tool texts share, and bring that server close to every vague query (measured at 1,000
    tools: a third of the misses)."""
    if model == "lexical only":
        pytest.skip("the source score is the model's")
    documents = [
        "check url: Check whether a web site answers from several regions.",
        "list monitors: List the uptime monitors and their state.",
        "send email: Send an email to a recipient.",
        "play song: Play a song on the speaker.",
        "book flight: Book a flight between two airports.",
        "convert currency: Convert an amount between currencies.",
        "translate text: Translate text into another language.",
    ]
    index = embeddings.SemanticIndex.build(documents)
    assert index is not None
    np = index.np
    groups = np.asarray([0, 0, 1, 1, 1, 1, 1])
    query = index.encode("can customers abroad reach our web site right now")

    closeness = index.centroids(groups, 2) @ query.vector
    sentence = index.sentence(query)

    assert closeness[0] == pytest.approx(float(sentence[:2].mean()), abs=1e-5)
    assert closeness[1] == pytest.approx(float(sentence[2:].mean()), abs=1e-5)
    assert closeness[0] > closeness[1]


def _company_and_billing(*company_tools, unprefixed=()):
    """A billing server about one thing, and a company's server about everything (its
    ``unprefixed`` tools' names do not start with the server's)."""
    billing = [
        ("list_invoices", "List the invoices of a customer."),
        ("create_invoice", "Create an invoice for a customer."),
        ("charge_payment", "Charge a customer's saved payment method."),
    ]
    company = [
        *company_tools,
        ("send_email", "Send an email to a recipient (the Northwind service)."),
        ("get_weather", "Get the weather forecast for a city (the Northwind service)."),
        ("play_song", "Play a song on the speaker (the Northwind service)."),
        ("book_flight", "Book a flight between two airports (the Northwind service)."),
    ]
    return ToolIndex(
        [_server_tool("billing", *tool) for tool in billing]
        + [_server_tool("northwind", *tool) for tool in company]
        + [
            dataclasses.replace(_tool(*tool), origin="mcp:northwind", source="mcp")
            for tool in unprefixed
        ]
    )


def test_a_source_the_query_names_counts_once_for_the_source_not_for_a_tool_doing_something_else(
    model,
):
    if model == "lexical only":
        pytest.skip("the name is taken out of what the model encodes")
    index = _company_and_billing(
        ("archive_invoice", "Archive an invoice of a customer (the Northwind service).")
    )

    hits = index.search("show the invoices of Northwind")

    assert hits[0].tool.name == "billing_list_invoices"


def test_of_two_tools_doing_what_was_asked_the_one_from_the_source_the_query_names_ranks_first(
    model,
):
    if model == "lexical only":
        pytest.skip("the name is taken out of what the model encodes")
    # Its tool says just what billing's does; the name is all that tells them apart.
    index = _company_and_billing(
        ("archive_invoice", "Archive an invoice of a customer (the Northwind service)."),
        unprefixed=[("invoices", "List the invoices of a customer.")],
    )

    hits = index.search("show the invoices of Northwind")

    assert hits[0].tool.name == "invoices"
