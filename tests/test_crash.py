"""SIGKILL at random moments during a stream of appends: nothing committed is lost, nothing is torn."""

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

from conftest import log_rows, mem_command, run_mem


def stream(workspace, start: int) -> subprocess.Popen:
    """A shell loop of real `mem` commands, printing each one that returned."""
    mem = " ".join(f"'{part}'" for part in mem_command())
    script = (f"i={start}; while true; do {mem} -w '{workspace}' always add \"line $i\" >/dev/null "
              f"&& echo \"ok $i\"; i=$((i+1)); done")
    return subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, start_new_session=True)


def test_sigkill_during_appends_loses_nothing_committed(workspace):
    rng = random.Random(20261129)
    acknowledged: set[str] = set()
    next_line = 0
    rounds = 0
    while rounds < 12 or (len(acknowledged) <= 10 and rounds < 40):  # more rounds on a slow machine
        rounds += 1
        proc = stream(workspace, next_line)
        time.sleep(rng.uniform(0.3, 1.5))
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        acknowledged |= {f"line {line.split()[1]}" for line in out.decode().splitlines() if line.startswith("ok ")}
        next_line += 1000

        verify = run_mem("-w", workspace, "verify")
        assert verify.returncode == 0, verify.stdout
        events = run_mem("-w", workspace, "always", "list", "--json", check=True)
        lines = set(json.loads(events.stdout))
        assert acknowledged <= lines, f"lost: {acknowledged - lines}"
        assert json.loads(run_mem("-w", workspace, "status", "--json").stdout)["behind"] == 0

    assert len(acknowledged) > 10
    status = run_mem("-w", workspace, "status", "--json", check=True)
    report = json.loads(status.stdout)
    assert report["behind"] == 0 and report["clean"], report
    assert run_mem("-w", workspace, "replay", "--check").returncode == 0
    assert not [p for p in (workspace / "mind").iterdir() if "mem-tmp" in p.name]
    assert not [p for p in workspace.iterdir() if "mem-tmp" in p.name]
    seqs = [row[0] for row in log_rows(workspace)]
    assert seqs == list(range(1, len(seqs) + 1))


def test_sigkill_during_compactions_leaves_whole_operations(workspace, tmp_path):
    summary = tmp_path / "summary.txt"
    summary.write_text("compacted so far")
    mem = " ".join(f"'{part}'" for part in mem_command())
    script = ("i={start}; while true; do {mem} -w '{workspace}' loop append --role user --text \"m $i\" >/dev/null "
              "&& echo \"ok $i\"; if [ $((i % 4)) -eq 3 ]; then {mem} -w '{workspace}' loop compact "
              "--summary-file '{summary}' --preserve 2 >/dev/null && echo compacted; fi; i=$((i+1)); done")
    rng = random.Random(7)
    compacted, rounds, appended = 0, 0, 0
    while rounds < 6 or (not compacted and rounds < 30):  # more rounds on a slow machine
        rounds += 1
        command = script.format(start=appended, mem=mem, workspace=workspace, summary=summary)
        proc = subprocess.Popen(["sh", "-c", command], stdout=subprocess.PIPE, start_new_session=True)
        time.sleep(rng.uniform(0.5, 2.0))
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        compacted += out.count(b"compacted")
        appended += out.count(b"ok ")  # the next round goes on counting towards the next compaction
        assert run_mem("-w", workspace, "verify").returncode == 0
    run_mem("-w", workspace, "loop", "show", check=True)  # catches the views up
    from projections.memory import Memory

    with Memory.open(workspace) as memory:
        compactions = [e.seq for e in memory.log.read(kinds=["loop.compact"])]
        assert compactions, "no compaction happened; lengthen the rounds"
        for seq in compactions:
            row = memory.views.db.execute("SELECT content_json FROM loop_rows WHERE seq = ?", (seq,)).fetchone()
            assert row and "[Loop Compacted, audited] compacted so far" in row[0]
            archived = memory.views.db.execute("SELECT count(*) FROM loop_rows WHERE removed_seq = ?",
                                               (seq,)).fetchone()[0]
            blobs = memory.views.db.execute("SELECT entry_count FROM audit_rows WHERE event_seq = ?",
                                            (seq,)).fetchall()
            assert blobs == ([(archived,)] if archived else [])
    assert run_mem("-w", workspace, "replay", "--check").returncode == 0


