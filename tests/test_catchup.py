"""A new agent's first pull of a team's history: the same views and files as an agent that pulled
along as the events arrived, a progress bar on a terminal, nothing broken without one. A pull over
sync.client.BULK_FOLD_THRESHOLD appends every page, then builds the views with `mem replay`'s bulk
fold: the same views again, and a kill at any point of it loses and duplicates nothing."""

import os
import pty
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import mem_command, run_mem
from eventstore.envelope import new_event
from eventstore.errors import StorageFailure
from eventstore.kinds import EntryAppend, PageIngest, PageUpdate
import sync.client as client_module
from projections.bulk import discard, spawn_builder
from projections.memory import Memory
from projections.replay import check, replay
from sync.client import BULK_FOLD_THRESHOLD, HubClient, Remote, get_remote, pull
from sync.committer import PULL_RECORD_DELAY
from sync.storage import open_storage
from sync.wire import MAX_PULL, Contract, ContractLayer

from hubserver import HubServer

CONTRACT = Contract(layers={
    "insights": ContractLayer(path="memory/insights.md", format="entries", producers=["*"], consumers=["*"]),
    "docs": ContractLayer(path="docs/", format="pages", producers=["*"], consumers=["*"])})
EVENTS = 2000
ROUNDS = 4


def team_events(start: int, count: int, heads: dict[str, str]) -> list:
    """Entries, and versions of 40 pages (one event in five), from three writers."""
    events = []
    for i in range(start, start + count):
        if i % 5 == 4:
            slug = f"page-{(i // 5) % 40}"
            text = f"# {slug}\n\nversion written at step {i}.\n"
            body = (PageUpdate(slug=slug, frontmatter={"type": "note"}, text=text, parents=[heads[slug]])
                    if slug in heads else PageIngest(slug=slug, frontmatter={"type": "note"}, text=text))
            event = new_event(body, agent=f"writer{i % 3}", layer="docs")
            heads[slug] = event.id
        else:
            event = new_event(EntryAppend(type="FACT", date="2026-11-29", content=f"fact {i}"),
                              agent=f"writer{i % 3}", layer="insights")
        events.append(event)
    return events


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".mem" not in p.parts}


def children() -> set[int]:
    """This process's child processes (the hub of the fixtures runs in a thread; a thread that ends while they are
    read has none)."""
    found = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            found.update(int(pid) for pid in (task / "children").read_text().split())
        except FileNotFoundError:
            continue
    return found


