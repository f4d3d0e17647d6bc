"""The timeline: events counted per time bucket and lane (agent · layer), and the kinds seen.

Only the columns the strip needs are read (no body is decoded), and at most `WINDOW` of the newest
events in the chosen seq range, so the page stays fast however long the log is."""

from collections import Counter

import msgspec

from eventstore.instants import format_instant

WINDOW = 10_000
BUCKETS = 48


class Lane(msgspec.Struct):
    agent: str
    layer: str
    cells: list[dict]  # per bucket: {"n": count, "kind": the most frequent kind}


class Timeline(msgspec.Struct):
    first: int
    last: int
    start: str
    end: str
    lanes: list[Lane]
    kinds: list[tuple[str, int]]
    layers: list[tuple[str, int]]
    agents: list[tuple[str, int]]
    events: list[tuple[int, str, str, str, str]]  # seq, time, agent, layer, kind (newest first)
    shown: int
    truncated: bool


def timeline(log, upto: int, *, kind: str | None = None, layer: str | None = None, agent: str | None = None,
             buckets: int = BUCKETS, window: int = WINDOW) -> Timeline:
    rows = [(r[0], r[3], r[4], r[5], r[6]) for r in log.read_rows(0, upto, newest_first=True, limit=window)]
    rows.reverse()
    kinds, layers, agents = Counter(), Counter(), Counter()
    for _seq, _at, a, lay, k in rows:
        if (layer is None or lay == layer) and (agent is None or a == agent):
            kinds[k] += 1
        if (kind is None or k == kind) and (agent is None or a == agent):
            layers[lay] += 1
        if (kind is None or k == kind) and (layer is None or lay == layer):
            agents[a] += 1
    chosen = [r for r in rows if (kind is None or r[4] == kind) and (layer is None or r[3] == layer)
              and (agent is None or r[2] == agent)]
    start, end = (rows[0][1], rows[-1][1]) if rows else (0, 0)
    span = max(end - start, 1)
    counts = Counter((a, lay, min((at - start) * buckets // span, buckets - 1), k) for _s, at, a, lay, k in chosen)
    cells: dict[tuple[str, str], list[dict]] = {}
    for (a, lay, bucket, k), n in counts.items():
        cell = cells.setdefault((a, lay), [{"n": 0, "kind": "", "top": 0} for _ in range(buckets)])[bucket]
        cell["n"] += n
        if n > cell["top"]:
            cell["kind"], cell["top"] = k, n
    lanes = [Lane(agent=a, layer=lay, cells=lane) for (a, lay), lane in sorted(cells.items())]
    events = [(s, format_instant(at), a, lay, k) for s, at, a, lay, k in reversed(chosen[-200:])]
    return Timeline(first=rows[0][0] if rows else 0, last=rows[-1][0] if rows else 0,
                    start=format_instant(start) if rows else "", end=format_instant(end) if rows else "",
                    lanes=lanes, kinds=sorted(kinds.items()), layers=sorted(layers.items()),
                    agents=sorted(agents.items()), events=events, shown=len(chosen),
                    truncated=len(rows) >= window and (rows[0][0] > 1))
