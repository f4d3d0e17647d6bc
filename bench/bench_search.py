"""`mem search` on a large memory: p50/p99 now and as of a past moment, against a grep-like scan.

The log (not timed) holds --pages wiki pages and --entries typed entries in a local layer, then page
updates up to --events events in all, each version a few sentences drawn from a Zipf-distributed
vocabulary (20,000 words). Then, in one process:
- `mem replay` of the whole log, and the same replay with the search fold switched off (the cost of
  keeping both indexes, current and all-versions, inside replay, as a ratio);
- search p50/p99 over random two-word queries, now and as of random past seqs;
- a linear scan (grep -l -i of every word, in Python) over the materialised files, the baseline.
Usage: python bench/bench_search.py [--events 1000000] [--pages 60000] [--entries 40000]
"""

import argparse
import itertools
import random
import shutil
import statistics
import time
from pathlib import Path

from common import table, workdir

from eventstore.envelope import new_event
from eventstore.kinds import ConfigSet, EntryAppend, PageIngest, PageUpdate
from eventstore.sqlite import SQLiteLog
from eventstore.workspace import Workspace

VOCABULARY = [f"w{rank}" for rank in range(20_000)]
CUMULATIVE = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(VOCABULARY))))  # Zipf, s = 1


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(VOCABULARY, cum_weights=CUMULATIVE, k=n))


def build_log(root: Path, events: int, pages: int, entries: int) -> None:
    Workspace.init(root, "bench")
    log = SQLiteLog(root / ".mem" / "log.db", synchronous="OFF")
    rng = random.Random(7)
    heads: dict[str, str] = {}
    ts = 1_790_000_000_000
    batch = [new_event(ConfigSet(key="layers.decisions", value={"path": "memory/decisions.md", "format": "entries"}),
                       agent="bench", layer="agent", ts=ts)]
    for i in range(1, events):
        ts += 1000
        if i <= pages:
            slug = f"page-{i}"
            fm = {"type": "note", "description": words(rng, 6)}
            if i % 50 == 0:
                fm["stale_after"] = "2026-01-01"
            if i % 70 == 0:
                fm["status"] = "deprecated"
            event = new_event(PageIngest(slug=slug, frontmatter=fm, text=f"# Page {i}\n\n{words(rng, 40)}\n"),
                              agent="bench", layer="mind", ts=ts)
            heads[slug] = event.id
        elif i <= pages + entries:
            event = new_event(EntryAppend(type="DECISION", date="2026-11-01", content=words(rng, 20)),
                              agent="bench", layer="decisions", ts=ts)
        else:
            slug = f"page-{rng.randrange(1, pages + 1)}"
            fm = {"type": "note", "description": words(rng, 6)}
            event = new_event(PageUpdate(slug=slug, frontmatter=fm, text=f"# {slug}\n\n{words(rng, 20)}\n",
                                         parents=[heads[slug]]), agent="bench", layer="mind", ts=ts)
            heads[slug] = event.id
        batch.append(event)
        if len(batch) == 10_000:
            log.append(batch)
            batch = []
    if batch:
        log.append(batch)
    log.close()


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def grep_files(root: Path, query: list[str]) -> list[str]:
    """What `grep -l -i` of every word does: read each materialised file, keep those holding all words."""
    hits = []
    for path in [*sorted((root / "mind").glob("*.md")), root / "memory" / "decisions.md"]:
        text = path.read_text().lower()
        if all(word in text for word in query):
            hits.append(str(path))
    return hits


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--pages", type=int, default=60_000)
    parser.add_argument("--entries", type=int, default=40_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--queries-only", action="store_true", help="Reuse the views a previous run built.")
    args = parser.parse_args()
    root = workdir("search") / f"ws-{args.events}-{args.pages}-{args.entries}"
    if not (root / ".mem" / "log.db").exists():
        shutil.rmtree(root, ignore_errors=True)
        start = time.perf_counter()
        build_log(root, args.events, args.pages, args.entries)
        print(f"built a log of {args.events:,} events in {time.perf_counter() - start:.0f}s (not part of the figures)")

    from projections import fold, search
    from projections.memory import Memory
    from projections.replay import replay

    memory = Memory.open(root)
    real_fold = fold.SearchFold

    class NoSearch(real_fold):
        def apply(self, *args, **kwargs):
            pass

        def take_pages(self, *args):
            pass

        def flush(self, *args):
            pass

    without = with_index = 0.0
    if not args.queries_only:
        replay(memory)  # not timed: the first replay writes every file, the two measured ones find them written
        fold.SearchFold = NoSearch
        start = time.perf_counter()
        replay(memory)
        without = time.perf_counter() - start
        fold.SearchFold = real_fold
        start = time.perf_counter()
        replay(memory)
        with_index = time.perf_counter() - start
    head = memory.views.checkpoint()
    docs = memory.views.db.execute("SELECT COUNT(*) FROM search_docs").fetchone()[0]

    rng = random.Random(11)
    queries = [words(rng, 2).split() for _ in range(args.queries)]  # as the text: common words are common
    moments = [rng.randrange(args.pages + args.entries, head) for _ in range(args.queries)]

    versions = memory.views.db.execute("SELECT COUNT(*) FROM search_history").fetchone()[0]

    def timed_search(query, as_of=None):
        begin = time.perf_counter()
        hits = search.search(memory.views, " ".join(query), as_of=as_of, day="2026-11-30")
        return (time.perf_counter() - begin) * 1000, hits

    now = [timed_search(q) for q in queries]
    past = [timed_search(q, m) for q, m in zip(queries, moments)]
    now_ms, past_ms = [t for t, _ in now], [t for t, _ in past]
    grep_ms = []
    for query in queries[:5]:
        begin = time.perf_counter()
        grep_files(root, query)
        grep_ms.append((time.perf_counter() - begin) * 1000)
    grep_p50 = statistics.median(grep_ms)
    found = sum(1 for _t, hits in now if hits)
    table(f"mem search on {head:,} events: {args.pages:,} pages + {args.entries:,} entries ({docs:,} current docs, "
          f"{versions:,} versions); {args.queries} two-word queries, {found} with hits", [
              ("measure", "p50 ms", "p99 ms", "vs grep-like scan (p50)", "target"),
              ("search now (in-process)", f"{statistics.median(now_ms):.2f}", f"{percentile(now_ms, 0.99):.2f}",
               f"{grep_p50 / statistics.median(now_ms):,.0f}x faster", "p50 < 10 ms"),
              ("search as of a past seq", f"{statistics.median(past_ms):.2f}", f"{percentile(past_ms, 0.99):.2f}",
               f"{grep_p50 / statistics.median(past_ms):,.0f}x faster", "p50 < 20 ms"),
              ("grep-like scan of the files (5 queries)", f"{grep_p50:.0f}", f"{max(grep_ms):.0f}", "1x", ""),
          ])
    if args.queries_only:
        return
    table("index build", [
        ("measure", "seconds", "events/s"),
        ("mem replay, search fold off", f"{without:.1f}", f"{head / without:,.0f}"),
        ("mem replay, both indexes kept (the shipped path)", f"{with_index:.1f}", f"{head / with_index:,.0f}"),
        ("  of which the search indexes (current and all versions)", f"{with_index - without:.1f}",
         f"{without / with_index:.2f}x the rate"),
    ])


if __name__ == "__main__":
    main()
