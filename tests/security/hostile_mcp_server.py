"""A hostile MCP server for the attack tests, written by hand on stdio (handshake era: it
answers ``server/discover`` with "method not found"), so it can send what the SDK's own
server never would, when it likes. Run as ``python hostile_mcp_server.py --log FILE``:
every line the client sends is appended to FILE, so a test can see what the server was
told and when.

Tools (a call's ``arguments`` steer it):
- ``ask``: sends ``elicitation/create`` with ``arguments["params"]`` as its params (a
  plain form when none; ``<NUL>`` in it goes as a NUL character), waits for the
  client's reply, answers the call with it.
- ``ask_and_go``: sends a form, then answers its call a second later without waiting
  for the form's reply (a server that asked and moved on).
- ``sample``: sends ``sampling/createMessage`` with ``arguments["params"]``, waits for
  the reply, answers the call with the text the client sent back.
- ``hold``: waits until any reply to the server's own requests arrives (or 8 s), then
  answers.
A resource ``note://secret`` is listed; reading it sends a form (and waits for its reply
before answering the read), as a server that asks for a password before a read would.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
from pathlib import Path

SCHEMA = {"type": "object", "properties": {"params": {"type": "object"}}}
TOOLS = ["ask", "ask_and_go", "sample", "hold"]
FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}

_out = threading.Lock()
_ids = itertools.count(1)
# Our own request id -> the call (or read) waiting for its reply, and how to answer it.
_waiting: dict[str, tuple[object, str]] = {}
_holding: list[object] = []


def write(message: dict) -> None:
    with _out:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def result(ident: object, text: str) -> None:
    content = {"content": [{"type": "text", "text": text}], "isError": False}
    write({"jsonrpc": "2.0", "id": ident, "result": content})


def ask(method: str, params: dict, ident: object, kind: str) -> str:
    mine = f"{kind}-{next(_ids)}"
    if ident is not None:
        _waiting[mine] = (ident, kind)
    write({"jsonrpc": "2.0", "id": mine, "method": method, "params": params})
    return mine


def replied(message: dict) -> None:
    ident, kind = _waiting.pop(str(message["id"]), (None, ""))
    if "error" in message:
        said = f"error: {message['error'].get('message')}"
    elif kind == "sample":
        said = f"sampled: {message['result'].get('content', {}).get('text')}"
    else:
        got = message["result"]
        said = f"{got.get('action')} {json.dumps(got.get('content'), sort_keys=True)}"
    if kind == "read":
        text = {"uri": "note://secret", "mimeType": "text/plain", "text": said}
        write({"jsonrpc": "2.0", "id": ident, "result": {"contents": [text]}})
    elif ident is not None:
        result(ident, said)
    while _holding:
        result(_holding.pop(), f"held until: {said}")


def release_later(ident: object, seconds: float) -> None:
    def go() -> None:
        if ident in _holding:
            _holding.remove(ident)
            result(ident, "held: nothing came")

    threading.Timer(seconds, go).start()


def answer(request: dict) -> None:
    method, ident = request.get("method"), request.get("id")
    if method is None and ident is not None:
        replied(request)
        return
    if ident is None:
        return  # a notification (logged)
    params = request.get("params") or {}
    if method == "initialize":
        write(
            {
                "jsonrpc": "2.0",
                "id": ident,
                "result": {
                    "protocolVersion": params["protocolVersion"],
                    "capabilities": {"tools": {}, "resources": {}},
                    "serverInfo": {"name": "hostile", "version": "1"},
                },
            }
        )
    elif method == "tools/list":
        listed = [
            {"name": name, "description": f"The hostile {name}.", "inputSchema": SCHEMA}
            for name in TOOLS
        ]
        write({"jsonrpc": "2.0", "id": ident, "result": {"tools": listed}})
    elif method == "resources/list":
        listed = [{"uri": "note://secret", "name": "secret", "mimeType": "text/plain"}]
        write({"jsonrpc": "2.0", "id": ident, "result": {"resources": listed}})
    elif method == "resources/read":
        ask(
            "elicitation/create",
            {"message": "Password for the note?", "requestedSchema": FORM},
            ident,
            "read",
        )
    elif method == "tools/call":
        name = params.get("name")
        given = (params.get("arguments") or {}).get("params")
        if name == "ask":
            form = given or {"message": "Your name?", "requestedSchema": FORM}
            # "<NUL>" in what the test gave becomes a real NUL on the wire.
            form = json.loads(json.dumps(form).replace("<NUL>", "\\u0000"))
            ask("elicitation/create", form, ident, "ask")
        elif name == "ask_and_go":
            ask(
                "elicitation/create",
                {"message": "Asked, then gone", "requestedSchema": FORM},
                None,
                "go",
            )
            threading.Timer(1.0, result, (ident, "went")).start()
        elif name == "sample":
            ask("sampling/createMessage", given, ident, "sample")
        elif name == "hold":
            _holding.append(ident)
            release_later(ident, 8.0)
        else:
            error = {"code": -32602, "message": f"no tool {name}"}
            write({"jsonrpc": "2.0", "id": ident, "error": error})
    elif method == "ping":
        write({"jsonrpc": "2.0", "id": ident, "result": {}})
    else:
        error = {"code": -32601, "message": f"method not found: {method}"}
        write({"jsonrpc": "2.0", "id": ident, "error": error})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", type=Path, required=True)
    options = parser.parse_args()
    for line in sys.stdin:
        if not line.strip():
            continue
        with options.log.open("a") as log:
            log.write(line.strip() + "\n")
        answer(json.loads(line))


if __name__ == "__main__":
    sys.exit(main())
