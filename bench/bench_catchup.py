"""A new agent joining a team catches up: a hub (`mem serve`, uvicorn on 127.0.0.1, SQLite at
synchronous=FULL) holds N shared events — entries in an `entries` layer and page versions in a
`pages` layer — and a fresh workspace runs its first `mem pull` (a real process, timed whole:
start-up, contract, every page fetched, checked, appended, folded, files written).

Side by side, a follower agent pulled the same events incrementally as they arrived (the hub filled
in `--steps` rounds, a pull after each); the two workspaces' views (every view table) and files must
be identical, else the script fails (`--no-follower` fills the hub in one go and skips the comparison,
for a quicker run at full size). `--phases` then pulls once more into a third workspace inside
this process and says where the client's time goes (check, append, fold, files, waiting for the hub,
and how long the views took to finish after the last page). `--baseline REV` times, side by side, the
`mem pull` of commit REV (extracted with `git archive`) into a fourth workspace, and checks that its
views and files are the newcomer's: 02aba1d is the pull before catch-ups, which folded page by page.
`--reuse` (with `--no-follower`) keeps the hub an earlier run filled with as many events: only the pulls
run (a newcomer agent of its own each time), once the hub's start-up work is done.
`--pairs N` (with --baseline) pulls N times with each code, the order alternating pair by pair, and compares the
medians: the second of two back-to-back pulls of the same code ran about 8% faster than the first.
Usage: python bench/bench_catchup.py [-n 1000000] [--steps 10] [--no-follower] [--reuse] [--phases]
[--baseline 02aba1d [--pairs 4]]
"""

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import table, workdir

from eventstore.envelope import new_event
from eventstore.kinds import EntryAppend, PageIngest, PageUpdate
from projections.memory import Memory
from sync.client import HubClient, Remote, add_remote, pull
from sync.storage import open_storage
from sync.wire import Contract, ContractLayer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from bench_replay import extract  # noqa: E402
from bench_sync import serve  # noqa: E402

CONTRACT = Contract(layers={
    "insights": ContractLayer(path="memory/insights.md", format="entries", producers=["*"], consumers=["*"]),
    "docs": ContractLayer(path="docs/", format="pages", producers=["*"], consumers=["*"])})
PAGES = 2000


def team_events(start: int, count: int, heads: dict[str, str]) -> list:
    """`count` events of a team: four entries to one page version (over PAGES pages), deterministic text."""
    events = []
    for i in range(start, start + count):
        if i % 5 == 4:
            slug = f"page-{(i // 5) % PAGES}"
            text = f"# {slug}\n\nversion {i // 5 // PAGES} of this page, written at step {i}.\n"
            body = (PageUpdate(slug=slug, frontmatter={"type": "note"}, text=text, parents=[heads[slug]])
                    if slug in heads else PageIngest(slug=slug, frontmatter={"type": "note"}, text=text))
            event = new_event(body, agent=f"writer{i % 3}", layer="docs")
            heads[slug] = event.id
        else:
            event = new_event(EntryAppend(type="FACT", date="2026-11-29", content=f"fact number {i} about the system"),
                              agent=f"writer{i % 3}", layer="insights")
        events.append(event)
    return events


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".mem" not in p.parts}


def phases(base: Path, url: str, token: str, agent: str) -> list[tuple]:
    """Seconds the client spends in each part of a first pull, timed in this process. The views are
    built in a process of their own while the pages come in (timed from its start to its end, merge
    included), so the parts add up to more than the whole."""
    import projections.replay as replay_module
    import sync.client as client_module

    spent = dict.fromkeys(("check (decode, digests, contract, validation)", "append to the log",
                           "build the views (bulk, a process of its own)", "write the files"), 0.0)
    appended = [0.0]

    def timing(name, fn):
        def timed_call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - start
                appended[0] = time.perf_counter() if fn is append else appended[0]
        return timed_call

    names = list(spent)
    client_module.accept = timing(names[0], client_module.accept)
    replay_module._build = timing(names[2], replay_module._build)
    replay_module.materialize = timing(names[3], replay_module.materialize)
    with Memory.init(base / "phases", agent) as memory:
        append = memory.log.append
        memory.log.append = timing(names[1], append)
        start = time.perf_counter()
        pull(memory, Remote(name="origin", url=url, token_file="-", agent=agent), HubClient(url, token))
        total = time.perf_counter() - start
    pages = appended[0] - start
    rows = [(name, f"{seconds:.1f}", f"{seconds / total:.0%}") for name, seconds in spent.items()]
    rows += [("pages: waiting for the hub, the rest", f"{pages - spent[names[0]] - spent[names[1]]:.1f}", ""),
             ("after the last page (the fold's rest, indexes, files)", f"{total - pages:.1f}",
              f"{(total - pages) / total:.0%}")]
    return [("part of the pull (in process)", "seconds", "of total"), *rows, ("total", f"{total:.1f}", "100%")]