@pytest.fixture
def team(tmp_path):
    """A hub that received EVENTS events in ROUNDS rounds, a follower that pulled after each round, and
    a newcomer workspace with the hub as its remote (not pulled yet)."""
    db = str(tmp_path / "hub.db")
    storage = open_storage(db)
    storage.apply_contract(CONTRACT)
    tokens = {name: storage.add_agent(name) for name in ("follower", "newcomer")}
    (tmp_path / "newcomer.token").write_text(tokens["newcomer"])
    with HubServer(db) as server, Memory.init(tmp_path / "follower", "follower") as follower:
        client = HubClient(server.url, tokens["follower"])
        remote = Remote(name="origin", url=server.url, token_file="-", agent="follower")
        heads = {}
        for round in range(ROUNDS):
            storage.push(team_events(round * EVENTS // ROUNDS, EVENTS // ROUNDS, heads))
            pull(follower, remote, client)
        client.close()
        storage.close()
        newcomer = tmp_path / "newcomer"
        Memory.init(newcomer, "newcomer").close()
        run_mem("remote", "add", "origin", server.url, "--token-file", tmp_path / "newcomer.token", "-w", newcomer,
                check=True)
        yield follower, newcomer


def test_a_first_pull_gives_the_views_and_files_of_an_agent_that_followed_along(team):
    follower, newcomer = team
    result = run_mem("pull", "-w", newcomer)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().strip() == f"pulled {EVENTS} events from origin"
    assert result.stderr == b""  # no terminal: no progress bar, nothing else either
    with Memory.open(newcomer) as fresh:
        assert fresh.log.head() == EVENTS
        assert fresh.views.dump() == follower.views.dump()
        assert snapshot(fresh.root) == snapshot(follower.root)
        assert len(list((fresh.root / "docs").glob("*.md"))) == 40
        assert run_mem("replay", "--check", "-w", newcomer).returncode == 0


def draw(command: list[str]) -> tuple[int, str, str]:
    """Runs a `mem` command on a terminal (its stderr): exit code, stdout, and what it drew."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "TERM": "xterm"}
    env.pop("MEM_WORKSPACE", None)
    process = subprocess.Popen([*mem_command(), *command], stdout=subprocess.PIPE, stderr=terminal, env=env)
    os.close(terminal)
    drawn = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the process closed the terminal
            break
        if not chunk:
            break
        drawn += chunk
    out, _ = process.communicate(timeout=300)
    os.close(controller)
    return process.returncode, out.decode(), drawn.decode(errors="replace")


def test_a_first_pull_on_a_terminal_draws_a_progress_bar_to_the_hub_head(team):
    _follower, newcomer = team
    code, out, screen = draw(["pull", "-w", str(newcomer)])
    assert code == 0
    assert out.strip() == f"pulled {EVENTS} events from origin"
    assert "pull" in screen and "━" in screen, screen[:500]
    total = EVENTS + 1  # hub positions: the contract, then the team's events
    assert f"/{total}" in screen, screen[-500:]


def test_a_catch_up_over_the_threshold_builds_the_views_once_as_the_follower_folded_them(team, monkeypatch,
                                                                                        tmp_path):
    follower, newcomer = team
    monkeypatch.setattr(client_module, "BULK_FOLD_THRESHOLD", 1000)
    monkeypatch.setattr(client_module, "CATCH_UP_BATCH", 400)
    rebuilt = []

    def replaying(memory, **options):
        report = replay(memory, **options)
        rebuilt.append(report.checkpoint)
        return report

    monkeypatch.setattr(client_module, "replay", replaying)
    niceness, appending = [], client_module._append_pages

    def append_pages(*args):
        niceness.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return appending(*args)

    monkeypatch.setattr(client_module, "_append_pages", append_pages)
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    with Memory.open(newcomer) as fresh:
        remote = get_remote(fresh, None)
        with HubClient.for_remote(remote) as client:
            pages, answer = [], client.pull_page
            client.pull_page = lambda *args, **kwargs: pages.append(answer(*args, **kwargs)) or pages[-1]
            report = pull(fresh, remote, client)
            assert report.pulled == EVENTS and not report.rejected
            # the last CATCH_UP_BATCH positions come in smaller pages (the build's tail), the empty one acknowledges
            assert [len(page.events) for page in pages] == [400] * 4 + [200, 100, 100, 0]
            # the appends yield to the views build; this thread, which starts the build, does not
            assert niceness == [min(own + client_module.YIELD_NICE, 19) if sys.platform == "linux" else own]
            assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own
            assert rebuilt == [EVENTS]  # one bulk build of the views, up to the last page
            assert fresh.views.dump() == follower.views.dump()
            assert snapshot(fresh.root) == snapshot(follower.root)
            assert pull(fresh, remote, client).pulled == 0 and rebuilt == [EVENTS]  # caught up: no rebuild
        time.sleep(PULL_RECORD_DELAY + 0.5)
        hub = open_storage(str(tmp_path / "hub.db"))
        assert hub.received_by("newcomer", None) == hub.head()  # the last request acknowledged everything
        hub.close()


def test_a_catch_up_cut_off_by_the_hub_leaves_the_views_as_they_were_and_the_next_pull_ends_it(team, monkeypatch):
    follower, newcomer = team
    monkeypatch.setattr(client_module, "BULK_FOLD_THRESHOLD", 1000)
    monkeypatch.setattr(client_module, "PULL_BATCH", 400)
    monkeypatch.setattr(client_module, "CATCH_UP_BATCH", 400)
    with Memory.open(newcomer) as fresh:
        remote = get_remote(fresh, None)
        with HubClient.for_remote(remote) as client:
            answered = client.pull_page
            calls = []

            def failing(*args, **kwargs):
                calls.append(args)
                if len(calls) == 3:
                    raise client_module.HubUnreachable("the hub went away")
                return answered(*args, **kwargs)

            def failing_first():
                raise client_module.HubUnreachable("the hub went away")

            before = children()
            client.pull_page = lambda *args, **kwargs: failing_first()
            with pytest.raises(client_module.HubUnreachable):  # the views build's process was started ahead
                pull(fresh, remote, client)
            assert fresh.log.head() == 0 and children() == before  # it was ended with the pull
            client.pull_page = failing
            with pytest.raises(client_module.HubUnreachable):
                pull(fresh, remote, client)
            assert children() == before
            kept = fresh.log.head()
            assert 0 < kept < EVENTS  # the pages that came are kept, with their cursor
            assert fresh.views.checkpoint() == 0 and not (newcomer / "docs").exists()  # the build gave up
            client.pull_page = answered
            assert pull(fresh, remote, client).pulled == EVENTS - kept
        assert fresh.views.checkpoint() == EVENTS
        assert fresh.views.dump() == follower.views.dump()
        assert snapshot(fresh.root) == snapshot(follower.root)


def test_a_catch_up_asks_smaller_pages_only_near_a_head_the_hub_said():
    batch = client_module.CATCH_UP_BATCH
    assert [client_module.tail_limit(100_001, reached) for reached in (0, 60_000, 80_000, 90_000, 95_000)] == \
        [batch, batch, batch // 2, batch // 4, batch // 4]
    assert client_module.tail_limit(0, 80_000) == batch  # a hub that does not say its head: whole pages


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_views_build_started_ahead_starts_its_writer_and_ends_it_when_discarded():
    """The views build's process, started ahead of a catch-up, starts the history writer's at once (both import
    while the first page is on its way); a build never told what to build is discarded with its writer."""
    builder = spawn_builder()
    deadline = time.monotonic() + 60
    while not (writers := [int(pid) for task in Path(f"/proc/{builder.pid}/task").iterdir()
                           for pid in (task / "children").read_text().split()]):
        assert time.monotonic() < deadline and builder.poll() is None
        time.sleep(0.01)
    discard(builder)
    while alive(writers[0]):  # its stdin closed with the builder: it stops without writing
        assert time.monotonic() < deadline
        time.sleep(0.01)


def hub_of_ten_events(tmp_path):
    """A hub database with the contract and ten team events, and the token of an agent that has pulled none."""
    db = str(tmp_path / "hub.db")
    storage = open_storage(db)
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("newcomer")
    storage.push(team_events(0, 10, {}))
    return db, storage, token


def test_a_pull_asked_ahead_is_recorded_at_the_cursor_the_agent_holds(tmp_path):
    """A catch-up asks for the next page before it has stored the one in hand: the hub records what the
    request says is held, not the cursor it asks from."""
    db, storage, token = hub_of_ten_events(tmp_path)
    with HubServer(db) as server, HubClient(server.url, token) as client:
        first = client.pull_page("", 4)
        second = client.pull_page(first.cursor, 4, held="")
        assert first.head == second.head == storage.head() == 11
        time.sleep(PULL_RECORD_DELAY + 0.5)
        assert storage.received_by("newcomer", None) == 0
        client.pull_page(second.cursor, 4, held=first.cursor)
        time.sleep(PULL_RECORD_DELAY + 0.5)
        assert storage.received_by("newcomer", None) == 5  # the contract, then the first page's four
        client.pull_page(second.cursor, 4)
        time.sleep(PULL_RECORD_DELAY + 0.5)
        assert storage.received_by("newcomer", None) == 9
    storage.close()


def test_the_contract_answer_says_how_far_the_hub_has_come(tmp_path):
    """A pull knows from the contract's answer, before its first page, whether it is a catch-up (that page is
    then a catch-up's size, and the views build's process starts while it is on its way)."""
    db, storage, token = hub_of_ten_events(tmp_path)
    with HubServer(db) as server, HubClient(server.url, token) as client:
        answer = client.contract()
        assert (answer.position, answer.head) == (1, 11) and answer.head == storage.head()
    storage.close()


def log_head(root: Path) -> int:
    db = sqlite3.connect(f"file:{root / '.mem' / 'log.db'}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute("SELECT IFNULL(MAX(seq), 0) FROM events").fetchone()[0]
    finally:
        db.close()


def shared_log(root: Path) -> list[tuple]:
    """The log as any agent holding these events has it (not when this one recorded them)."""
    db = sqlite3.connect(root / ".mem" / "log.db")
    try:
        return db.execute("SELECT seq, id, ts, agent, layer, kind, codec, body, digest FROM events ORDER BY seq").fetchall()
    finally:
        db.close()


def killed_when(workspace: Path, ready) -> None:
    """Runs `mem pull` in `workspace` and SIGKILLs it as soon as `ready()` is true (it must not finish first)."""
    process = subprocess.Popen([*mem_command(), "pull", "-w", str(workspace)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    while not ready() and process.poll() is None:
        time.sleep(0.005)
    process.kill()
    assert process.wait(timeout=60) == -signal.SIGKILL, "the pull ended before it could be killed"


def test_a_catch_up_killed_while_appending_and_while_building_ends_as_an_uninterrupted_one(tmp_path):
    count = BULK_FOLD_THRESHOLD + MAX_PULL + 1000  # three pages: killed once the first is stored, a whole page ahead
    db = str(tmp_path / "hub.db")
    storage = open_storage(db)
    storage.apply_contract(CONTRACT)
    heads: dict[str, str] = {}
    for start in range(0, count, 5000):
        storage.push(team_events(start, min(5000, count - start), heads))
    for agent in ("steady", "newcomer"):
        (tmp_path / f"{agent}.token").write_text(storage.add_agent(agent))
    storage.close()
    steady, newcomer = tmp_path / "steady", tmp_path / "newcomer"
    with HubServer(db) as server:
        for workspace in (steady, newcomer):
            Memory.init(workspace, workspace.name).close()
            run_mem("remote", "add", "origin", server.url, "--token-file", tmp_path / f"{workspace.name}.token",
                    "-w", workspace, check=True)

        code, out, screen = draw(["pull", "-w", str(steady)])
        assert code == 0 and out.strip() == f"pulled {count} events from origin"
        assert f"/{count + 1}" in screen and "views" in screen, screen[-800:]  # pages, then the views' own bar

        killed_when(newcomer, lambda: log_head(newcomer) > 0)
        assert 0 < log_head(newcomer) < count  # killed between two pages: each came whole, with its cursor
        rebuild = newcomer / ".mem" / "views.db.rebuild"
        killed_when(newcomer, lambda: log_head(newcomer) == count and rebuild.exists())
        assert rebuild.exists()  # killed while the views were built: not swapped in yet
        result = run_mem("pull", "-w", newcomer)
        assert result.returncode == 0, result.stderr
        assert result.stdout.decode().strip() == "pulled 0 events from origin"

    assert shared_log(newcomer) == shared_log(steady)
    with Memory.open(steady) as one, Memory.open(newcomer) as other:
        assert other.views.checkpoint() == count
        assert other.views.dump() == one.views.dump()
    assert snapshot(newcomer) == snapshot(steady)
    assert run_mem("verify", "-w", newcomer).returncode == 0


def test_the_next_command_after_a_catch_up_cut_off_builds_the_views_from_nothing(tmp_path):
    """A catch-up killed after it appended its pages leaves the views far behind the log: the next command's
    refresh builds them anew (a new views file swapped in, as `mem replay` does), not batch by batch."""
    workspace = tmp_path / "ws"
    count = BULK_FOLD_THRESHOLD + 1000
    with Memory.init(workspace, "newcomer") as memory:
        memory.write_page("first", b"---\ntype: note\n---\n# First\n", "")
        heads: dict[str, str] = {}
        events = []
        for i in range(count):
            slug = f"page-{i % 50}"
            fm = {"type": "note", "description": f"hook {i}"}
            body = (PageUpdate(slug=slug, frontmatter=fm, text=f"# P {i}\n", note="v", parents=[heads[slug]])
                    if slug in heads else PageIngest(slug=slug, frontmatter=fm, text="# P\n", note="new"))
            events.append(new_event(body, agent="newcomer", layer="mind"))
            heads[slug] = events[-1].id
        memory.log.append(events)  # what a catch-up stores before its build of the views was cut off
    views = workspace / ".mem" / "views.db"
    before = views.stat().st_ino
    assert run_mem("-w", workspace, "show", "mind/page-7.md").stdout.decode().endswith(f"# P {count - 43}\n")
    assert views.stat().st_ino != before  # built from nothing into a new file, not folded into in place
    with Memory.open(workspace) as memory:
        assert memory.views.checkpoint() == count + 1
        assert check(memory).same


def test_a_redaction_among_the_pages_of_a_catch_up_builds_the_views_once_more(tmp_path, monkeypatch):
    """The catch-up notes the redactions among the pages it stores (the log is not read back for them): one
    pulled after the build may have folded its target makes the views built once more, as `mem replay` would."""
    monkeypatch.setattr(client_module, "BULK_FOLD_THRESHOLD", 500)
    monkeypatch.setattr(client_module, "CATCH_UP_BATCH", 400)
    db = str(tmp_path / "hub.db")
    storage = open_storage(db)
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("newcomer")
    first = team_events(0, 600, {})
    storage.push(first)
    storage.admin_redact([first[1].id], "a secret")
    storage.push(team_events(600, 600, {}))
    storage.close()
    builds = []
    monkeypatch.setattr(client_module, "replay", lambda *args, **kwargs: builds.append(kwargs) or replay(*args, **kwargs))
    with HubServer(db) as server, Memory.init(tmp_path / "newcomer", "newcomer") as fresh, \
            HubClient(server.url, token) as client:
        pull(fresh, Remote(name="origin", url=server.url, token_file="-", agent="newcomer"), client)
        assert [("heads" in kwargs) for kwargs in builds] == [True, False]  # the catch-up's build, then once more
        assert check(fresh).same and fresh.views.checkpoint() == fresh.log.head() == 1201
        assert "fact 1\n" not in (tmp_path / "newcomer" / "memory" / "insights.md").read_text()


def test_a_history_writer_left_over_from_a_build_cut_off_writes_nothing_into_the_next_builds_file(tmp_path):
    """Regression: the writer's child told an earlier build's file checked it by inode number, and ext4 gives a
    file made at the same path just after a delete the same number: a writer left over from a catch-up cut off
    wrote that build's batches into the next build's file (a first pull's views then held search rows of page
    versions long replaced). Each build's file now carries a random mark (`PRAGMA application_id`)."""
    from projections import bulk
    from projections.views import Views

    path = str(tmp_path / "views.db.rebuild")
    earlier = Views(path, fast=True)
    left_over = bulk.HistoryWriter(earlier.db, path, child=bulk.spawn_writer())  # told its file only at start
    earlier.close()
    made = str(tmp_path / "made.db")
    later = Views(made, fast=True)  # the next build's file, put at the same path with the same inode (as ext4 does)
    bulk.HistoryWriter(later.db, made)
    before = later.dump()
    marked = later.db.execute("PRAGMA application_id").fetchone()[0]
    config = [later.db.execute(f"SELECT * FROM {table}_config ORDER BY k").fetchall() for table in bulk.BUILT_FTS]
    later.close()
    inode = os.stat(path).st_ino
    with open(path, "r+b") as file:
        file.truncate(0)
        file.write(Path(made).read_bytes())
    assert os.stat(path).st_ino == inode
    left_over.start()
    with pytest.raises(StorageFailure):  # the writer's child refused the file: not its build's
        left_over.join()
    with sqlite3.connect(path) as db:
        assert [db.execute(f"SELECT * FROM {table}_config ORDER BY k").fetchall()
                for table in bulk.BUILT_FTS] == config  # no deferral
        assert db.execute("PRAGMA application_id").fetchone()[0] == marked != 0
    after = Views(path)
    assert after.dump() == before
    after.close()
