"""``python -m toolhub.serve [daphne's arguments]``: daphne, as toolhub runs it everywhere
(``bin/run``, the Docker image, the tests' servers).

Two transport settings differ from daphne's own, and only here:

- **A hard cap well above the app's own limit.** WebSocket messages and frames up to
  ``TRANSPORT_CAP_BYTES`` reach the consumer, which refuses anything over its 64 KiB frame
  limit with a ``too_large`` error frame on a socket that stays open. Only a message over
  the cap ends the connection.
- **Refusals close properly.** Autobahn, under daphne, drops the TCP connection on a
  protocol error (``failByDrop``). Here it sends the close code instead: 1007 for a text
  frame that is not UTF-8, and 1009 for a message over the cap.

And three start-up steps, once the server's loop runs and before any request arrives: it
serves turns (``serve_turns_here``), so a restarted server ends the turns its predecessor
left within ``TOOLHUB_TURN_LOST_AFTER`` even if nobody connects; it starts encoding tool
texts for semantic search (``embeddings.start``), so the first search finds the model
loaded; and it tunes the garbage collector (``toolhub.lib.collector``). A process that only
imports the application (a test, a command) does none of them.
"""

from __future__ import annotations

import sys

# daphne ships no type information (pyproject's untyped libraries); its two classes are
# subclassed here as they are.
from daphne.cli import CommandLineInterface
from daphne.server import Server
from twisted.internet import reactor

TRANSPORT_CAP_BYTES = 4 * 1024 * 1024
_DEFAULTS = {
    "--websocket-max-message-size": str(TRANSPORT_CAP_BYTES),
    "--websocket-max-frame-size": str(TRANSPORT_CAP_BYTES),
}


class _Server(Server):
    def run(self) -> None:
        # daphne makes its WebSocket factory inside run(), just before the reactor starts.
        # Autobahn copies the factory's options into each protocol as it connects, so
        # setting them once the reactor runs covers every connection.
        reactor.callWhenRunning(self._close_cleanly)
        # callLater runs on the asyncio loop once it runs (callWhenRunning comes before).
        reactor.callWhenRunning(reactor.callLater, 0, _start_serving)
        super().run()

    def _close_cleanly(self) -> None:
        self.ws_factory.setProtocolOptions(failByDrop=False)


def _start_serving() -> None:
    # daphne imported the application (and so set Django up) before the reactor started.
    from agent_app.turns import serve_turns_here
    from toolhub.lib.collector import collect_less
    from toolhub.tools import embeddings

    serve_turns_here()
    embeddings.start()
    collect_less()


class _Cli(CommandLineInterface):
    server_class = _Server


def main(argv: list[str]) -> None:
    given = {arg.split("=", 1)[0] for arg in argv}
    defaults = [
        item for flag, value in _DEFAULTS.items() if flag not in given for item in (flag, value)
    ]
    _Cli().run([*defaults, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
