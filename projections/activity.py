"""Activity: how many events each (agent, layer, kind) recorded per second, minute, hour and day.

The timeline and the contract's producer counts read this instead of the log, so a page costs the
same on a million events as on a hundred: a strip of 48 buckets is summed from the coarsest level
whose step fits one bucket (at most 60 of its rows per bucket and lane), and a count "as of T" from
whole days, then hours, minutes and seconds up to T.

It is kept apart from the fold: the views database holds the table and its own checkpoint
(`activity` in meta), and `catch_up` brings it level with the log when a page asks (one pass over
five narrow columns of the new events). A rebuilt views database starts it again from nothing.
"""

import sqlite3
from collections import Counter

import msgspec

SECOND, MINUTE, HOUR, DAY = 1000, 60_000, 3_600_000, 86_400_000
LEVELS = (SECOND, MINUTE, HOUR, DAY)
BATCH = 100_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS activity (
    level INTEGER NOT NULL, bucket INTEGER NOT NULL, agent TEXT NOT NULL, layer TEXT NOT NULL, kind TEXT NOT NULL,
    n INTEGER NOT NULL, PRIMARY KEY (level, bucket, agent, layer, kind)) WITHOUT ROWID
"""


class Cell(msgspec.Struct, array_like=True):
    """Events of one lane and kind in one bucket of a strip (`bucket` 0 .. buckets-1)."""

    bucket: int
    agent: str
    layer: str
    kind: str
    n: int


class Activity:
    """The one owner of the `activity` table."""

    def __init__(self, db):
        self.db = db

    @classmethod
    def copied(cls, db) -> "Activity":
        """An Activity in memory holding what `db`'s counts (a views database on read-only storage, which takes
        no row: the copy is caught up instead)."""
        apart = sqlite3.connect(":memory:", check_same_thread=False)
        apart.executescript(SCHEMA + ";CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        apart.executemany("INSERT INTO activity VALUES (?,?,?,?,?,?)", db.execute("SELECT * FROM activity"))
        apart.execute("INSERT INTO meta VALUES ('activity', ?)", (str(cls(db).counted()),))
        apart.commit()
        return cls(apart)

    def counted(self) -> int:
        row = self.db.execute("SELECT value FROM meta WHERE key = 'activity'").fetchone()
        return int(row[0]) if row else 0

    def catch_up(self, log, upto: int, transaction) -> int:
        """Counts the events after the last counted up to `upto`; returns how many it counted."""
        done = 0
        while (start := self.counted()) < upto:
            end = min(start + BATCH, upto)
            counts: Counter = Counter()
            for _seq, at, agent, layer, kind in log.activity_rows(start, end):
                for level in LEVELS:
                    counts[(level, at // level, agent, layer, kind)] += 1
            with transaction():
                self.db.executemany(
                    "INSERT INTO activity VALUES (?,?,?,?,?,?) ON CONFLICT(level, bucket, agent, layer, kind) "
                    "DO UPDATE SET n = n + excluded.n", [(*key, n) for key, n in counts.items()])
                self.db.execute("INSERT OR REPLACE INTO meta VALUES ('activity', ?)", (str(end),))
            done += end - start
        return done

    @staticmethod
    def level_for(span_ms: int, buckets: int) -> int:
        """The coarsest level whose step fits in one of `buckets` buckets over `span_ms`."""
        width = span_ms / buckets
        return max((level for level in LEVELS if level <= width), default=SECOND)

    def strip(self, start_ms: int, end_ms: int, buckets: int) -> list[Cell]:
        """Counts per display bucket over [start_ms, end_ms], at the level that fits; a level step
        that straddles a bucket edge counts in the bucket where it starts."""
        span = max(end_ms - start_ms + 1, 1)
        level = self.level_for(span, buckets)
        rows = self.db.execute(
            "SELECT bucket, agent, layer, kind, n FROM activity WHERE level = ? AND bucket BETWEEN ? AND ?",
            (level, start_ms // level, end_ms // level))
        cells: Counter = Counter()
        for bucket, agent, layer, kind, n in rows:
            place = min(max((bucket * level - start_ms) * buckets // span, 0), buckets - 1)
            cells[(place, agent, layer, kind)] += n
        return [Cell(*key, n) for key, n in sorted(cells.items())]

    def totals(self, upto_ms: int) -> Counter:
        """Events per (layer, agent) recorded up to the second holding `upto_ms`: whole days, then
        the hours, minutes and seconds of the last day (four index ranges, however long the log)."""
        totals: Counter = Counter()
        ranges, start = [], 0
        for level in (DAY, HOUR, MINUTE):
            end = upto_ms // level  # whole buckets of this level before the one holding upto_ms
            ranges.append((level, start // level, end - 1))
            start = end * level
        ranges.append((SECOND, start // SECOND, upto_ms // SECOND))
        for level, low, high in ranges:
            if high < low:
                continue
            for layer, agent, n in self.db.execute(
                    "SELECT layer, agent, SUM(n) FROM activity WHERE level = ? AND bucket BETWEEN ? AND ? "
                    "GROUP BY layer, agent", (level, low, high)):
                totals[(layer, agent)] += n
        return totals
