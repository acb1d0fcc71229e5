"""An MCP server for the tests and the benchmark, built with the SDK's ``MCPServer``
(mcp 2's name for FastMCP). Run as a program: ``python tests/mcp/server.py --transport
stdio`` or ``--transport http --port N``.

Its tools cover what the client must handle: a schema to validate against, progress
notifications, the server's own error results, an image, a slow call, a description far
longer than a prompt should carry, text that must come back byte for byte, a result of
any length, and ``--tools N`` generated no-op tools. ``--shuffle`` lists the tools in a
random order and ``--page-size`` splits the listing into pages behind cursors, so the
client's ordering and pagination are exercised against a real server. ``--counter FILE``
appends a line per executed call, so a test can prove a call never reached the server;
``--refuse-if FILE`` exits at start while FILE exists, so a restart can be made to fail.
``--lively`` adds ``grow`` (adds a tool and sends list_changed), ``shout`` (sends a log
message), two resources (a text with CRLF and joiners, a PNG), ``linked`` (a result
that links to the text), ``report`` (a PDF as an embedded blob resource and a recording as
audio: files for the person) and two prompts, ``review`` (code, focus) and ``hello``;
``--instructions TEXT`` is what the server tells a client about its tools. ``--asking``
adds tools that ask the client mid-call: ``sign_in_visitor`` (a form for the person),
``sum_up`` (a completion from the client's model), ``show_roots`` (the client's roots) and
``whoami`` (the ``X-Person-Token`` header, or ``PERSON_TOKEN`` over stdio),
through the SDK's resolvers, which ask in whichever way the protocol version has.
``--annotated`` adds tools carrying MCP annotations (read-only, destructive, additive, and
hints left to their defaults); the fixed tools have none. (A server whose hints are not
booleans on the wire is ``raw_server.py``: this SDK's server corrects them before they
are sent.)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import random
import sys
from pathlib import Path
from typing import Annotated, Literal, TypedDict

from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    ListRoots,
    MCPServer,
    Resolve,
    Sample,
)
from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CreateMessageResult,
    EmbeddedResource,
    ImageContent,
    ListRootsResult,
    ListToolsResult,
    PaginatedRequestParams,
    ResourceLink,
    SamplingMessage,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel, Field

LONG_DESCRIPTION = "Summarise a document. " + "This sentence pads the description. " * 200
# What a file of a person's can hold that a filter for names would strip: CR, an emoji
# family (ZWJ), Persian with a ZWNJ, right-to-left and embedding marks, a tab.
EXACT_TEXT = (
    "first line\r\nfamily \U0001f468\u200d\U0001f469\u200d\U0001f467 and "
    "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645\u200f \u202aembedded\u202c\tend\r\n"
)


def big(chars: int) -> str:
    """``chars`` characters: HEAD first, numbered lines between, TAIL-END last."""
    body = "".join(f"line {n:08d}\n" for n in range(chars // 14 + 1))
    return "HEAD\n" + body[: chars - len("HEAD\n") - len("TAIL-END")] + "TAIL-END"


class Weather(TypedDict):
    city: str
    degrees: int


# What a server's PDF begins and ends as (no model takes one), and a WAV header: files a
# tool offers the person, whose bytes must arrive exactly.
REPORT_PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj <</Type /Catalog>> endobj\n\x00\xff\n%%EOF\n"
REPORT_URI = "blob://reports/q3%20summary"
RECORDING_WAV = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00"

# A real 1x1 PNG, a blue pixel: what a browser can draw and a provider can read.
PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGOwjr4NAAJGAXI6KKUbAAAAAElFTkSuQmCC"
)


class PagedServer(MCPServer):
    """Lists its tools in pages (and, with ``shuffle``, in a new random order each time)."""

    def __init__(self, *args, page_size: int = 0, shuffle: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.page_size = page_size
        self.shuffle = shuffle
        self.seed = random.random()

    async def _handle_list_tools(
        self, ctx, params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        tools = await self.list_tools()
        if self.shuffle:
            # One order per process: pages of one listing must not overlap.
            random.Random(self.seed).shuffle(tools)
        if not self.page_size:
            return ListToolsResult(tools=tools)
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + self.page_size
        return ListToolsResult(
            tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None
        )


def build(
    *,
    tools: int,
    page_size: int,
    shuffle: bool,
    counter: Path | None,
    annotated: bool = False,
    lively: bool = False,
    instructions: str | None = None,
    asking: bool = False,
) -> MCPServer:
    server = PagedServer(
        "toolhub-test",
        page_size=page_size,
        shuffle=shuffle,
        log_level="ERROR",
        instructions=instructions,
    )

    def count(name: str) -> None:
        if counter is not None:
            with counter.open("a") as handle:
                handle.write(name + "\n")

    @server.tool(description="Add two whole numbers.")
    def add(a: Annotated[int, Field(ge=0)], b: int) -> str:
        count("add")
        return str(a + b)

    @server.tool(description="Repeat a text back.")
    def echo(text: str) -> str:
        count("echo")
        return text

    @server.tool(description="Count up to a number, reporting progress at each step.")
    async def count_up(steps: int, ctx: Context) -> str:
        count("count_up")
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step} of {steps}")
            await asyncio.sleep(0.05)
        return f"counted to {steps}"

    @server.tool(description="Always fails with the server's own error.")
    def explode() -> str:
        count("explode")
        raise ValueError("the reactor is offline")

    @server.tool(description="Return a tiny picture and a caption.")
    def picture() -> list:
        count("picture")
        return [
            TextContent(type="text", text="a caption"),
            ImageContent(type="image", data=PIXEL, mime_type="image/png"),
        ]

    # The server asks for this one to stay resident (toolhub's _meta key).
    @server.tool(description="The server's process id.", meta={"toolhub/defer": False})
    def pid() -> str:
        return str(os.getpid())

    @server.tool(description="Read a variable of the server's own environment.")
    def getenv(name: str) -> str:
        return os.environ.get(name, "<unset>")

    @server.tool(description="Sleep for some seconds.")
    async def sleep(seconds: float) -> str:
        count("sleep")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            count("sleep-cancelled")  # the client's cancel reached the server
            raise
        return "slept"

    @server.tool(description="Read a text that has CRLF, joiners and bidi marks in it.")
    def exact_text() -> str:
        count("exact_text")
        return EXACT_TEXT

    @server.tool(description="A text of this many characters, marked at its head and tail.")
    def big_text(chars: int) -> str:
        count("big_text")
        return big(chars)

    @server.tool(description=LONG_DESCRIPTION)
    def summarise(text: str) -> str:
        count("summarise")
        return text[:20]

    @server.tool(
        name="bad\x1bname.tool", description="Desc\x07ription with\x00 control characters."
    )
    def odd() -> str:
        count("odd")
        return "odd"

    for index in range(tools):

        def noop(index: int = index) -> str:
            return "ok"

        server.add_tool(noop, name=f"noop_{index:03d}", description=f"Do nothing, number {index}.")
    if annotated:
        _annotated_tools(server, count)
    if lively:
        _lively_tools(server)
    if asking:
        _asking_tools(server)
    return server


def _lively_tools(server: PagedServer) -> None:
    @server.tool(description="Add a tool named grown_<name> and tell the client at once.")
    async def grow(name: str, ctx: Context) -> str:
        def grown() -> str:
            return f"grown {name}"

        server.add_tool(grown, name=f"grown_{name}", description=f"A tool grown as {name}.")
        await ctx.notify_tools_changed()
        return f"grew grown_{name}"

    @server.resource(
        "note://greeting", name="greeting", description="A friendly note.", mime_type="text/plain"
    )
    def greeting() -> str:
        return EXACT_TEXT

    @server.resource("blob://pixel", name="pixel", mime_type="image/png")
    def pixel() -> bytes:
        return base64.b64decode(PIXEL)

    @server.prompt(title="Review code", description="Ask for a review of some code.")
    def review(code: str, focus: str = "bugs") -> str:
        return f"Please review this code for {focus}:\n\n{code}"

    @server.prompt(description="Say hello.")
    def hello() -> str:
        return "Hello from the lively server."

    @server.tool(description="Return a PNG that says it is a JPEG.")
    def mislabelled() -> list:
        return [ImageContent(type="image", data=PIXEL, mime_type="image/jpeg")]

    @server.tool(description="The weather, as structured content.")
    def weather() -> Weather:
        return Weather(city="Oslo", degrees=-3)

    @server.tool(description="Point at the greeting rather than return it.")
    def linked() -> list:
        return [
            ResourceLink(
                type="resource_link", uri="note://greeting", name="greeting", mime_type="text/plain"
            )
        ]

    @server.tool(description="The quarterly report as a PDF, and a recording of it read out.")
    def report() -> list:
        pdf = BlobResourceContents(
            uri=REPORT_URI,
            mime_type="application/pdf",
            blob=base64.b64encode(REPORT_PDF).decode(),
        )
        return [
            TextContent(type="text", text="Here is the report."),
            EmbeddedResource(type="resource", resource=pdf),
            AudioContent(
                type="audio", data=base64.b64encode(RECORDING_WAV).decode(), mime_type="audio/wav"
            ),
        ]

    @server.tool(description="Send a log message at a level.")
    async def shout(text: str, level: str, ctx: Context) -> str:
        await ctx.log(level, text, logger_name="shouter")
        return "shouted"


class Visitor(BaseModel):
    """The form ``sign_in_visitor`` asks a person to fill in."""

    name: str = Field(description="Your name", min_length=1, max_length=40)
    age: int = Field(description="Your age in years", ge=0, le=150)
    colour: Literal["red", "green", "blue"] = Field(description="A colour you like")
    newsletter: bool = Field(default=False, description="Send me the newsletter")


async def _visitor(ctx: Context) -> Elicit[Visitor]:
    return Elicit("Who is visiting? (asked by toolhub-test)", Visitor)


async def _summary(text: str) -> Sample:
    return Sample(
        [SamplingMessage(role="user", content=TextContent(type="text", text=f"Sum up: {text}"))],
        max_tokens=200,
        system_prompt="Answer in one short sentence.",
    )


async def _roots() -> ListRoots:
    return ListRoots()


def _asking_tools(server: PagedServer) -> None:
    @server.tool(description="Ask the person who is visiting, with a form.")
    async def sign_in_visitor(
        visitor: Annotated[ElicitationResult[Visitor], Resolve(_visitor)],
    ) -> str:
        if not isinstance(visitor, AcceptedElicitation):
            return f"no visitor: the person chose {visitor.action}"
        data = visitor.data
        news = "with" if data.newsletter else "without"
        return f"welcome {data.name}, {data.age}, who likes {data.colour}, {news} newsletter"

    @server.tool(description="Sum a text up by asking the client's model.")
    async def sum_up(text: str, answer: Annotated[CreateMessageResult, Resolve(_summary)]) -> str:
        content = answer.content
        said = content.text if isinstance(content, TextContent) else "(no text)"
        return f"the model ({answer.model}) said: {said}"

    @server.tool(description="Whose credential this call came with.")
    async def whoami(ctx: Context) -> str:
        headers = ctx.headers or {}
        return headers.get("x-person-token") or os.environ.get("PERSON_TOKEN") or "(nobody)"

    @server.tool(description="The roots the client gave this server.")
    async def show_roots(listed: Annotated[ListRootsResult, Resolve(_roots)]) -> str:
        return "\n".join(str(root.uri) for root in listed.roots) or "(no roots)"


def _annotated_tools(server: PagedServer, count) -> None:
    @server.tool(
        description="Look up a stored value.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    def look(key: str) -> str:
        count("look")
        return f"value of {key}"

    @server.tool(
        description="Delete every stored value.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    def wipe() -> str:
        count("wipe")
        return "wiped"

    @server.tool(
        description="Append a value; never changes what is there.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    def append(value: str) -> str:
        count("append")
        return f"appended {value}"

    # Annotations with a title only: both hints keep the spec's defaults (destructive).
    @server.tool(description="Tidy the store.", annotations=ToolAnnotations(title="Tidy"))
    def tidy() -> str:
        count("tidy")
        return "tidied"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--page-size", type=int, default=0)
    parser.add_argument("--shuffle", action="store_true")
    parser.add_argument("--counter", type=Path)
    parser.add_argument("--annotated", action="store_true")
    parser.add_argument("--refuse-if", type=Path)
    parser.add_argument("--lively", action="store_true")
    parser.add_argument("--instructions")
    parser.add_argument("--asking", action="store_true")
    options = parser.parse_args()
    if options.refuse_if is not None and options.refuse_if.exists():
        # A test keeps a stdio server down this way: every restart fails until it is gone.
        return 1
    server = build(
        tools=options.tools,
        page_size=options.page_size,
        shuffle=options.shuffle,
        counter=options.counter,
        annotated=options.annotated,
        lively=options.lively,
        instructions=options.instructions,
        asking=options.asking,
    )
    if options.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=options.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