def test_sigkill_during_pulls_loses_and_duplicates_nothing(tmp_path):
    from eventstore.envelope import new_event
    from eventstore.kinds import EntryAppend
    from sync.contracts import parse_contract
    from sync.server import BackgroundHub
    from sync.storage import open_storage

    db = str(tmp_path / "hub.db")
    hub = open_storage(db)
    hub.apply_contract(parse_contract('[layers.insights]\npath = "memory/insights.md"\nformat = "entries"\n'
                                      'producers = ["*"]\nconsumers = ["*"]\n'))
    (tmp_path / "reader.token").write_text(hub.add_agent("reader"))
    hub.add_agent("writer")
    ids = []
    for start in range(0, 30_000, 5_000):
        batch = [new_event(EntryAppend(type="FACT", date="2026-11-29", content=f"fact {i}"), agent="writer",
                           layer="insights") for i in range(start, start + 5_000)]
        hub.push(batch)
        ids += [e.id for e in batch]
    hub.close()
    workspace = tmp_path / "reader"
    with BackgroundHub(db) as server:
        run_mem("init", "-w", workspace, "--agent", "reader", check=True)
        run_mem("remote", "add", "origin", server.url, "--token-file", tmp_path / "reader.token", "-w", workspace,
                check=True)
        rng = random.Random(11)
        for _round in range(6):
            proc = subprocess.Popen([*mem_command(), "-w", str(workspace), "pull"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
            time.sleep(rng.uniform(0.4, 1.5))
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            assert run_mem("-w", workspace, "verify").returncode == 0
        run_mem("-w", workspace, "pull", check=True)
    from projections.memory import Memory

    with Memory.open(workspace) as memory:
        pulled = [e.id for e in memory.log.read(layers=["insights"])]
        assert len(pulled) == len(set(pulled)) == len(ids) and set(pulled) == set(ids)
        lines = (workspace / "memory/insights.md").read_text().count("\n[FACT]")
        assert lines == len(ids)


STOPPED_AFTER_RENAMES = """
import os, sys
from projections import materialize
from projections.memory import Memory
from projections.replay import replay

landed = materialize._land

def land_then_die(*args):  # (views,) staged, records, report
    landed(*args)
    if args[-3]:  # the renames done, their record not: as a kill -9, SIGINT or SIGTERM may land
        os._exit(9)

materialize._land = land_then_die
with Memory.open(sys.argv[1]) as memory:
    replay(memory, int(sys.argv[2]))
"""


def test_a_replay_to_an_earlier_seq_stopped_after_its_renames_leaves_no_hand_edits(workspace):
    """Regression (nc14c): `mem replay --to N` stopped between renaming its files into place and recording them left
    the pages as of N on disk; the next command caught the views up past N and took those files for hand edits
    (`mem replay` refused for good, and `mem adopt`, as status advised, took every page back to seq N)."""
    page = "---\ntype: note\n---\n# Page {n}\n\n{text}\n"
    for text in ("first", "second"):
        for n in range(20):
            run_mem("-w", workspace, "page", "write", f"p{n}", "--file", "-", input=page.format(n=n, text=text).encode(),
                    check=True)
    died = subprocess.run([sys.executable, "-c", STOPPED_AFTER_RENAMES, str(workspace), "20"], capture_output=True,
                          cwd=tempfile.gettempdir())
    assert died.returncode == 9, died.stderr
    assert (workspace / "mind/p0.md").read_text() == page.format(n=0, text="first")  # renamed, as of seq 20
    status = json.loads(run_mem("-w", workspace, "status", "--json", check=True).stdout)
    assert status["hand_edited"] == [], status
    assert run_mem("-w", workspace, "adopt", check=True).stdout.decode() == "nothing edited by hand\n"
    status = json.loads(run_mem("-w", workspace, "status", "--json", check=True).stdout)
    assert status["behind"] == 0 and status["clean"], status
    for n in range(20):
        assert (workspace / f"mind/p{n}.md").read_text() == page.format(n=n, text="second")
    assert "no differences" in run_mem("-w", workspace, "replay", "--check", check=True).stdout.decode()
    assert run_mem("-w", workspace, "replay", check=True).returncode == 0
