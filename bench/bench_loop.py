"""The loop and its audit: compacting a 100,000-entry loop, `mem audit read` latency over 1,000
blobs, and exporting a 100,000-event store as an ADF file.

The baseline for each is the same work done the plain ADF way, side by side: rows deleted from
an adf_loop table and archived into one brotli blob with raw sqlite3, the recipe's SQL run on a
plain .adf file, and copying the same rows into a new SQLite file.
Usage: python bench/bench_loop.py [-n 100000] [--blobs 1000]
"""

import argparse
import json
import shutil
import sqlite3
import statistics
import time

import brotli
from common import table, workdir

from eventstore.envelope import new_event
from eventstore.kinds import ConfigSet, LoopAppend, LoopClear
from projections import audit
from eventstore.blobs import BROTLI_QUALITY
from projections.adf_file import export_adf
from projections.memory import Memory


def loop_events(n: int, start: int = 0):
    return [new_event(LoopAppend(role="user" if i % 2 else "assistant",
                                 content=[{"type": "text", "text": f"message {i}: some words of a transcript"}]),
                      agent="bench", layer="loop") for i in range(start, start + n)]


def fresh(name: str) -> Memory:
    root = workdir("loop") / name
    shutil.rmtree(root, ignore_errors=True)
    memory = Memory.init(root, "bench")
    memory.log.db.execute("PRAGMA synchronous = NORMAL")
    return memory


def raw_compaction(n: int) -> float:
    """ADF's compaction with plain sqlite3: read rows, archive them in one blob, delete them."""
    path = workdir("loop") / "raw.adf"
    path.unlink(missing_ok=True)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("CREATE TABLE adf_loop (seq INTEGER PRIMARY KEY, loop TEXT, role TEXT, content_json TEXT, "
               "model TEXT, tokens TEXT, created_at INTEGER, ord INTEGER)")
    db.execute("CREATE TABLE adf_audit (id INTEGER PRIMARY KEY, source TEXT, start_seq INTEGER, end_seq INTEGER, "
               "ref TEXT, entry_count INTEGER, size_bytes INTEGER, data BLOB, created_at INTEGER)")
    db.execute("BEGIN")
    db.executemany("INSERT INTO adf_loop VALUES (?, 'main', ?, ?, NULL, NULL, ?, NULL)",
                   [(i + 1, "user", json.dumps([{"text": f"message {i}: some words of a transcript", "type": "text"}]),
                     i) for i in range(n)])
    db.execute("COMMIT")
    start = time.perf_counter()
    db.execute("BEGIN IMMEDIATE")
    rows = db.execute("SELECT seq, role, content_json, created_at FROM adf_loop ORDER BY COALESCE(ord, seq), seq"
                      ).fetchall()
    entries = [{"seq": s, "role": r, "content_json": json.loads(c), "created_at": t} for s, r, c, t in rows]
    text = json.dumps(entries, separators=(",", ":")).encode()
    db.execute("INSERT INTO adf_audit (source, start_seq, end_seq, entry_count, size_bytes, data, created_at) "
               "VALUES ('loop:main', 1, ?, ?, ?, ?, 0)",
               (n, n, len(text), brotli.compress(text, quality=BROTLI_QUALITY)))
    db.execute("DELETE FROM adf_loop")
    db.execute("INSERT INTO adf_loop VALUES (?, 'main', 'user', '[]', NULL, NULL, 0, NULL)", (n + 1,))
    db.execute("COMMIT")
    return time.perf_counter() - start


def bench_compaction(n: int) -> list[tuple]:
    memory = fresh("compact")
    events = loop_events(n)
    for i in range(0, n, 10_000):
        memory.log.append(events[i:i + 10_000])
    memory.refresh()
    start = time.perf_counter()
    memory.loop_compact("everything so far", preserve=10)
    ours = time.perf_counter() - start
    entries = memory.views.db.execute("SELECT entry_count FROM audit_rows").fetchone()[0]
    theirs = raw_compaction(n)
    return [(f"compact a {n:,}-entry loop ({entries:,} archived)", f"{ours * 1000:.0f} ms",
             f"{theirs * 1000:.0f} ms", f"{theirs / ours:.2f}x")]


def bench_audit_read(blobs: int) -> list[tuple]:
    memory = fresh("audit")
    for b in range(blobs):
        batch = loop_events(20, b * 20) + [new_event(LoopClear(), agent="bench", layer="loop")]
        memory.log.append(batch)
    memory.refresh()
    out = workdir("loop") / "audit.adf"
    out.unlink(missing_ok=True)
    export_adf(memory, out, memory.log.head())
    head = memory.log.head()
    seqs = [s for s in range(1, head, 7) if memory.log.get_by_seq(s).kind == "loop.append"][:500]
    ours, theirs = [], []
    plain = sqlite3.connect(out)
    for seq in seqs:
        start = time.perf_counter()
        hit = audit.audit_read(memory.views, memory.log, seq)
        ours.append(time.perf_counter() - start)
        assert hit.source == "audit"
        start = time.perf_counter()
        recipe(plain, seq)
        theirs.append(time.perf_counter() - start)
    a, b = statistics.median(ours) * 1000, statistics.median(theirs) * 1000
    return [(f"audit read over {blobs:,} blobs (median of {len(seqs)})", f"{a:.3f} ms", f"{b:.3f} ms",
             f"{b / a:.2f}x")]


def recipe(db, seq):
    if db.execute("SELECT seq FROM adf_loop WHERE seq = ?", (seq,)).fetchone():
        return "live"
    for _id, _source, data in db.execute(
            "SELECT id, source, data FROM adf_audit WHERE (source = 'loop' OR source LIKE 'loop:%') "
            "AND start_seq <= ? AND end_seq >= ? ORDER BY start_seq DESC", (seq, seq)).fetchall():
        if any(e["seq"] == seq for e in json.loads(brotli.decompress(data))):
            return "audit"
    return "missing"


def bench_export(n: int) -> list[tuple]:
    memory = fresh("export")
    events = [new_event(ConfigSet(key="audit.loop", value=True), agent="bench", layer="agent")] + loop_events(n - 1)
    for i in range(0, n, 10_000):
        memory.log.append(events[i:i + 10_000])
    memory.refresh()
    out = workdir("loop") / "export.adf"
    out.unlink(missing_ok=True)
    start = time.perf_counter()
    export_adf(memory, out, memory.log.head())
    ours = time.perf_counter() - start
    copy = workdir("loop") / "copy.adf"
    copy.unlink(missing_ok=True)
    start = time.perf_counter()
    db = sqlite3.connect(copy, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(f"ATTACH DATABASE '{memory.ws.views_path}' AS views")
    db.execute("CREATE TABLE adf_loop AS SELECT * FROM views.adf_loop")
    db.close()
    theirs = time.perf_counter() - start
    return [(f"export a {n:,}-event store to .adf", f"{ours * 1000:.0f} ms", f"{theirs * 1000:.0f} ms",
             f"{theirs / ours:.2f}x")]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=100_000)
    parser.add_argument("--blobs", type=int, default=1000)
    args = parser.parse_args()
    rows = [("operation", "mindlog", "plain sqlite3 baseline", "ratio (baseline / mindlog)")]
    rows += bench_compaction(args.n)
    rows += bench_audit_read(args.blobs)
    rows += bench_export(args.n)
    table("loop and audit (views synchronous=NORMAL, log NORMAL; brotli quality "
          f"{BROTLI_QUALITY})", rows)


if __name__ == "__main__":
    main()
