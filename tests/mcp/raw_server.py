"""An MCP server written by hand, line by line on stdio, for what the SDK's own server
will not send: tool annotations whose hints are not JSON booleans. Run as a program:
``python tests/mcp/raw_server.py [--counter FILE] [--unparseable]``.

It answers ``server/discover`` with "method not found", so a client falls back to the
``initialize`` handshake, then lists ``TOOLS`` exactly as written here and answers a
call with the tool's name. ``--unparseable`` adds a hint no parser can read as a boolean
(``"maybe"``). ``--counter FILE`` appends a line per executed call. ``--grows`` adds a
tool ``grow`` whose every call adds a tool ``grown_<n>`` and sends
``notifications/tools/list_changed`` before its answer, as handshake-era servers do.
``--bad-listings`` says it has prompts and resources and answers both listings with
what no client can parse. ``--asks`` adds ``hold``, whose call waits, and ``ask``, whose
call sends ``elicitation/create`` on its own, as handshake-era servers do (nothing in it
names the call), then answers every waiting call of the process with what the client
replied (the action and the name given): the careless server a client must survive, on
which one chat's answer would end another's call. ``pid`` answers with its process id.
``busy`` works ``seconds`` without reading its input (no ping is answered meanwhile),
sending a progress notification every fifth of a second: a slow server, not a hung one.
``block`` is ``busy`` without progress: a tool that holds a server taking one request at
a time. ``stick`` never returns and the server reads nothing again, while a thread of it goes on
writing a log line and a line that is not JSON every 0.3 s: a hung server that chatters.
``--stubborn`` ignores SIGTERM and stays after its input closes (only SIGKILL ends it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

SCHEMA = {"type": "object", "properties": {}}
# Name -> the "annotations" member exactly as it goes on the wire.
TOOLS: list[tuple[str, object]] = [
    ("honest_reader", {"readOnlyHint": True}),
    ("quoted_true", {"readOnlyHint": "true"}),
    ("numeric_true", {"readOnlyHint": 1}),
    ("quoted_false", {"readOnlyHint": False, "destructiveHint": "false"}),
    ("null_hints", {"readOnlyHint": None, "destructiveHint": None}),
    ("null_annotations", None),
    # One name listed twice: read-only once, destructive once.
    ("twice", {"readOnlyHint": True}),
    ("twice", {"readOnlyHint": False, "destructiveHint": True}),
]
UNPARSEABLE = ("maybe_reader", {"readOnlyHint": "maybe"})


ASKING = [("hold", None), ("ask", None), ("pid", None), ("busy", None), ("block", None)]
ASKING += [("stick", None)]
FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
# Calls waiting for the client's reply to the server's own request (``--asks``).
WAITING: list[object] = []
GROWN: list[tuple[str, object]] = []
GROW = ("grow", {"readOnlyHint": False, "destructiveHint": False})


def listing(unparseable: bool, grows: bool = False, asks: bool = False) -> list[dict]:
    tools = []
    extra = [*([UNPARSEABLE] if unparseable else []), *([GROW, *GROWN] if grows else [])]
    extra += ASKING if asks else []
    for name, hints in [*TOOLS, *extra]:
        description = f"Annotated as {json.dumps(hints)}."
        tools.append(
            {"name": name, "description": description, "inputSchema": SCHEMA, "annotations": hints}
        )
    return tools


def answer(
    request: dict,
    *,
    unparseable: bool,
    counter: Path | None,
    grows: bool = False,
    bad_listings: bool = False,
    asks: bool = False,
) -> list[dict]:
    method, ident = request.get("method"), request.get("id")
    if ident is None:
        return []  # a notification
    if method is None and ident == "form-1":
        # The client's reply to the server's own request: every waiting call is told it.
        result = request.get("result") or {}
        said = result.get("action") or request.get("error", {}).get("message")
        name = (result.get("content") or {}).get("name")
        text = f"the client said: {said}" + (f" ({name})" if name else "")
        replies = [
            {"jsonrpc": "2.0", "id": call, "result": {"content": [{"type": "text", "text": text}]}}
            for call in WAITING
        ]
        WAITING.clear()
        return replies
    before: list[dict] = []
    if method == "initialize":
        result = {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {
                "tools": {"listChanged": True} if grows else {},
                **({"prompts": {}, "resources": {}} if bad_listings else {}),
            },
            "serverInfo": {"name": "raw", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": listing(unparseable, grows, asks)}
    elif method == "tools/call" and asks and request["params"]["name"] == "pid":
        result = {"content": [{"type": "text", "text": str(os.getpid())}]}
    elif method == "tools/call" and asks and request["params"]["name"] == "stick":
        threading.Thread(target=_chatter, daemon=True).start()
        time.sleep(10**6)
    elif method == "tools/call" and asks and request["params"]["name"] in ("busy", "block"):
        token = (request["params"].get("_meta") or {}).get("progressToken")
        if request["params"]["name"] == "block":
            token = None
        seconds = float((request["params"].get("arguments") or {}).get("seconds", 3))
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            time.sleep(0.2)
            if token is not None:
                done = round(time.monotonic() - started, 1)
                progress = {"progressToken": token, "progress": done, "total": seconds}
                notice = {"jsonrpc": "2.0", "method": "notifications/progress", "params": progress}
                sys.stdout.write(json.dumps(notice) + "\n")
                sys.stdout.flush()
        result = {"content": [{"type": "text", "text": f"worked {seconds:g} s"}]}
    elif method == "tools/call" and asks and request["params"]["name"] in ("hold", "ask"):
        WAITING.append(ident)
        if request["params"]["name"] == "hold":
            return []
        form = {"message": "Your name?", "requestedSchema": FORM}
        return [{"jsonrpc": "2.0", "id": "form-1", "method": "elicitation/create", "params": form}]
    elif method in ("prompts/list", "resources/list") and bad_listings:
        result = {"prompts": "not a list", "resources": [{"uri": 7}]}
    elif method == "tools/call":
        name = request["params"]["name"]
        if counter is not None:
            with counter.open("a") as handle:
                handle.write(name + "\n")
        if grows and name == "grow":
            GROWN.append((f"grown_{len(GROWN)}", {"readOnlyHint": True}))
            before.append({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        result = {"content": [{"type": "text", "text": name}], "isError": False}
    elif method == "ping":
        result = {}
    else:
        error = {"code": -32601, "message": f"method not found: {method}"}
        return [{"jsonrpc": "2.0", "id": ident, "error": error}]
    return [*before, {"jsonrpc": "2.0", "id": ident, "result": result}]


def _chatter() -> None:
    log = {"level": "info", "data": "still here"}
    while True:
        time.sleep(0.3)
        notice = {"jsonrpc": "2.0", "method": "notifications/message", "params": log}
        sys.stdout.write(json.dumps(notice) + "\nthis is not json\n")
        sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--counter", type=Path)
    parser.add_argument("--unparseable", action="store_true")
    parser.add_argument("--grows", action="store_true")
    parser.add_argument("--bad-listings", action="store_true")
    parser.add_argument("--asks", action="store_true")
    parser.add_argument("--stubborn", action="store_true")
    options = parser.parse_args()
    if options.stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for line in sys.stdin:
        if not line.strip():
            continue
        replies = answer(
            json.loads(line),
            unparseable=options.unparseable,
            counter=options.counter,
            grows=options.grows,
            bad_listings=options.bad_listings,
            asks=options.asks,
        )
        for reply in replies:
            sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    if options.stubborn:
        time.sleep(10**6)  # its input closed: it stays all the same


if __name__ == "__main__":
    sys.exit(main())
