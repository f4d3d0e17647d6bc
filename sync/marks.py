"""Marks: where a workspace's sync with a hub stood, kept so that a hub restored from a backup costs only what it lost.

A hub keeps its events in the order it committed them, and a backup of it holds a prefix of that order. So when the
hub still holds the last event of an acknowledged push (a request is committed whole), it holds every push made
before; when it still holds a pulled event at the position it was pulled from, its log up to there is the one this
workspace pulled. A mark is such an event with the state rows (cursors) the workspace had just after it: after a
restore, the newest mark the hub still holds is where the push or the pull starts again, instead of the beginning.

A workspace keeps a few marks per remote and direction, spaced out geometrically back from the newest (`kept`):
a restore from last night's backup and one from last month's both find a mark close to what the hub lost."""

import msgspec

KEPT = 12
"""Marks kept per remote and direction: with their spacing, the newest few pushes or pulls and a few older ones
at about twice the age of the one after them. At most what one contract request may ask about (sync.hub.MAX_HOLDS)."""


class Mark(msgspec.Struct, array_like=True):
    """`at`: the push cursor (a seq of this log) or the hub position pulled to; `id`: the event the hub must still
    hold (at `at`, for a pull: `positioned`); `state`: the state rows to write back to start again from there."""

    at: int
    id: str
    state: dict[str, str]


_decode = msgspec.json.Decoder(list[Mark]).decode


def marks_key(direction: str, remote: str) -> str:
    return f"{direction}-marks:{remote}"


def load(memory, key: str) -> list[Mark]:
    stored = memory.log.state(key)
    return _decode(stored) if stored else []


def with_mark(marks: list[Mark], mark: Mark, keep: int = KEPT) -> list[Mark]:
    """`marks` and the new `mark`, thinned to `keep`: the one dropped is the mark whose two neighbours are closest
    together for their age (the gap it would leave, against how far back from the newest it lies), so the marks
    stay spaced roughly geometrically. The oldest and the newest are always kept."""
    marks = [m for m in marks if m.at < mark.at] + [mark]
    while len(marks) > keep:
        newest = marks[-1].at
        drop = min(range(1, len(marks) - 1),
                   key=lambda i: (marks[i + 1].at - marks[i - 1].at) / (newest - marks[i - 1].at + 1))
        del marks[drop]
    return marks


def encoded(marks: list[Mark]) -> str:
    return msgspec.json.encode(marks).decode()


def newest_held(marks: list[Mark], holds: dict[str, int], positioned: bool) -> Mark | None:
    """The newest mark whose event the hub holds (`holds`: id -> position; `positioned`: at the mark's `at`)."""
    for mark in reversed(marks):
        if mark.id in holds and (not positioned or holds[mark.id] == mark.at):
            return mark
    return None


def start_again(memory, client, key: str, positioned: bool) -> Mark | None:
    """After the hub lost events: the newest of the marks under `key` it still holds (asked in one contract
    request), its state rows written back and the marks after it dropped; None when it holds none of them."""
    marks = load(memory, key)
    holds = (client.contract([mark.id for mark in marks]).holds or {}) if marks else {}
    mark = newest_held(marks, holds, positioned)
    if mark is not None:
        rows = {**mark.state, key: encoded(marks[:marks.index(mark) + 1])}
        memory.log.append([], state=lambda _seqs: rows)
    return mark

