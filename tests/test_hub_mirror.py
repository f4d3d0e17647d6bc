"""The hub's mirror (sync.mirror) copies a page of hub commits per transaction, each event at its hub
time, the position reached committed with them: a mirror killed half-way keeps whole pages and resumes."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

from eventstore.envelope import new_event
from eventstore.kinds import EntryAppend
from eventstore.layers import Contract, ContractLayer
from eventstore.workspace import Workspace
from sync.mirror import HubMirror
from sync.storage import open_storage

PAGE = 400

STOPS_AFTER_TWO_PAGES = textwrap.dedent(f"""
    import sys, time
    import sync.mirror as mirror
    from sync.storage_sqlite import SQLiteHubStorage

    class Stalls(SQLiteHubStorage):
        pulls = 0
        def pull(self, after, layers, limit):
            if layers != ["_contract"]:
                self.pulls += 1
                if self.pulls > 2:
                    print("stalled", flush=True)
                    time.sleep(600)  # killed here, between two transactions
            return super().pull(after, layers, limit)

    mirror.PAGE = {PAGE}
    mirror.HubMirror(Stalls(sys.argv[1]), sys.argv[2]).catch_up()
""")


def make_hub(path, commits: int, per_commit: int):
    hub = open_storage(str(path))
    hub.apply_contract(Contract(layers={"notes": ContractLayer(path="memory/notes.md", format="entries",
                                                                producers=["*"], consumers=["*"])}))
    for c in range(commits):
        hub.push([new_event(EntryAppend(type="FACT", date="2026-11-30", content=f"fact {c}.{i}"), agent="ada",
                            layer="notes") for i in range(per_commit)])
        time.sleep(0.002)  # another hub time for each commit
    return hub


def test_a_mirror_killed_half_way_keeps_whole_pages_and_resumes(tmp_path):
    hub = make_hub(tmp_path / "hub.db", commits=40, per_commit=37)
    root = tmp_path / "mirror"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", STOPS_AFTER_TWO_PAGES, str(tmp_path / "hub.db"), str(root)],
                             stdout=subprocess.PIPE, env=env)
    try:
        assert child.stdout.readline() == b"stalled\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    db = sqlite3.connect(root / ".mem" / "log.db")
    head = db.execute("SELECT MAX(seq) FROM events").fetchone()[0]
    cursor = db.execute("SELECT value FROM sync_state WHERE key = 'hub-position'").fetchone()[0]
    db.close()
    assert head == 2 * PAGE and cursor == str(head)  # two whole transactions: no half page, cursor with them

    mirror = HubMirror(hub, root)
    try:
        assert mirror.catch_up() == hub.head() == 1 + 40 * 37
        log = Workspace(root).open_log(Workspace(root).config())
        copied = {e.seq: e for e in log.read()}
        for event in hub.pull(0, ["notes", "_contract"], 10_000):
            copy = copied[event.seq]
            assert (copy.id, copy.recorded_at, copy.digest) == (event.id, event.recorded_at, event.digest)
        assert len({e.recorded_at for e in copied.values()}) > 20 and log.verify().ok
        log.close()
    finally:
        mirror.close()
        hub.close()


def mirrored(root) -> list[str]:
    log = Workspace(root).open_log(Workspace(root).config())
    try:
        return [e.body.content for e in log.read() if isinstance(e.body, EntryAppend)]
    finally:
        log.close()


def test_a_mirror_of_a_hub_restored_from_a_backup_is_copied_again(tmp_path):
    """A hub database restored from a backup lost the events after it, and stores new ones at their positions: the
    mirror (its pages) went on showing the lost events and never copied the new ones (nc20a). It copies the hub again
    when the hub's head is behind its own, or the last event it copied is not at its position there."""
    db, backup = tmp_path / "hub.db", tmp_path / "backup.db"
    make_hub(db, commits=3, per_commit=1).close()
    source, copy = sqlite3.connect(db), sqlite3.connect(backup)
    source.backup(copy)
    source.close()
    copy.close()
    hub = open_storage(str(db))
    for c in range(2):
        hub.push([new_event(EntryAppend(type="FACT", date="2026-11-30", content=f"lost {c}"), agent="ada",
                            layer="notes")])
    for later in ("same head", "past the head", "made before"):
        mirror = HubMirror(hub, tmp_path / later)
        mirror.catch_up()
        mirror.close()
        assert mirrored(tmp_path / later)[-2:] == ["lost 0", "lost 1"]
    with sqlite3.connect(tmp_path / "made before" / ".mem" / "log.db") as old:  # kept no last copied (nc21b)
        assert old.execute("DELETE FROM sync_state WHERE key = 'mirror-last'").rowcount == 1
    hub.close()
    for path in tmp_path.glob("hub.db*"):
        path.unlink()
    os.replace(backup, db)
    hub = open_storage(str(db))
    try:
        hub.push([new_event(EntryAppend(type="FACT", date="2026-11-30", content="again 0"), agent="ada", layer="notes")])
        behind = HubMirror(hub, tmp_path / "same head")  # the hub's head is behind the mirror's
        behind.catch_up()
        behind.close()
        hub.push([new_event(EntryAppend(type="FACT", date="2026-11-30", content=f"again {c}"), agent="ada",
                            layer="notes") for c in (1, 2)])
        for later in ("same head", "past the head", "made before"):  # the hub's head is past the last two's
            mirror = HubMirror(hub, tmp_path / later)
            assert mirror.catch_up() == hub.head()
            mirror.close()
            assert mirrored(tmp_path / later) == ["fact 0.0", "fact 1.0", "fact 2.0", "again 0", "again 1", "again 2"]
    finally:
        hub.close()
