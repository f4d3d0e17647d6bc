"""`mem ui`: each page's server time (p50, p99) on a large workspace, against the 200 ms target and
against the library call the page is built on (the same read without HTML), side by side.

The workspace is built first (not timed), the way bench_replay.py builds its log, but with four
agents and two shared layers so that the timeline has lanes and the contract has producers: page
writes over 2,000 slugs with Always edits (the agent's own, 85%), shared `drafts` pages over 200 slugs
(10%) and `insights` entries (5%) by three other agents, one event a second (recorded_at too, so the
history spans days and the timeline sums real hours and minutes). The views, the files and the
activity counts are brought up to date before timing. Pages are served in-process (starlette's
TestClient): the time is the server's, open the workspace, read, render.

`--hub`: the hub's pages (`mem serve` at /ui) instead, over a SQLite hub of `-n` shared events
(`drafts` pages over 2,000 slugs with a few forks left open, `insights` entries; three agents, one
event a second, pull records along the way, the contract changed half-way). First the mirror's
catch-up (sync.mirror), a page of hub commits per transaction, against the way it was first written,
one transaction per hub commit, side by side on a hub of 20,000 events pushed two at a time (as agents
sync); then the mirror of all of them (built once, kept), then each page with the admin's token and
with an agent's.
Usage: python bench/bench_ui.py [-n 1000000] [--reads 30] [--hub]
"""

import argparse
import json
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from common import table, workdir

from starlette.testclient import TestClient

from cli.web.app import create_app
from cli.web.hub import hub_ui
from eventstore.envelope import new_event
from eventstore.layers import Contract, ContractLayer
from eventstore.kinds import AlwaysAdd, AlwaysRemove, EntryAppend, PageIngest, PageUpdate
from eventstore.sqlite import SQLiteLog
from eventstore.workspace import Workspace
from projections import history as histories
from projections.audit import believed
from projections.memory import Memory
from projections.views import page_path
from sync.mirror import HubMirror
from sync.storage import contract_event, encode_stored
from sync.storage_sqlite import SQLiteHubStorage

SLUGS, DRAFTS, OTHERS = 2000, 200, ("ada", "ben", "cy")
CONTRACT = {"layers": {
    "drafts": {"path": "content/drafts/", "format": "pages", "producers": ["*"], "consumers": ["*"]},
    "insights": {"path": "memory/insights.md", "format": "entries", "producers": ["*"], "consumers": ["*"]}}}
START = 1_790_000_000_000
COMMIT = 50  # events per append: one recorded_at each


def body_of(i: int, heads: dict) -> tuple[object, str, str, str | None]:
    """(body, agent, layer, head key) of the i-th event."""
    if i % 20 == 7:
        return (EntryAppend(type="DECISION", date="2026-11-30", content=f"decision {i}"), OTHERS[i // 20 % 3], "insights",
                None)
    if i % 10 == 3:
        slug, agent = f"draft-{i // 10 % DRAFTS}", OTHERS[i // 10 % 3]
        key, layer = f"drafts/{slug}", "drafts"
    elif i % 10 == 9:
        return (AlwaysAdd(line=f"rule {i}") if i % 20 == 9 else AlwaysRemove(line=f"rule {i - 10}")), "bench", "mind", None
    else:
        slug, agent, layer = f"page-{i % SLUGS}", "bench", "mind"
        key = slug
    fm = {"type": "note", "description": f"hook {i}"}
    text = f"# {slug}\n\nversion {i}\n"
    parent = heads.get(key)
    body = (PageUpdate(slug=slug, frontmatter=fm, text=text, note=f"v{i}", parents=[parent]) if parent
            else PageIngest(slug=slug, frontmatter=fm, text=text, note="new"))
    return body, agent, layer, key


def build_workspace(root: Path, n: int) -> None:
    Workspace.init(root, "bench")
    (root / ".mem" / "contract.json").write_text(json.dumps(CONTRACT))
    log = SQLiteLog(root / ".mem" / "log.db", synchronous="OFF")
    heads: dict[str, str] = {}
    batch = []
    for i in range(n):
        body, agent, layer, key = body_of(i, heads)
        event = new_event(body, agent=agent, layer=layer, ts=START + i * 1000)
        if key is not None:
            heads[key] = event.id
        batch.append(event)
        if len(batch) == COMMIT:
            log.append(batch, recorded_at=batch[0].ts)
            batch = []
    if batch:
        log.append(batch, recorded_at=batch[0].ts)
    log.close()


def percentiles_ms(fn, reads: int) -> tuple[float, float]:
    times = []
    for _ in range(reads):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, round(0.99 * (len(times) - 1)))]


