"""`mem replay` on a large log of small events: events per second and peak RSS.

The log is built first (not timed): page ingests and updates over 2,000 slugs with Always edits
mixed in. Then the replay runs in a child process so its peak RSS is its own, alternating with the same
replay by the code of a baseline commit (`--baseline`, extracted with `git archive`) on the same events
(a log its own code built: the log's format may have changed since): the ratio is measured side by side.
Usage: python bench/bench_replay.py [-n 1000000] [--baseline REV | --baseline none] [--runs 2] [--laps]
"""

import argparse
import json
import shutil
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import table, workdir

from eventstore.envelope import new_event
from eventstore.kinds import AlwaysAdd, AlwaysRemove, PageIngest, PageUpdate
from eventstore.sqlite import SQLiteLog
from eventstore.workspace import Workspace

SLUGS = 2000
BASELINE = "d1975a4"  # main when the 200,000 events/s work began (views, search index and trust fields as they were)
REPO = Path(__file__).resolve().parent.parent


def build_log(root: Path, n: int) -> None:
    Workspace.init(root, "bench")
    log = SQLiteLog(root / ".mem" / "log.db", synchronous="OFF")
    heads: dict[str, str] = {}
    batch, ts = [], 1_790_000_000_000
    for i in range(n):
        ts += 1000
        if i % 10 == 9:
            body = AlwaysAdd(line=f"rule {i}") if i % 20 == 9 else AlwaysRemove(line=f"rule {i - 10}")
        else:
            slug = f"page-{i % SLUGS}"
            fm = {"type": "note", "description": f"hook {i}"}
            text = f"# Page {i % SLUGS}\n\nversion {i}\n"
            parent = heads.get(slug)
            body = (PageUpdate(slug=slug, frontmatter=fm, text=text, note=f"v{i}", parents=[parent]) if parent
                    else PageIngest(slug=slug, frontmatter=fm, text=text, note="new"))
        event = new_event(body, agent="bench", layer="mind", ts=ts)
        if isinstance(body, (PageIngest, PageUpdate)):
            heads[body.slug] = event.id
        batch.append(event)
        if len(batch) == 10_000:
            log.append(batch)
            batch = []
    if batch:
        log.append(batch)
    log.close()


CHILD = """
import json, resource, sys, time
from projections.memory import Memory
from projections.replay import replay
memory = Memory.open(sys.argv[1])  # in this code's shape already: PREPARE ran first
memory.views.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
start, cpu, helpers = time.perf_counter(), time.process_time(), children_cpu()
report = replay(memory)
print(json.dumps({"events": report.events, "seconds": time.perf_counter() - start,
                  "cpu": time.process_time() - cpu + children_cpu() - helpers,
                  "rss_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                             + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024}))
"""
"""The replay, timed in a child process (its peak RSS its own) that imports mindlog from PYTHONPATH only:
the same script times this tree and the baseline's. CPU seconds and peak RSS count the processes the replay
starts (the history writer's) with its own: the RSS as the sum of both peaks, as if they came at once."""

PREPARE = """
import sys
from projections.memory import Memory
Memory.open(sys.argv[1]).close()
"""
"""Run in a process of its own before each timed one: opening catches the views up (from nothing when the
other code's run left them in another shape), and that untimed build's peak RSS is not the replay's."""


def extract(rev: str, into: Path) -> Path | None:
    """The tree of commit `rev` of this repository, or None when it cannot be had (no git, no such commit)."""
    try:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return into


BUILD = """
import sys
from pathlib import Path
sys.path.insert(0, str(Path(sys.argv[1]) / "bench"))
from bench_replay import build_log
build_log(Path(sys.argv[2]), int(sys.argv[3]))
"""
"""The log built by the baseline's own code (its bench script's build_log): a log this tree wrote may be in
a format the older code cannot read, and this tree reads (or migrates) the older format."""


def baseline_log(code: Path, rev: str, n: int) -> Path:
    root = workdir("replay") / f"ws-{n}-{rev}"
    if not (root / ".mem" / "log.db").exists():
        shutil.rmtree(root, ignore_errors=True)
        subprocess.run([sys.executable, "-c", BUILD, str(code), str(root), str(n)], check=True,
                       env={**os.environ, "PYTHONPATH": str(code)}, cwd=tempfile.gettempdir())
    return root


def run_child(code: Path, root: Path, laps: bool = False) -> dict:
    """One timed replay; with `laps`, its processes' laps printed (projections.bulk.Laps)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    subprocess.run([sys.executable, "-c", PREPARE, str(root)], capture_output=True, check=True, env=env,
                   cwd=tempfile.gettempdir())
    with tempfile.NamedTemporaryFile("r", prefix="mem-laps-") as times:
        if laps:
            env["MEM_REPLAY_TIMES"] = times.name
        out = subprocess.run([sys.executable, "-c", CHILD, str(root)], capture_output=True, text=True, check=True,
                             env=env, cwd=tempfile.gettempdir())
        for line in times:
            print(f"  laps, {line.rstrip()}")
    return json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=1_000_000)
    parser.add_argument("--baseline", default=BASELINE, help="a commit to compare with, or 'none'")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--laps", action="store_true", help="print where this tree's replays spend their time")
    args = parser.parse_args()
    root = workdir("replay") / f"ws-{args.n}"
    if not (root / ".mem" / "log.db").exists():
        shutil.rmtree(root, ignore_errors=True)
        start = time.perf_counter()
        build_log(root, args.n)
        print(f"built a log of {args.n:,} events in {time.perf_counter() - start:.1f}s (not part of the figures)")
    with tempfile.TemporaryDirectory(prefix="mem-bench-baseline-") as tmp:
        baseline = extract(args.baseline, Path(tmp)) if args.baseline != "none" else None
        if args.baseline != "none" and baseline is None:
            print(f"baseline {args.baseline} could not be extracted with git archive: measuring this code alone")
        base_root = baseline_log(baseline, args.baseline, args.n) if baseline is not None else None
        runs, base_runs = [], []
        for _ in range(args.runs):
            runs.append(run_child(REPO, root, args.laps))
            if baseline is not None:
                base_runs.append(run_child(baseline, base_root))
    best = min(runs, key=lambda r: r["seconds"])
    log_mb = (root / ".mem" / "log.db").stat().st_size / 1e6
    rows = [("code", "events/s", "seconds", "CPU seconds", "peak RSS MB", "targets")]
    rows.append(("this tree", f"{best['events'] / best['seconds']:,.0f}", f"{best['seconds']:.1f}",
                 f"{min(r['cpu'] for r in runs):.1f}", f"{best['rss_mb']:.0f}", ">= 200,000 events/s, < 300 MB"))
    if base_runs:
        base = min(base_runs, key=lambda r: r["seconds"])
        base_cpu = min(r["cpu"] for r in base_runs)
        rows.append((f"baseline {args.baseline}", f"{base['events'] / base['seconds']:,.0f}", f"{base['seconds']:.1f}",
                     f"{base_cpu:.1f}", f"{base['rss_mb']:.0f}", ""))
        rows.append(("ratio (baseline / this tree)", f"{base['seconds'] / best['seconds']:.2f}x", "",
                     f"{base_cpu / min(r['cpu'] for r in runs):.2f}x", "", "(best of each, run alternately)"))
    table(f"mem replay of {best['events']:,} events (log {log_mb:.0f} MB; views rebuilt, files rewritten); "
          f"load average {os.getloadavg()[0]:.2f}", rows)


if __name__ == "__main__":
    main()
