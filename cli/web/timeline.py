"""The timeline: events counted per time bucket and lane (agent · layer), kinds coloured, over a time
range the URL carries (`t0`, `t1` in ms; the whole history up to the moment by default).

Counts come from the activity table (projections.activity), summed in SQL per level step, so no
event is read for the strip or the filter counts; the list below it reads the newest events of the
range that pass the filters (at most `LISTED`)."""

from collections import Counter

import msgspec

from eventstore.errors import InvalidInput
from eventstore.instants import format_instant
from eventstore.kinds import Redacted
from eventstore.recorder import row_to_event

REDACTED = Redacted.__struct_config__.tag

BUCKETS = 48
LISTED = 100


class Lane(msgspec.Struct):
    agent: str
    layer: str
    cells: list[dict]  # per bucket: {"n": count, "kind": the most frequent kind}


class Timeline(msgspec.Struct):
    first: int  # the time of the first event, and of the last up to the moment
    last: int
    t0: int
    t1: int
    start: str
    end: str
    edges: list[int]  # the start (ms) of each bucket, and the end of the last
    lanes: list[Lane]
    kinds: list[tuple[str, int]]
    layers: list[tuple[str, int]]
    agents: list[tuple[str, int]]
    events: list[tuple[int, str, str, str, str, bool]]  # seq, time, agent, layer, kind, redacted (newest first)
    shown: int
    capped: bool  # the list holds the newest LISTED of more


def _kind(event) -> tuple[str, bool]:
    """An event's kind as the counts have it (the one it was written as, which its header keeps), and whether
    it was redacted since."""
    if event.kind == REDACTED:
        return event.body.original, True
    return event.kind, False


def timeline(mem, upto: int, t0: int | None = None, t1: int | None = None, *, kind: str | None = None,
             layer: str | None = None, agent: str | None = None, visible: set[str] | None = None,
             buckets: int = BUCKETS) -> Timeline:
    """The strip and list as of seq `upto`; `visible` limits the layers shown (a hub token's)."""
    if kind == REDACTED:
        raise InvalidInput("the timeline counts and lists a redacted event under the kind it was written as "
                           "(marked redacted): filter by that kind")
    activity = mem.activity()
    first, last = mem.recorded_at(1) or 0, mem.recorded_at(upto) or 0 if upto else 0
    if t0 is not None and t0 > last:  # nothing to show, and past year 9999 no time to say it in
        raise InvalidInput(f"t0 {t0} is after the last event shown ({format_instant(last)}): the timeline ends there")
    t0 = first if t0 is None else max(t0, 0)
    t1 = last if t1 is None else min(t1, last)
    t1 = max(t1, t0)
    cells = [c for c in activity.strip(t0, t1, buckets) if visible is None or c.layer in visible]
    kinds, layers, agents = Counter(), Counter(), Counter()
    chosen = []
    for c in cells:
        if (layer is None or c.layer == layer) and (agent is None or c.agent == agent):
            kinds[c.kind] += c.n
        if (kind is None or c.kind == kind) and (agent is None or c.agent == agent):
            layers[c.layer] += c.n
        if (kind is None or c.kind == kind) and (layer is None or c.layer == layer):
            agents[c.agent] += c.n
        if (kind is None or c.kind == kind) and (layer is None or c.layer == layer) and (agent is None or c.agent == agent):
            chosen.append(c)
    lanes: dict[tuple[str, str], list[dict]] = {}
    for c in chosen:
        cell = lanes.setdefault((c.agent, c.layer), [{"n": 0, "kind": "", "top": 0} for _ in range(buckets)])[c.bucket]
        cell["n"] += c.n
        if c.n > cell["top"]:
            cell["kind"], cell["top"] = c.kind, c.n
    span = t1 - t0 + 1
    edges = [t0 + span * i // buckets for i in range(buckets)] + [t1]
    after = mem.seq_at(t0 - 1) if t0 > first else 0
    until = min(mem.seq_at(t1), upto)
    allowed = [layer] if layer else (sorted(visible) if visible is not None else None)
    rows = [] if allowed == [] or until <= after else mem.event_rows(
        after, until, kinds=[kind] if kind else None, layers=allowed, agent=agent, newest_first=True, limit=LISTED)
    events = [(e.seq, format_instant(e.recorded_at), e.agent, e.layer, *_kind(e)) for e in map(row_to_event, rows)]
    shown = sum(c.n for c in chosen)
    return Timeline(first=first, last=last, t0=t0, t1=t1, start=format_instant(t0), end=format_instant(t1), edges=edges,
                    lanes=[Lane(agent=a, layer=lay, cells=lane) for (a, lay), lane in sorted(lanes.items())],
                    kinds=sorted(kinds.items()), layers=sorted(layers.items()), agents=sorted(agents.items()),
                    events=events, shown=shown, capped=len(events) == LISTED and shown > LISTED)
