"""A new agent joining a team catches up: a hub (`mem serve`, uvicorn on 127.0.0.1, SQLite at
synchronous=FULL) holds N shared events — entries in an `entries` layer and page versions in a
`pages` layer — and a fresh workspace runs its first `mem pull` (a real process, timed whole:
start-up, contract, every page fetched, checked, appended, folded, files written).

Side by side, a follower agent pulled the same events incrementally as they arrived (the hub filled
in `--steps` rounds, a pull after each); the two workspaces' views (every view table) and files must
be identical, else the script fails (`--no-follower` fills the hub in one go and skips the comparison,
for a quicker run at full size). `--phases` then pulls once more into a third workspace inside
this process and says where the client's time goes (check, append, fold, files, waiting for the hub).
Usage: python bench/bench_catchup.py [-n 1000000] [--steps 10] [--no-follower] [--phases]
"""

import argparse
import shutil
import subprocess
import sys
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


def phases(base: Path, url: str, token: str) -> list[tuple]:
    """Seconds the client spends in each part of a first pull, timed in this process."""
    import projections.memory as memory_module
    import projections.replay as replay_module
    import sync.client as client_module

    spent = dict.fromkeys(("check (decode, digests, contract, validation)", "append to the log",
                           "fold into the views (page by page)", "build the views (mem replay's bulk fold)",
                           "write the files"), 0.0)

    def timing(name, fn):
        def timed_call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - start
        return timed_call

    names = list(spent)
    client_module.accept = timing(names[0], client_module.accept)
    memory_module.catch_up = timing(names[2], memory_module.catch_up)
    replay_module.catch_up = timing(names[3], replay_module.catch_up)
    memory_module.materialize = timing(names[4], memory_module.materialize)
    replay_module.materialize = timing(names[4], replay_module.materialize)
    with Memory.init(base / "phases", "newcomer") as memory:
        memory.log.append = timing(names[1], memory.log.append)
        start = time.perf_counter()
        pull(memory, Remote(name="origin", url=url, token_file="-", agent="newcomer"), HubClient(url, token))
        total = time.perf_counter() - start
    rows = [(name, f"{seconds:.1f}", f"{seconds / total:.0%}") for name, seconds in spent.items()]
    rows.append(("waiting for the hub, the rest", f"{total - sum(spent.values()):.1f}",
                 f"{(total - sum(spent.values())) / total:.0%}"))
    return [("part of the pull (in process)", "seconds", "share"), *rows, ("total", f"{total:.1f}", "100%")]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=1_000_000, help="shared events on the hub")
    parser.add_argument("--steps", type=int, default=10, help="rounds in which the follower pulls")
    parser.add_argument("--no-follower", action="store_true", help="no follower: no comparison of views")
    parser.add_argument("--phases", action="store_true", help="also time the parts of a pull in process")
    args = parser.parse_args()
    base = workdir("catchup")
    shutil.rmtree(base)
    base.mkdir()
    hub_db = str(base / "hub.db")
    admin = open_storage(hub_db)
    admin.apply_contract(CONTRACT)
    tokens = {a: admin.add_agent(a) for a in ("follower", "newcomer")}
    (base / "newcomer.token").write_text(tokens["newcomer"])
    proc, url = serve(hub_db)
    try:
        follower = Memory.init(base / "follower", "follower")
        remote = Remote(name="origin", url=url, token_file="-")
        client = HubClient(url, tokens["follower"])
        heads, made, follow_s, fill_s = {}, 0, 0.0, 0.0
        for step in range(args.steps):
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

        newcomer = base / "newcomer"
        Memory.init(newcomer, "newcomer").close()
        with Memory.open(newcomer) as memory:
            add_remote(memory, "origin", url, str(base / "newcomer.token"))
        start = time.perf_counter()
        done = subprocess.run([shutil.which("mem") or "mem", "pull"], cwd=newcomer, capture_output=True,
                              text=True)
        catchup_s = time.perf_counter() - start
        if done.returncode:
            raise SystemExit(f"mem pull failed: {done.stdout}{done.stderr}")
        parts = phases(base, url, tokens["newcomer"]) if args.phases else None
    finally:
        proc.terminate()
        proc.wait()

    with Memory.open(newcomer) as fresh:
        compared = not args.no_follower
        same_views = fresh.views.dump() == follower.views.dump() if compared else "not compared"
        same_files = snapshot(fresh.root) == snapshot(follower.root) if compared else "not compared"
        pulled = fresh.log.head()
    follower.close()
    rate = args.n / catchup_s
    table(f"a new agent's first `mem pull` of {args.n:,} shared events ({PAGES:,} pages, entries) over loopback",
          [("agent", "seconds", "events/s", "views identical", "files identical", "target"),
           ("newcomer: one `mem pull` process", f"{catchup_s:.1f}", f"{rate:,.0f}", same_views, same_files,
            "< 30 s for 1,000,000"),
           *([(f"follower: {args.steps} pulls as the hub filled", f"{follow_s:.1f}", f"{args.n / follow_s:,.0f}", "",
                "", "")] if compared else [])])
    print(f"\n`mem pull` said: {done.stdout.strip()}  (newcomer log head {pulled:,})")
    if parts:
        table("where a first pull's time goes (a third workspace, pulled in this process)", parts)
    if compared and not (same_views and same_files):
        raise SystemExit("the newcomer's views or files differ from the follower's")


if __name__ == "__main__":
    main()
