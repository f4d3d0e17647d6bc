"""The end of a replay: the checks of the files that begin as the fold ends (materialize.Prechecks, while the
history writer still writes), and a replay killed anywhere after its fold."""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.envelope import new_event
from eventstore.errors import HandEdited
from eventstore.kinds import LogRestore
from projections import bulk
from projections.materialize import Prechecks, file_hash
from projections.memory import Memory
from projections.replay import _build, _replace, check, replay
from projections.views import LOG_PATH

from conftest import PAGE, run_mem
from test_replay import op, page_history, perform, snapshot


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(op, min_size=1, max_size=25), batch=st.integers(min_value=1, max_value=4),
       restored=st.lists(st.text(max_size=12), max_size=3))
def test_mind_log_worked_out_from_the_folds_entries_is_the_one_the_views_render(steps, batch, restored):
    """A replay hashes mind/log.md from the log entries the fold hands its writer (bulk.LogBlocks, newest first,
    a block a batch) instead of rendering it from the views: that hash is the rendered file's, whatever the
    batches; and the files on disk are hashed (into `seen`) as `file_hash` does."""
    with tempfile.TemporaryDirectory() as tmp, patch.object(bulk, "BATCH", batch):
        with Memory.init(Path(tmp) / "ws", "alice") as memory:
            memory.log.db.execute("PRAGMA synchronous = OFF")
            for step in steps:
                perform(memory, step)
            if restored:
                memory.log.append([new_event(LogRestore(entries=restored), agent="alice", layer="mind")])
                memory.refresh()
            _assert_prechecks_hash_what_the_rebuilt_views_render(memory, Path(tmp) / "rebuilt.db")


def test_mind_log_hashed_from_batches_of_several_entries_keeps_them_newest_first(memory):
    """Each batch's block of mind/log.md (bulk.LogBlocks) holds its entries newest first, as the views render them:
    seven page writes in batches of three, every batch but the last with several entries."""
    for n in range(7):
        memory.write_page("a", PAGE.replace(b"# ", f"# Version {n} of ".encode(), 1), f"note {n}")
    with patch.object(bulk, "BATCH", 3):
        _assert_prechecks_hash_what_the_rebuilt_views_render(memory, memory.root / "rebuilt.db")


def _assert_prechecks_hash_what_the_rebuilt_views_render(memory, rebuilt: Path) -> None:
    """A rebuild into `rebuilt` with its files' checks (Prechecks) begun as its fold ends: mind/log.md's hash is the
    rendered file's, and the files on disk are hashed (into `seen`) as `file_hash` does."""
    tracked = memory.views.written.hashes()
    seen = {}
    checks = Prechecks(memory.root, tracked, seen)
    views = _build(memory, rebuilt, None, None, folded=checks.start)
    rendered = checks.join()
    digest = hashlib.sha256()
    for chunk in views.log_chunks():
        digest.update(chunk.encode("utf-8"))
    views.close()
    assert rendered == {LOG_PATH: digest.hexdigest()}
    on_disk = {memory.root / path: file_hash(memory.root / path) for path in tracked}
    assert {target: digest for target, (_stat, digest) in seen.items()} == \
        {target: digest for target, digest in on_disk.items() if digest is not None}


def test_a_hand_edit_made_after_the_files_were_first_hashed_is_still_refused(memory):
    """The files are hashed as the fold ends, before the check that refuses hand edits: a file edited after that
    is hashed again by the check (its inode, size or times changed), refused, and the views are left in place."""
    memory.write_page("a", PAGE)
    memory.write_page("a", PAGE.replace(b"# ", b"# Later ", 1))  # a replay to seq 1 writes the first one again
    before, hashed = memory.views.dump(), []
    start = Prechecks.start

    def edit_once_hashed(self, blocks):
        start(self, blocks)
        self.join()
        hashed.append(dict(self.seen))
        (memory.root / "mind/a.md").write_text("mine\n")

    with patch.object(Prechecks, "start", edit_once_hashed), patch.object(bulk, "BATCH", 1):
        try:
            replay(memory, 1)
            raise AssertionError("the hand edit was not refused")
        except HandEdited as refused:
            assert "mind/a.md" in str(refused)
    assert memory.root / "mind/a.md" in hashed[0]
    assert (memory.root / "mind/a.md").read_text() == "mine\n" and memory.views.dump() == before
    assert not Path(f"{memory.ws.views_path}.rebuild").exists()