def first_pull(workspace: Path, url: str, token_file: Path, agent: str,
               code: Path | None = None) -> tuple[float, str, float]:
    """A new workspace's first `mem pull`, one process timed whole (by the `mem` of `code` when given): its
    seconds, what it said, and the CPU seconds of it and of the processes it started."""
    Memory.init(workspace, agent).close()
    with Memory.open(workspace) as memory:
        add_remote(memory, "origin", url, str(token_file))
    command = [shutil.which("mem") or "mem"] if code is None else [sys.executable, "-c", "from cli.app import main; main()"]
    env = os.environ if code is None else {**os.environ, "PYTHONPATH": str(code)}
    start, cpu = time.perf_counter(), children_cpu()
    done = subprocess.run([*command, "pull"], cwd=workspace, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"mem pull failed: {done.stdout}{done.stderr}")
    return seconds, done.stdout.strip(), children_cpu() - cpu


def holds(hub_db: str, n: int) -> bool:
    """Whether the hub at `hub_db` holds this bench's contract and `n` events after it (an earlier run's)."""
    if not Path(hub_db).exists():
        return False
    storage = open_storage(hub_db)
    try:
        return storage.head() == n + 1 and storage.contract()[0] == CONTRACT
    finally:
        storage.close()


def settled(pid: int) -> None:
    """Waits until the hub process is idle: a hub started over a filled database first copies it into the
    mirror its web pages read (`mem serve`), which would be timed with the pull otherwise."""
    from bench_sync import cpu_seconds

    last = cpu_seconds(pid)
    while True:
        time.sleep(1)
        now = cpu_seconds(pid)
        if now - last < 0.05:
            return
        last = now


