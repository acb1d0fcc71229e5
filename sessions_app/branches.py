"""Branches: the event log read as a tree, so an edited message and a regenerated answer
keep their earlier versions. Nothing here writes; the log stays append-only.

Reading the log in seq order with a *tip* (docs/architecture.md, "The event log"):

- A history row (``user_message``, ``assistant_message``, ``tool_call``,
  ``tool_result``) hangs under the tip, then becomes the tip. Seqs grow down every path.
- ``rewind {to}`` (an edit or a regenerate) moves the tip up its path to the last row
  with seq <= ``to``: on a log without branches this is the old truncation, so old logs
  read as they did.
- ``branch {to}`` (the person switched versions) sets the tip to that row, a leaf; one
  that names no earlier row changes nothing (an import may carry anything).
- The path shown, and sent to the provider, is the tip and its ancestors.
- Versions: the person's messages under one parent are versions of one message; the
  first rows of answers under one message of the person (its children that are not
  messages of the person) are versions of one answer. Numbered in seq order.
- Every other event belongs to its turn and is shown when its anchor is on the path: the
  answer row it leads to, else the turn's row before it, else the tip it was stored at
  (``shown_events``). A branch point is always at a turn's edge (an edit goes back to
  just before a message, a regenerate to just after one), so a turn's answer is on the
  path whole or not at all, its deltas, cards and end with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

ROW_KINDS = frozenset(("user_message", "assistant_message", "tool_call", "tool_result"))
MOVE_KINDS = frozenset(("rewind", "branch"))


def _seq(value: Any) -> int | None:
    """A seq as an event names it: a whole number (not a bool), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class Versions:
    """The versions of one message or one answer: each one's seq, in seq order, and the
    one shown."""

    seqs: tuple[int, ...]
    shown: int

    @property
    def number(self) -> int:
        return self.seqs.index(self.shown) + 1

    @property
    def count(self) -> int:
        return len(self.seqs)

    @property
    def previous(self) -> int | None:
        index = self.seqs.index(self.shown)
        return self.seqs[index - 1] if index > 0 else None

    @property
    def next(self) -> int | None:
        index = self.seqs.index(self.shown)
        return self.seqs[index + 1] if index + 1 < len(self.seqs) else None


@dataclass
class Tree:
    """The log's history rows as a tree (module docstring); 0 is the root."""

    parent: dict[int, int] = field(default_factory=dict)
    kinds: dict[int, str] = field(default_factory=dict)
    tip: int = 0

    def add(self, seq: int, kind: str, data: dict[str, Any]) -> None:
        """Read one event, in seq order."""
        if kind in ROW_KINDS:
            self.parent[seq], self.kinds[seq], self.tip = self.tip, kind, seq
        elif kind == "rewind":
            self.rewind(_seq(data.get("to")))
        elif kind == "branch":
            to = _seq(data.get("to"))
            if to is not None and to in self.parent:
                self.tip = to

    def rewind(self, to: int | None) -> None:
        # A rewind that names no seq changes nothing, as before branches.
        if to is None:
            return
        while self.tip and self.tip > to:
            self.tip = self.parent[self.tip]

    def path(self) -> list[int]:
        """The shown path's rows, in seq order."""
        path, at = [], self.tip
        while at:
            path.append(at)
            at = self.parent[at]
        return path[::-1]

    def leaf_under(self, seq: int) -> int:
        """The most recent leaf under ``seq`` (itself when it has no children): the row
        with the largest seq below it, since a child's seq is always larger."""
        below = {seq}
        for row in sorted(self.parent):
            if self.parent[row] in below:
                below.add(row)
        return max(below)

    def group(self, seq: int) -> tuple[int, ...]:
        """The versions ``seq`` is one of (itself alone when it is no version)."""
        kind, parent = self.kinds.get(seq), self.parent.get(seq)
        if kind is None or parent is None:
            return ()
        if kind == "user_message":
            return self._children(parent, user=True)
        if self.kinds.get(parent) == "user_message":
            return self._children(parent, user=False)
        return (seq,)

    def _children(self, parent: int, *, user: bool) -> tuple[int, ...]:
        return tuple(
            row
            for row, above in self.parent.items()
            if above == parent and (self.kinds[row] == "user_message") == user
        )

    def versions(self) -> dict[int, Versions]:
        """The shown rows that have other versions, by seq, with those versions."""
        found = {}
        for row in self.path():
            seqs = self.group(row)
            if len(seqs) > 1:
                found[row] = Versions(tuple(sorted(seqs)), row)
        return found


def tree_read(rows: Iterable[tuple[int, str, dict[str, Any]]]) -> Tree:
    """The tree of ``(seq, kind, data)`` rows read in seq order (other kinds are skipped)."""
    tree = Tree()
    for seq, kind, data in rows:
        tree.add(seq, kind, data)
    return tree


@dataclass(frozen=True, slots=True)
class Shown:
    """What the page shows of a log: the events on the path (moves left out), the tree,
    and each turn's answer head (its first answer row), for its versions."""

    events: list[tuple[Any, ...]]
    tree: Tree
    heads: dict[str, int]
    # The log's last seq (a page resumes after it, whatever it shows).
    last_seq: int


def shown_events(events: Iterable[tuple[Any, ...]]) -> Shown:
    """The ``(seq, kind, data, turn, created)`` events of the shown path, in seq order: a
    history row when it is on the path, another event when its anchor is (``_anchors``);
    ``rewind`` and ``branch`` are left out (the path already applies them)."""
    listed = list(events)
    tree = Tree()
    tips = []
    heads: dict[str, int] = {}
    for seq, kind, data, turn, _ in listed:
        tree.add(seq, kind, data)
        tips.append(tree.tip)
        if kind in ROW_KINDS and kind != "user_message":
            heads.setdefault(turn, seq)
    on_path = {0, *tree.path()}
    shown = [
        event
        for event, anchor in zip(listed, _anchors(listed, tips), strict=True)
        if event[1] not in MOVE_KINDS and anchor in on_path
    ]
    return Shown(shown, tree, heads, max((event[0] for event in listed), default=0))


def _anchors(listed: list[tuple[Any, ...]], tips: list[int]) -> list[int]:
    """The row each event is shown with: a row itself; another event of a turn, the
    turn's next answer row (before the turn's next message or rewind: a text delta, a
    ``turn_started``, go with the answer they lead to), else the turn's latest row at or
    before it (a ``turn_finished`` with its answer), else the tip it was stored at (a
    turn that stored no row; an event of no turn)."""
    ahead: list[int | None] = [None] * len(listed)
    upcoming: dict[str, int | None] = {}
    for index in range(len(listed) - 1, -1, -1):
        seq, kind, _, turn, _ = listed[index]
        ahead[index] = upcoming.get(turn)
        if kind == "user_message" or kind == "rewind":
            upcoming[turn] = None
        elif kind in ROW_KINDS:
            upcoming[turn] = seq
    anchors, latest = [], {}
    for index, (seq, kind, _, turn, _) in enumerate(listed):
        if kind in ROW_KINDS:
            latest[turn] = seq
            anchors.append(seq)
        elif not turn:
            anchors.append(tips[index])
        else:
            anchors.append(ahead[index] or latest.get(turn) or tips[index])
    return anchors