KILLED_AFTER_THE_FOLD = """
import sys, pathlib
from projections import bulk
from projections.materialize import Prechecks
from projections.memory import Memory
from projections.replay import replay
start = Prechecks.start
def started(self, blocks):
    start(self, blocks)
    pathlib.Path(sys.argv[2]).touch()
Prechecks.start = started
bulk.BATCH = 1000  # a writer process, as a large log's
with Memory.open(sys.argv[1]) as memory:
    replay(memory)
"""
"""A real replay in a process of its own that says (a file at argv[2]) when its fold has ended."""


def test_a_replay_killed_anywhere_after_its_fold_leaves_the_old_views_or_the_new_never_torn(workspace):
    """Once the fold has ended the files are hashed on a thread while the writer finishes, the views are merged,
    checked, synced and swapped in, then files are written. Killed at any moment of that, the views are whole
    (the old ones, or the new ones: the same rows, from the same log), the files are the views' or owed by them,
    and the next replay leaves nothing behind."""
    with Memory.open(workspace) as memory:
        memory.log.append(page_history(6000, pages=300))
        memory.refresh()
        before, checkpoint, files = memory.views.dump(), memory.views.checkpoint(), snapshot(workspace)
    rebuild = workspace / ".mem" / "views.db.rebuild"
    marker = workspace.parent / "folded"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}

    def started_replay():
        marker.unlink(missing_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", KILLED_AFTER_THE_FOLD, str(workspace), str(marker)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while not marker.exists() and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        return proc, time.monotonic()

    (workspace / "mind/page-7.md").unlink()
    proc, folded = started_replay()  # not killed: how long its end takes, here and now
    assert proc.wait() == 0
    tail = time.monotonic() - folded
    killed_alive = 0
    for share in (0.0, 0.15, 0.3, 0.45, 0.6, 0.8):
        (workspace / "mind/page-7.md").unlink()  # a file the replay writes after the swap
        proc, folded = started_replay()
        time.sleep(max(0.0, folded + share * tail - time.monotonic()))
        killed_alive += proc.poll() is None
        proc.kill()
        proc.wait()
        with Memory.open(workspace) as memory:  # the views in place open, whole, and agree with the log
            assert memory.views.checkpoint() == checkpoint and memory.views.dump() == before
            report = check(memory)  # but for the file taken away, unless the new views owe it
            assert set(report.differences) <= {"file mind/page-7.md is missing (`mem replay` writes it)"}
        assert b"replayed 6000 events" in run_mem("-w", workspace, "replay", check=True).stdout
        assert not rebuild.exists() and not Path(f"{rebuild}-fold").exists()
        assert snapshot(workspace) == files
    assert killed_alive >= 2, "the replays ended before they could be killed after their fold; lengthen the log"


KILLED_WHILE_WRITING_FILES = """
import os, sys
from projections import materialize
from projections.memory import Memory
from projections.replay import replay
land = materialize._land
def killed(views, staged, records, report):
    if staged:
        os._exit(9)  # the temporary files are written, none renamed over its page yet
    land(views, staged, records, report)
materialize._land = killed
with Memory.open(sys.argv[1]) as memory:
    replay(memory)
"""


def replay_stopped_while_writing(workspace, script: str) -> tuple[dict, int]:
    """Four pages written, two of them deleted, then `script` replays in a process of its own: the files before the
    deletes, and the process's exit code."""
    with Memory.open(workspace) as memory:
        memory.log.append(page_history(40, pages=4))
        memory.refresh()
        files = snapshot(workspace)
    for page in ("mind/page-1.md", "mind/page-2.md"):
        (workspace / page).unlink()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    return files, subprocess.run([sys.executable, "-c", script, str(workspace)], env=env).returncode


def test_a_replay_killed_while_it_writes_the_files_leaves_no_temporary_file_after_the_next(workspace):
    """A replay killed between writing a page's temporary file and renaming it over the page leaves that file
    beside the page; the next replay (which takes the same lock as any writer of files) removes it."""
    files, replayed = replay_stopped_while_writing(workspace, KILLED_WHILE_WRITING_FILES)
    assert replayed == 9
    left = sorted(f"mind/{p.name}" for p in (workspace / "mind").glob(".*.mem-tmp-*"))
    assert left != []
    told = json.loads(run_mem("-w", workspace, "status", "--json").stdout)  # regression (nc14c): said nothing of them
    assert told["temporary"] == left, told
    assert f"left over:       {left[0]}" in run_mem("-w", workspace, "status").stdout.decode()
    assert b"replayed 40 events" in run_mem("-w", workspace, "replay", check=True).stdout
    assert json.loads(run_mem("-w", workspace, "status", "--json").stdout)["temporary"] == []
    assert snapshot(workspace) == files


INTERRUPTED_WHILE_WRITING_FILES = """
import os, signal, sys
from projections import materialize
from projections.memory import Memory
from projections.replay import replay
land = materialize._land
def interrupted(views, staged, records, report):
    if staged:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: the temporary files are written, none renamed yet
    land(views, staged, records, report)
materialize._land = interrupted
with Memory.open(sys.argv[1]) as memory:
    try:
        replay(memory)
    except KeyboardInterrupt:
        sys.exit(130)
"""


def test_a_replay_interrupted_while_it_writes_the_files_removes_its_temporary_files(workspace):
    """Ctrl-C between writing the pages' temporary files and renaming them: the interrupted write removes them
    (regression: they stayed beside the pages until the next command that writes files)."""
    files, replayed = replay_stopped_while_writing(workspace, INTERRUPTED_WHILE_WRITING_FILES)
    assert replayed == 130
    assert sorted((workspace / "mind").glob(".*.mem-tmp-*")) == []
    assert json.loads(run_mem("-w", workspace, "status", "--json").stdout)["temporary"] == []
    assert b"replayed 40 events" in run_mem("-w", workspace, "replay", check=True).stdout
    assert snapshot(workspace) == files


SLOW_COUNT = """
import sys, time
from eventstore.sqlite import SQLiteLog
count = SQLiteLog.count
def slow_count(log, upto=None):
    time.sleep(0.5)  # still counting on the log's connection when the interrupt reaches the caller
    found = count(log, upto)
    open(sys.argv[1] + "/counted", "w").write(str(found))
    return found
SQLiteLog.count = slow_count
"""


def test_an_interrupted_replay_waits_for_its_count_before_the_log_is_closed(workspace):
    """Regression (a segfault in CI, once, under load): the count a replay begins in a thread, reading the log's
    connection, ran on when the replay was interrupted; the caller closed the log under it. It is waited for."""
    _files, replayed = replay_stopped_while_writing(workspace, SLOW_COUNT + INTERRUPTED_WHILE_WRITING_FILES)
    assert replayed == 130
    assert (workspace / "counted").read_text() == "40"


def test_the_views_file_a_replay_replaces_is_freed_by_a_thread_that_leaves_nothing_open(tmp_path):
    """A replay's rename over the old views leaves their blocks to be freed by a thread closing the last
    descriptor of the old file (`_replace`): the new file in place, the old one's descriptor closed once it
    ends (none of this process's descriptors names a deleted file), and a first replay has nothing to free."""
    target, rebuilt = tmp_path / "views.db", tmp_path / "views.db.rebuild"
    rebuilt.write_bytes(b"first")
    assert _replace(rebuilt, target) is None
    rebuilt.write_bytes(b"new")
    freeing = _replace(rebuilt, target)
    freeing.join()
    assert target.read_bytes() == b"new" and not rebuilt.exists()
    if Path("/proc/self/fd").is_dir():
        names = [os.readlink(link) for link in Path("/proc/self/fd").iterdir() if link.is_symlink()]
        assert not [name for name in names if name.startswith(str(tmp_path)) and name.endswith("(deleted)")]


def test_a_build_following_a_growing_log_merges_its_full_text_indexes_before_its_end_when_told_it(memory, tmp_path,
                                                                                                    monkeypatch):
    """A catch-up's build folds the log up to each head the appends reach (`build_apart`); told the seq the log is
    expected to reach (the pull's count from the hub), its writer merges the full-text indexes while the last batches
    are folded (HistoryWriter.near_end), as a replay's does, rather than in the last commit, after the fold: a second
    of a million-event catch-up. Untold, the merge waits for the end."""
    for n in range(60):
        memory.write_page(f"p{n}", PAGE.replace(b"# ", f"# Page {n} of ".encode(), 1))
    head = memory.log.head()
    laps = tmp_path / "laps"
    monkeypatch.setenv("MEM_REPLAY_TIMES", str(laps))  # the build's processes append their laps there
    merged = {}
    for told in (head, None):
        laps.write_text("")
        views = bulk.build_apart(memory.root, tmp_path / f"views-{told}.db", agent="alice",
                                 heads=[head // 3, 2 * head // 3, head], expected=told)
        assert views.checkpoint() == head
        views.close()
        writer = next(line for line in laps.read_text().splitlines() if line.startswith("writer"))
        merged[told] = " merge " in writer
    assert merged == {head: True, None: False}