def median_run(runs: list[tuple[float, float]]) -> tuple[float, float]:
    """The median of some pulls' seconds, and the median of their CPU seconds."""
    return statistics.median(seconds for seconds, _ in runs), statistics.median(cpu for _, cpu in runs)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=1_000_000, help="shared events on the hub")
    parser.add_argument("--steps", type=int, default=10, help="rounds in which the follower pulls")
    parser.add_argument("--no-follower", action="store_true", help="no follower: no comparison of views")
    parser.add_argument("--phases", action="store_true", help="also time the parts of a pull in process")
    parser.add_argument("--baseline", default="none", help="a commit whose `mem pull` runs side by side, or 'none'")
    parser.add_argument("--pairs", type=int, default=1,
                        help="with --baseline: pulls of each, the order alternating pair by pair (this tree first, "
                             "then the baseline first, ...); the medians are compared")
    parser.add_argument("--reuse", action="store_true",
                        help="with --no-follower: keep the hub an earlier run filled with -n events")
    args = parser.parse_args()
    base = workdir("catchup")
    hub_db = str(base / "hub.db")
    reuse = args.reuse and args.no_follower and holds(hub_db, args.n)
    if reuse:
        for name in ("newcomer", "baseline", "phases", "follower"):
            shutil.rmtree(base / name, ignore_errors=True)
    else:
        shutil.rmtree(base)
        base.mkdir()
    admin = open_storage(hub_db)
    if not reuse:
        admin.apply_contract(CONTRACT)
    run = str(int(time.time())) if reuse else ""  # the agents of an earlier run are the hub's already
    agents = {"follower": f"follower{run}", "newcomer": f"newcomer{run}"}
    tokens = {role: admin.add_agent(name) for role, name in agents.items()}
    (base / "newcomer.token").write_text(tokens["newcomer"])
    proc, url = serve(hub_db)
    try:
        if reuse:
            settled(proc.pid)
        follower = Memory.init(base / "follower", agents["follower"])
        remote = Remote(name="origin", url=url, token_file="-")
        client = HubClient(url, tokens["follower"])
        heads, made, follow_s, fill_s = {}, 0, 0.0, 0.0
        for step in range(0 if reuse else args.steps):
            count = args.n * (step + 1) // args.steps - made
            start = time.perf_counter()
            batch = team_events(made, count, heads)
            for i in range(0, count, 10_000):
                admin.push(batch[i:i + 10_000])
            made += count
            fill_s += time.perf_counter() - start
            if args.no_follower:
                continue
            start = time.perf_counter()
            pull(follower, remote, client)
            follow_s += time.perf_counter() - start
            print(f"  hub holds {made:,} events; the follower pulled up ({fill_s:.0f} s filling, {follow_s:.0f} s pulling)",
                  file=sys.stderr)
        client.close()
        admin.close()

        newcomer, old = base / "newcomer", base / "baseline"
        load = os.getloadavg()[0]
        runs: dict[Path, list[tuple[float, float]]] = {newcomer: [], old: []}  # (seconds, CPU seconds) of each pull
        said = ""
        with tempfile.TemporaryDirectory(prefix="mem-bench-baseline-") as tmp:
            code = None
            if args.baseline != "none":
                code = extract(args.baseline, Path(tmp))
                if code is None:
                    raise SystemExit(f"baseline {args.baseline} could not be extracted with git archive")
            for pair in range(args.pairs if code is not None else 1):
                for workspace in ((newcomer, old) if pair % 2 == 0 else (old, newcomer))[:1 if code is None else 2]:
                    shutil.rmtree(workspace, ignore_errors=True)
                    seconds, told, cpu = first_pull(workspace, url, base / "newcomer.token", agents["newcomer"],
                                                    code if workspace == old else None)
                    runs[workspace].append((seconds, cpu))
                    if workspace == newcomer:
                        said = told
        catchup_s, catchup_cpu = median_run(runs[newcomer])
        baseline_s, baseline_cpu = median_run(runs[old]) if runs[old] else (None, None)
        parts = phases(base, url, tokens["newcomer"], agents["newcomer"]) if args.phases else None
    finally:
        proc.terminate()
        proc.wait()

    with Memory.open(newcomer) as fresh:
        compared = not args.no_follower
        same_views = fresh.views.dump() == follower.views.dump() if compared else "not compared"
        same_files = snapshot(fresh.root) == snapshot(follower.root) if compared else "not compared"
        pulled = fresh.log.head()
        if baseline_s is not None:
            with Memory.open(old) as other:
                same_as_baseline = (fresh.views.dump() == other.views.dump(), snapshot(fresh.root) == snapshot(old))
    follower.close()
    rate = args.n / catchup_s
    table(f"a new agent's first `mem pull` of {args.n:,} shared events ({PAGES:,} pages, entries) over loopback",
          [("agent", "seconds", "CPU seconds", "events/s", "views identical", "files identical", "target"),
           ("newcomer: one `mem pull` process", f"{catchup_s:.1f}", f"{catchup_cpu:.1f}", f"{rate:,.0f}", same_views,
            same_files, "< 30 s for 1,000,000"),
           *([(f"baseline {args.baseline}: one `mem pull` process", f"{baseline_s:.1f}", f"{baseline_cpu:.1f}",
               f"{args.n / baseline_s:,.0f}", *same_as_baseline, f"newcomer {baseline_s / catchup_s:.2f}x faster")]
             if baseline_s is not None else []),
           *([(f"follower: {args.steps} pulls as the hub filled", f"{follow_s:.1f}", "", f"{args.n / follow_s:,.0f}",
               "", "", "")] if compared else [])])
    print(f"\n`mem pull` said: {said}  (newcomer log head {pulled:,}; 1-minute load average "
          f"{load:.1f} when it started, on {os.cpu_count()} cores)")
    if len(runs[newcomer]) > 1:
        for workspace, name in ((newcomer, "this tree"), (old, f"baseline {args.baseline}")):
            print(f"  {name}, pair by pair (seconds): " + ", ".join(f"{seconds:.1f}" for seconds, _ in runs[workspace]))
        print("  (the medians are in the table; the first pull of a pair ran about 8% slower than the second when both "
              "were the same code)")
    if parts:
        table("where a first pull's time goes (a third workspace, pulled in this process)", parts)
    if compared and not (same_views and same_files):
        raise SystemExit("the newcomer's views or files differ from the follower's")
    if baseline_s is not None and not all(same_as_baseline):
        raise SystemExit("the newcomer's views or files differ from the baseline's")


if __name__ == "__main__":
    main()