def hub_body_of(i: int, heads: dict) -> tuple[object, str, str]:
    """(body, agent, layer) of the i-th hub event; every 100,003rd page version forks from its grandparent
    (a conflict left open: later versions name only the newest head)."""
    if i % 10 == 7:
        return EntryAppend(type="DECISION", date="2026-11-30", content=f"decision {i}"), OTHERS[i // 10 % 3], "insights"
    slug, agent = f"draft-{i % SLUGS}", OTHERS[i % 3]
    chain = heads.setdefault(slug, [])
    parent = chain[-2] if i % 100_003 == 5 and len(chain) > 1 else chain[-1] if chain else None
    text = f"# {slug}\n\nversion {i}\n"
    fm = {"type": "note", "description": f"hook {i}"}
    body = (PageUpdate(slug=slug, frontmatter=fm, text=text, note=f"v{i}", parents=[parent]) if parent
            else PageIngest(slug=slug, frontmatter=fm, text=text, note="new"))
    return body, agent, "drafts"


def hub_contract(insights_consumers: list[str]) -> Contract:
    return Contract(layers={
        "drafts": ContractLayer(path="content/drafts/", format="pages", producers=["*"], consumers=["*"]),
        "insights": ContractLayer(path="memory/insights.md", format="entries", producers=["*"],
                                  consumers=insights_consumers)})


def build_hub(db: Path, n: int, commit: int = COMMIT) -> dict[str, str]:
    """A SQLite hub of n shared events at one a second (commits of `commit` events, one hub time each), written
    straight into its tables; returns the agents' tokens."""
    storage = SQLiteHubStorage(str(db), synchronous="OFF")
    tokens = {agent: storage.add_agent(agent) for agent in OTHERS}
    storage.close()
    hub = sqlite3.connect(db, isolation_level=None)
    hub.execute("PRAGMA synchronous = OFF")
    hub.execute("BEGIN")
    heads: dict[str, list[str]] = {}
    position, rows, pulls = 0, [], []

    def put(event, at):
        nonlocal position
        position += 1
        rows.append((position, event.id, event.digest, event.agent, event.layer, at, encode_stored(event)))

    put(contract_event(hub_contract(["ada", "ben"])), START - 1000)
    for i in range(n):
        if i == n // 2:
            put(contract_event(hub_contract(["*"])), START + i * 1000)
        body, agent, layer = hub_body_of(i, heads)
        event = new_event(body, agent=agent, layer=layer, ts=START + i * 1000)
        if layer == "drafts":
            heads[body.slug].append(event.id)
        put(event, START + i // commit * commit * 1000)
        if i % 1000 == 999:
            pulls += [(agent, position - 50 * k, START + i * 1000) for k, agent in enumerate(OTHERS)]
        if len(rows) >= 10_000:
            hub.executemany("INSERT INTO hub_events VALUES (?,?,?,?,?,?,?)", rows)
            rows = []
    hub.executemany("INSERT INTO hub_events VALUES (?,?,?,?,?,?,?)", rows)
    hub.executemany("INSERT INTO hub_pulls VALUES (?,?,?)", pulls)
    hub.execute("COMMIT")
    hub.close()
    return tokens


def mirror_per_commit(storage, root: Path) -> None:
    """The baseline: the mirror's catch-up as first written, one transaction per hub commit."""
    Workspace.init(root, "bench")
    log = SQLiteLog(root / ".mem" / "log.db")
    head = 0
    while events := storage.pull(head, ["drafts", "insights", "_contract"], 5000):
        commit = []
        for event in events + [None]:
            if commit and (event is None or event.recorded_at != commit[0].recorded_at):
                log.append(commit, recorded_at=commit[0].recorded_at, state={"hub-position": str(commit[-1].seq)})
                commit = []
            if event is not None:
                commit.append(event)
                head = event.seq
    log.close()


def hub_main(args) -> None:
    work = workdir("ui")
    small = work / "hub-20000-pushes.db"
    if not small.exists():
        build_hub(small, 20_000, commit=2)
    storage = SQLiteHubStorage(str(small))
    rows = [("mirror catch-up, 20,000 hub events in pushes of 2", "s", "events/s")]
    for name, copy in (("one transaction per hub commit (before)", mirror_per_commit),
                       ("a page of commits per transaction", lambda s, r: HubMirror(s, r).catch_up())):
        runs = []
        for _ in range(2):
            root = Path(tempfile.mkdtemp(prefix="bench-mirror-", dir=work))
            start = time.perf_counter()
            copy(storage, root)
            runs.append(time.perf_counter() - start)
            shutil.rmtree(root)
        rows.append((name, f"{min(runs):.2f}", f"{20_000 / min(runs):,.0f}"))
    storage.close()
    rows.append(("ratio", f"{float(rows[1][1]) / float(rows[2][1]):.1f}x faster", ""))
    table("the hub mirror's first catch-up (best of 2)", rows)

    db = work / f"hub-{args.n}.db"
    if not db.exists():
        start = time.perf_counter()
        (work / f"hub-{args.n}.tokens.json").write_text(json.dumps(build_hub(db, args.n)))
        print(f"built a hub of {args.n:,} events in {time.perf_counter() - start:.1f}s (not part of the figures)")
    tokens = json.loads((work / f"hub-{args.n}.tokens.json").read_text())
    storage = SQLiteHubStorage(str(db))
    mirror = HubMirror(storage, work / f"hub-{args.n}.ui")
    start = time.perf_counter()
    before = mirror.log.head()
    head = mirror.catch_up()
    if head > before:
        took = time.perf_counter() - start
        print(f"the mirror caught up {head - before:,} hub positions in {took:.1f}s ({(head - before) / took:,.0f}/s)")
    memory = Memory.open(mirror.root)
    start = time.perf_counter()
    memory.refresh(files=False)
    memory.views.activity.catch_up(memory.log, memory.checkpoint(), memory.views.transaction)
    print(f"the mirror's views and activity up to date in {time.perf_counter() - start:.1f}s (not part of the figures)")
    middle = head // 2
    at_middle = memory.log.recorded_at(middle)
    memory.close()
    admin = "bench-admin-token"
    client = TestClient(hub_ui(storage, mirror, admin))
    urls = [("asof", "/asof?seq={m}"), ("asof (a shared file)", "/asof?seq={m}&file=content/drafts/draft-3.md"),
            ("asof (now)", "/asof"), ("history (a shared page)", "/history?path=content/drafts/draft-3.md"),
            ("history (any two)", "/history?path=content/drafts/draft-3.md&a=7&b={m}"),
            *pages_of_both(middle, at_middle)]
    rows = [("page", "token", "p50 ms", "p99 ms", "< 200 ms")]
    for who, token in (("admin", admin), ("ada", tokens["ada"])):
        headers = {"Authorization": f"Bearer {token}"}
        for name, url in urls:
            fetch = page(client, url, middle, headers)
            fetch()
            p50, p99 = percentiles_ms(fetch, args.reads)
            rows.append((name, who, f"{p50:.1f}", f"{p99:.1f}", "yes" if p99 < 200 else "NO"))
    table(f"the hub's /ui pages over its mirror, {head:,} hub positions ({args.reads} reads each, server time "
          "in-process)", rows)
    mirror.close()
    storage.close()



def pages_of_both(middle: int, at_middle: int) -> list[tuple[str, str]]:
    """The pages a workspace's view and the hub's /ui both serve, by the same URLs."""
    return [("timeline", "/timeline"), ("timeline (filtered)", "/timeline?kind=entry.append&agent=ada"),
            ("timeline (as of a moment)", "/timeline?seq={m}"),
            ("timeline (one hour)", f"/timeline?t0={at_middle - 3_600_000}&t1={at_middle}"),
            ("timeline (an event)", f"/timeline?event={middle}"),
            ("conflicts", "/conflicts"), ("search", "/search?q=version&seq={m}"), ("contract", "/contract"),
            ("contract (as of a moment)", "/contract?seq={m}")]

def page(client, url: str, middle: int, headers=None):
    """Each read at another moment where the URL names one ({m}: the middle plus a step per read), so
    nothing kept for one moment serves the next."""
    reads = iter(range(1 << 30))

    def fetch():
        answer = client.get(url.replace("{m}", str(middle + 997 * next(reads))), headers=headers)
        assert answer.status_code == 200, answer.text[:300]
    return fetch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=1_000_000)
    parser.add_argument("--reads", type=int, default=30)
    parser.add_argument("--hub", action="store_true", help="the hub's /ui pages over its mirror")
    args = parser.parse_args()
    if args.hub:
        return hub_main(args)
    root = workdir("ui") / f"ws-{args.n}"
    if not (root / ".mem" / "log.db").exists():
        start = time.perf_counter()
        build_workspace(root, args.n)
        print(f"built a log of {args.n:,} events in {time.perf_counter() - start:.1f}s (not part of the figures)")
    memory = Memory.open(root)
    start = time.perf_counter()
    memory.refresh()
    memory.views.activity.catch_up(memory.log, memory.checkpoint(), memory.views.transaction)
    print(f"views, files and activity up to date in {time.perf_counter() - start:.1f}s (not part of the figures)")
    head = memory.log.head()
    middle = head // 2
    at_middle = memory.log.recorded_at(middle)
    client = TestClient(create_app(root))

    moments = iter(range(1 << 30))
    library = {
        "asof": lambda: believed(memory.views, middle + 997 * next(moments), last=10, include_all=True, shared=False),
        "history": lambda: histories.history(memory, page_path("page-8"), head),
    }
    urls = [("asof", "/asof?seq={m}&page=page-8"), ("asof (a shared file)", "/asof?seq={m}&file=content/drafts/draft-3.md"), ("asof (now)", "/asof?page=page-8"),
            ("history", "/history?page=page-8"), ("history (a shared page)", "/history?path=content/drafts/draft-3.md"),
            ("history (any two)", "/history?page=page-8&a=7&b={m}"),
            *pages_of_both(middle, at_middle)]
    rows = [("page", "p50 ms", "p99 ms", "< 200 ms", "library call p50 ms", "ratio")]
    for name, url in urls:
        page(client, url, middle)()  # the first read of a page warms its SQLite pages, as any served page would be
        p50, p99 = percentiles_ms(page(client, url, middle), args.reads)
        base = library.get(name) if name in library else None
        base_ms = percentiles_ms(base, args.reads)[0] if base else None
        rows.append((name, f"{p50:.1f}", f"{p99:.1f}", "yes" if p99 < 200 else "NO", f"{base_ms:.1f}" if base_ms else "-",
                     f"{p50 / base_ms:.2f}x" if base_ms else "-"))
    table(f"mem ui pages on a {head:,}-event workspace ({args.reads} reads each, server time in-process)", rows)
    shared = memory.views.shared
    kept = percentiles_ms(lambda: shared.conflicts(memory.checkpoint()), args.reads)[0]
    every = percentiles_ms(lambda: shared.conflicts(memory.checkpoint() - 1), args.reads)[0]
    table("the open conflicts, side by side (p50 ms)", [
        ("from the kept heads (shared_heads)", "the statement over every version's parents (before)", "ratio"),
        (f"{kept:.1f}", f"{every:.1f}", f"{every / kept:.0f}x faster")])
    memory.close()


if __name__ == "__main__":
    main()
