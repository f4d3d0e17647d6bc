"""Direct edits of the wiki files become events (`mem adopt`, `mem watch`); what cannot is left and reported."""

import json
import os
import select
import subprocess
import time

from hypothesis import given, strategies as st

from projections.adopt import adopt
from projections.memory import Memory
from projections.merge import three_way
from projections.replay import replay
from projections.status import workspace_status

from conftest import PAGE, log_rows, mem_command, run_mem


def test_edited_new_and_deleted_pages_and_always_lines_are_adopted(memory):
    memory.write_page("deploy", PAGE)
    memory.write_page("old", PAGE)
    memory.always_add("keep me")
    memory.always_add("drop me")
    root = memory.root
    (root / "mind/deploy.md").write_text((root / "mind/deploy.md").read_text() + "Prod needs an ack.\n")
    (root / "mind/new.md").write_text("---\ntype: lesson\ndescription: fresh\n---\n# New\n")
    (root / "mind/old.md").unlink()
    text = (root / "mind.md").read_text().replace("- drop me\n", "- added by hand\n")
    (root / "mind.md").write_text(text)
    report = adopt(memory)
    assert sorted(report.adopted) == ["mind.md", "mind/deploy.md", "mind/new.md", "mind/old.md"]
    assert report.refused == {} and report.deleted == ["mind/old.md"]  # said as a deletion (nc30b: "adopted")
    kinds = [e.kind for e in memory.log.read(after=4)]
    assert sorted(kinds) == ["always.add", "always.remove", "page.delete", "page.ingest", "page.update"]
    assert memory.always() == ["keep me", "added by hand"]
    assert "Prod needs an ack." in memory.show("mind/deploy.md", memory.log.head())
    assert workspace_status(memory).clean


def test_a_page_moved_by_hand_is_adopted_as_a_rename_and_its_history_follows(workspace):
    """Regression: `mv mind/a.md mind/b.md` was adopted as a delete and an ingest, so `mem history b` began at the
    move. A page moved with its bytes unchanged is a rename; moved and edited at once, or two pages of the same
    bytes moved (which went where cannot be told), it stays a delete and an ingest."""
    page = workspace.parent / "p.md"
    for slug, text in (("a", "A."), ("twin1", "Twins."), ("twin2", "Twins."), ("edited", "E.")):
        page.write_bytes(PAGE + text.encode() + b"\n")
        run_mem("-w", workspace, "page", "write", slug, "--file", page, check=True)
    mind = workspace / "mind"
    kept = (mind / "a.md").read_bytes()
    (mind / "a.md").rename(mind / "b.md")
    (mind / "edited.md").rename(mind / "edited-moved.md")
    (mind / "edited-moved.md").write_text((mind / "edited-moved.md").read_text() + "More.\n")
    adopted = run_mem("-w", workspace, "adopt", "--json", check=True)
    report = json.loads(adopted.stdout)
    assert report["renamed"] == {"mind/a.md": "mind/b.md"}
    assert sorted(report["adopted"]) == ["mind/edited-moved.md", "mind/edited.md"]
    history = run_mem("-w", workspace, "history", "b", "--json", check=True)
    assert [e["kind"] for e in json.loads(history.stdout)] == ["page.ingest", "page.rename"]
    assert (mind / "b.md").read_bytes() == kept
    (mind / "twin1.md").rename(mind / "twin3.md")
    (mind / "twin2.md").rename(mind / "twin4.md")
    said = run_mem("-w", workspace, "adopt", check=True).stdout.decode()
    assert "a rename" not in said and said.count("adopted") == 4, said
    assert run_mem("-w", workspace, "status", check=True).stdout.decode().strip().endswith("what the log says")


def test_what_cannot_be_adopted_is_left_and_reported(workspace):
    page = workspace.parent / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", page, check=True)
    (workspace / "mind/deploy.md").write_text("no frontmatter any more\n")
    (workspace / "mind/log.md").write_text("# Log\n\nrewritten history\n")
    before = log_rows(workspace)
    result = run_mem("-w", workspace, "adopt")
    assert result.returncode == 1
    out = result.stdout.decode()
    assert "left mind/deploy.md: the page has no frontmatter" in out and "left mind/log.md" in out
    assert log_rows(workspace) == before
    assert (workspace / "mind/deploy.md").read_text() == "no frontmatter any more\n"


def test_a_directory_in_mind_is_left_and_the_pages_beside_it_adopted(workspace):
    """Regression (nc13b): one `mkdir mind/dir.md` failed the whole of `mem adopt`, saying mindlog writes a file
    there (it writes none: the directory is no page)."""
    (workspace / "mind/new.md").write_bytes(PAGE)
    (workspace / "mind/dir.md").mkdir()
    result = run_mem("-w", workspace, "adopt")
    assert result.returncode == 1 and result.stdout.decode().splitlines() == [
        "adopted mind/new.md", "left mind/dir.md: a directory, not a page"], result
    assert [row[6] for row in log_rows(workspace)] == ["page.ingest"]


def test_a_linked_page_is_left_alone_and_the_pages_beside_it_adopted(workspace, tmp_path):
    """Regression (nc17a): one symbolic link among the pages left every page of its batch unadopted, each said to be
    that link."""
    outside = tmp_path / "outside.md"
    outside.write_bytes(PAGE.replace(b"Staging first.", b"Outside the workspace."))
    (workspace / "mind/good.md").write_bytes(PAGE)
    (workspace / "mind/evil.md").symlink_to(outside)
    result = run_mem("-w", workspace, "adopt")
    assert result.returncode == 1 and result.stdout.decode().splitlines() == [
        "adopted mind/good.md", "left mind/evil.md: mind/evil.md is a symbolic link; mindlog never writes through "
        "links"], result
    assert [row[6] for row in log_rows(workspace)] == ["page.ingest"]
    assert b"Outside the workspace" not in run_mem("-w", workspace, "log", "--json", check=True).stdout


def test_a_page_moved_back_by_hand_to_a_name_it_had_is_a_rename_too(workspace):
    """Regression (nc29a): `mv mind/beta.md mind/alpha.md` after alpha had been moved to beta was adopted as an
    ingest of alpha and a delete of beta (a name the page had once was not taken for a new one), so the history
    of alpha lost its link to beta's time."""
    page = workspace.parent / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "alpha", "--file", page, check=True)
    mind = workspace / "mind"
    for old, new in (("alpha", "beta"), ("beta", "alpha"), ("alpha", "beta")):
        (mind / f"{old}.md").rename(mind / f"{new}.md")
        report = json.loads(run_mem("-w", workspace, "adopt", "--json", check=True).stdout)
        assert (report["renamed"], report["adopted"]) == ({f"mind/{old}.md": f"mind/{new}.md"}, []), report
    kinds = [e["body"]["kind"] for e in json.loads(run_mem("-w", workspace, "log", "--json", check=True).stdout)]
    assert kinds == ["page.ingest", "page.rename", "page.rename", "page.rename"]


def test_a_page_moved_by_hand_and_an_always_line_edited_are_adopted_in_one_run(workspace):
    """Regression (nc13a): the rename came first and was left, mind.md being edited by hand ("`mem adopt` records its
    `## Always` lines"), though the same run adopted mind.md just after; a second run did the rename."""
    page = workspace.parent / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "p", "--file", page, check=True)
    run_mem("-w", workspace, "always", "add", "line one", check=True)
    (workspace / "mind/p.md").rename(workspace / "mind/q.md")
    (workspace / "mind.md").write_text((workspace / "mind.md").read_text().replace("line one", "line ONE"))
    said = run_mem("-w", workspace, "adopt", check=True).stdout.decode().splitlines()
    assert said == ["adopted mind.md", "adopted mind/p.md -> mind/q.md (a rename)"], said
    assert run_mem("-w", workspace, "status", check=True).stdout.decode().strip().endswith("what the log says")


def test_a_page_deleted_by_hand_is_not_adopted_over_a_hand_edit_of_mind_md_or_the_log(workspace):
    """Regression: the deletion was recorded and mind.md and mind/log.md rewritten over their hand edits (a delete was
    adopted with force), and `mem status` then said clean. It is left as a new or changed page is, the edits kept."""
    page = workspace.parent / "p.md"
    page.write_bytes(PAGE)
    for slug in ("deploy", "old"):
        run_mem("-w", workspace, "page", "write", slug, "--file", page, check=True)
    assert "mind/old.md" in (workspace / "mind.md").read_text()
    for edited in ("mind.md", "mind/log.md"):
        target = workspace / edited
        target.write_text(target.read_text() + "MY HAND EDIT\n")
        kept = target.read_text()
        (workspace / "mind/old.md").unlink(missing_ok=True)
        before = log_rows(workspace)
        result = run_mem("-w", workspace, "adopt")
        assert result.returncode == 1 and f"left mind/old.md: {edited} was edited by hand" in result.stdout.decode()
        assert log_rows(workspace) == before and target.read_text() == kept
        assert not (workspace / "mind/old.md").exists()
        target.write_bytes(run_mem("-w", workspace, "show", edited, check=True).stdout)  # the edit given up
    result = run_mem("-w", workspace, "adopt", check=True)
    assert "mind/old.md" in result.stdout.decode() and len(log_rows(workspace)) == len(before) + 1
    assert "mind/old.md" not in (workspace / "mind.md").read_text()


def test_watch_adopts_edits_as_they_happen(workspace):
    page = workspace.parent / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", page, check=True)
    watcher = subprocess.Popen([*mem_command(), "-w", str(workspace), "watch", "--debounce-ms", "100"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert watcher.stderr.readline().startswith(b"watching")
        # The line comes before the watch begins: the edit is made again (atomically, the same bytes) until the
        # watcher has seen one, not after a fixed wait that a loaded machine outlasts.
        edited, scratch = workspace / "mind/deploy.md", workspace.parent / "edited.md"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(log_rows(workspace)) < 2:
            scratch.write_text(PAGE.decode() + "Edited while watched.\n")
            os.replace(scratch, edited)
            time.sleep(0.5)
        time.sleep(0.5)  # a second adoption, were the same bytes adopted twice, would show now
        rows = log_rows(workspace)
        assert len(rows) == 2 and rows[1][6] == "page.update"
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)


def test_watch_adopts_what_was_edited_before_it_began(workspace):
    """Regression: `mem watch` adopted only what changed after it began; a page written by hand before it (which
    `mem adopt` takes) stayed untracked, unsaid, until edited again."""
    (workspace / "mind/before.md").write_bytes(PAGE)
    watcher = subprocess.Popen([*mem_command(), "-w", str(workspace), "watch", "--debounce-ms", "100"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert watcher.stderr.readline().startswith(b"watching")
        assert select.select([watcher.stdout], [], [], 30)[0], "the watcher said nothing of the page"
        assert watcher.stdout.readline() == b"adopted mind/before.md\n"
        assert [row[6] for row in log_rows(workspace)] == ["page.ingest"]
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)


def test_watch_goes_on_when_a_directory_is_made_under_mind(workspace):
    """Regression: `mkdir mind/sub` ended the watcher (`[Errno 21] Is a directory`, exit 1), and edits after it
    were never recorded."""
    watcher = subprocess.Popen([*mem_command(), "-w", str(workspace), "watch", "--debounce-ms", "100"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert watcher.stderr.readline().startswith(b"watching")
        (workspace / "mind/sub").mkdir()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not log_rows(workspace):  # made again until seen, as above
            scratch = workspace.parent / "new.md"
            scratch.write_bytes(PAGE)
            os.replace(scratch, workspace / "mind/after.md")
            time.sleep(0.5)
        assert watcher.poll() is None, watcher.communicate(timeout=10)
        assert [row[6] for row in log_rows(workspace)] == ["page.ingest"]
    finally:
        watcher.terminate()
        out, err = watcher.communicate(timeout=10)
    assert b"Is a directory" not in err and b"left mind/sub: " in out, (out, err)


def test_watch_goes_on_when_mind_is_replaced_by_a_file_and_adopts_once_it_is_back(workspace):
    """Regression: a file put where mind/ was ended the watcher (exit 1) with an error no adoption could avoid;
    it says the error once and adopts once the folder is back."""
    (workspace / "mind/before.md").write_bytes(PAGE)
    run_mem("-w", workspace, "adopt", check=True)
    watcher = subprocess.Popen([*mem_command(), "-w", str(workspace), "watch", "--debounce-ms", "100"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert watcher.stderr.readline().startswith(b"watching")
        time.sleep(1)  # its first adoption (nothing to adopt) is over
        os.replace(workspace / "mind", workspace.parent / "mind.bak")
        (workspace / "mind").write_text("not a folder\n")
        assert select.select([watcher.stderr], [], [], 30)[0], "the watcher said nothing of mind"
        said = watcher.stderr.readline().decode()
        assert said.startswith(f"error: {workspace / 'mind'} is a file where mindlog needs a folder") and \
            said.endswith("(watching on)\n"), said
        for line in ("more", "and more"):  # said once while the reason stays
            with open(workspace / "mind", "a") as file:
                file.write(line + "\n")
            time.sleep(0.5)
        (workspace / "mind").unlink()
        os.replace(workspace.parent / "mind.bak", workspace / "mind")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(log_rows(workspace)) < 2:  # made again until seen
            scratch = workspace.parent / "new.md"
            scratch.write_bytes(PAGE)
            os.replace(scratch, workspace / "mind/after.md")
            time.sleep(0.5)
        assert watcher.poll() is None, watcher.communicate(timeout=10)
        assert [row[6] for row in log_rows(workspace)] == ["page.ingest", "page.ingest"]
    finally:
        watcher.terminate()
        out, err = watcher.communicate(timeout=10)
    assert b"adopted mind/after.md" in out and err.count(b"needs a folder") == 0, (out, err)


def test_adopt_waits_for_a_write_in_progress(memory):
    """A write whose event is in the views but whose file is not yet on disk must not look deleted by
    hand: adopt takes the projector's lock, so it runs before the write starts or after it ends."""
    from eventstore.writer import Writer
    from projections.fold import catch_up
    from projections.materialize import materialize

    memory.write_page("deploy", PAGE)
    event = Writer("alice", memory.views).page_write("second", PAGE)
    with memory.lock():
        memory.log.append([event])
        catch_up(memory.log, memory.views)  # in the views; mind/second.md not written yet
        adopting = subprocess.Popen([*mem_command(), "-w", str(memory.root), "adopt", "--json"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(1.5)
        assert adopting.poll() is None, adopting.communicate()
        materialize(memory.views, memory.root)
    out, err = adopting.communicate(timeout=60)
    assert adopting.returncode == 0, err
    assert [e.kind for e in memory.log.read()] == ["page.ingest", "page.ingest"]
    assert (memory.root / "mind/second.md").exists()


def test_watch_with_concurrent_writers_removes_nothing(workspace, tmp_path):
    """`mem watch` against separate processes writing pages (through `mem` and directly into mind/) and
    `## Always` lines: nothing is deleted that nobody deleted, no write is refused as edited by hand."""
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    mem = " ".join(f"'{part}'" for part in mem_command())
    w = f"-w '{workspace}'"
    scripts = [
        f"for i in 1 2 3 4 5 6; do {mem} {w} page write cli-a$i --file '{page}' || exit 1; done",
        f"for i in 1 2 3 4 5 6; do {mem} {w} page write cli-b$i --file '{page}' || exit 1; done",
        f"for i in 1 2 3 4 5 6; do {mem} {w} always add \"rule $i\" || exit 1; done",
        f"for i in 1 2 3 4 5 6; do cp '{page}' '{workspace}'/mind/direct-$i.md; sleep 0.3; done",
    ]
    watcher = subprocess.Popen([*mem_command(), "-w", str(workspace), "watch", "--debounce-ms", "50"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)
        writers = [subprocess.Popen(["sh", "-c", s], stdout=subprocess.PIPE, stderr=subprocess.PIPE) for s in scripts]
        for writer in writers:
            out, err = writer.communicate(timeout=300)
            assert writer.returncode == 0, err.decode()
            assert b"edited by hand" not in err
        wanted = {f"cli-a{i}" for i in range(1, 7)} | {f"cli-b{i}" for i in range(1, 7)} | {
            f"direct-{i}" for i in range(1, 7)}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listed = {p["slug"] for p in json.loads(run_mem("-w", workspace, "page", "list", "--json").stdout)}
            if listed >= wanted:
                break
            time.sleep(0.5)
    finally:
        watcher.terminate()
        out, err = watcher.communicate(timeout=30)
    assert listed == wanted, (out.decode(), err.decode())
    kinds = [row[6] for row in log_rows(workspace)]
    assert "page.delete" not in kinds and "always.remove" not in kinds, kinds
    assert json.loads(run_mem("-w", workspace, "always", "list", "--json", check=True).stdout) == [
        f"rule {i}" for i in range(1, 7)]
    assert json.loads(run_mem("-w", workspace, "status", "--json", check=True).stdout)["clean"]


def test_a_contract_change_that_moves_no_file_keeps_a_hand_delete_for_adoption(memory):
    """Regression (found by test_convergence): a change of producers re-rendered every shared file,
    so a shared page deleted by hand while its agent could not produce the layer came back, and the
    delete was lost instead of adopted once the agent could."""
    from eventstore.layers import Contract, ContractLayer

    def contract(producers):
        return Contract(layers={"drafts": ContractLayer(path="content/drafts/", format="pages",
                                                        producers=producers, consumers=["*"])})

    memory.set_contract(contract(["*"]))
    memory.shared_page_write("drafts", "notes", PAGE)
    memory.refresh()
    page = memory.root / "content/drafts/notes.md"
    memory.set_contract(contract(["someone-else"]))
    page.unlink()
    assert "does not produce" in adopt(memory).refused["content/drafts/notes.md"]
    memory.set_contract(contract(["*"]))
    assert not page.exists()
    report = adopt(memory)
    assert report.adopted == ["content/drafts/notes.md"] and report.refused == {}
    assert [e.kind for e in memory.log.read(after=memory.log.head() - 1)] == ["page.delete"]


def test_a_page_the_scanner_flags_is_adopted_with_allow_secret_as_its_refusal_says(workspace):
    """`mem adopt` left such a page with `pass --allow-secret if it really belongs in memory`, an option
    it did not have."""
    (workspace / "mind/keys.md").write_text("---\ntype: note\n---\n# Keys\n\nThe CI key is AKIA4HXQ7ZT2LMNB3K5P.\n")
    before = log_rows(workspace)
    left = run_mem("-w", workspace, "adopt")
    assert left.returncode == 1 and "left mind/keys.md: " in left.stdout.decode()
    assert "pass --allow-secret" in left.stdout.decode() and log_rows(workspace) == before
    adopted = run_mem("-w", workspace, "adopt", "--allow-secret", check=True)
    assert adopted.stdout.decode() == "adopted mind/keys.md\n"
    assert [row for row in log_rows(workspace) if row not in before] != []
    assert run_mem("-w", workspace, "status", check=True).stdout.decode().endswith(
        "clean: every file is what the log says\n")


def test_watch_stopped_in_the_middle_of_adopting_says_what_it_recorded(workspace):
    """Ctrl-C while `mem watch` adopted a burst of new pages ended without a word about the events it had
    appended (their `adopted` lines come at the end of a round)."""
    import signal

    watcher = subprocess.Popen([*mem_command(), "-w", str(workspace), "watch", "--debounce-ms", "50"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        staged = workspace.parent / "staged"
        staged.mkdir()
        for n in range(300):
            (staged / f"p{n}.md").write_text(f"---\ntype: note\n---\n# P{n}\n\nbody {n}\n")
        time.sleep(1.5)
        for n in range(300):  # moved in at once: one round of adoption (pages go in 100 to a transaction)
            (staged / f"p{n}.md").rename(workspace / f"mind/p{n}.md")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not log_rows(workspace):
            time.sleep(0.01)
        watcher.send_signal(signal.SIGINT)
        out, err = watcher.communicate(timeout=30)
    finally:
        watcher.kill()
    recorded = len(log_rows(workspace))
    assert watcher.returncode == 0 and 0 < recorded < 300, (recorded, err)
    assert f"stopped while adopting: {recorded} events recorded (up to seq {recorded})" in err.decode(), err
    run_mem("-w", workspace, "show", "mind.md", check=True)  # the next command writes the files
    assert b"no differences" in run_mem("-w", workspace, "replay", "--check", check=True).stdout


def _hand_written(root, n: int) -> None:
    for i in range(n):
        (root / f"mind/p{i:03d}.md").write_text(f"---\ntype: note\ndescription: page {i}\n---\n# P{i}\n\nbody {i}\n")


def test_many_pages_are_adopted_in_a_few_appends(memory):
    """Regression: `mem adopt` of 3,000 pages took 36-94 s, one append (and one rewrite of mind.md and
    mind/log.md) per page. Pages now go in by batches; a page refused on its own is left out of its batch,
    and a page naming another of its batch (superseded-by) is admitted once that one is recorded."""
    pages = 230
    memory.write_page("kept", PAGE)
    _hand_written(memory.root, pages)
    (memory.root / "mind/p005.md").write_text("no frontmatter\n")
    (memory.root / "mind/p006.md").write_text("---\ntype: note\n---\n# Keys\n\nkey AKIA4HXQ7ZT2LMNB3K5P\n")
    (memory.root / "mind/p150.md").write_text("---\ntype: note\nstatus: \"superseded-by: p149\"\n---\n# Old\n")
    (memory.root / "mind/p151.md").write_text("---\ntype: note\nstatus: \"superseded-by: p999\"\n---\n# Old\n")
    (memory.root / "mind/kept.md").unlink()
    appends = []
    append = memory.log.append
    memory.log.append = lambda events: appends.append(len(events)) or append(events)
    report = adopt(memory)
    assert sorted(report.refused) == ["mind/p005.md", "mind/p006.md", "mind/p151.md"], report.refused
    assert "no frontmatter" in report.refused["mind/p005.md"] and "secret" in report.refused["mind/p006.md"]
    assert len(report.adopted) == pages - 3 + 1 and report.adopted[-1] == "mind/kept.md"
    assert sum(appends) == pages - 3 + 1 and len(appends) <= 5, appends
    assert {p.slug for p in memory.catalog()} == {f"p{i:03d}" for i in range(pages)} - {"p005", "p006", "p151"}
    status = workspace_status(memory)
    assert status.untracked == ["mind/p005.md", "mind/p006.md", "mind/p151.md"] and not status.missing


def test_adopt_of_many_pages_through_mem_says_each(workspace):
    _hand_written(workspace, 230)
    (workspace / "mind/p100.md").write_text("no frontmatter\n")
    (workspace / "mind.md").write_text((workspace / "mind.md").read_text().replace("## Always\n", "## Always\n\n- by hand\n"))
    result = run_mem("-w", workspace, "adopt")
    assert result.returncode == 1
    lines = result.stdout.decode().splitlines()
    assert lines[0] == "adopted mind.md" and lines[-1].startswith("left mind/p100.md: the page has no frontmatter")
    assert lines[1:-1] == [f"adopted mind/p{i:03d}.md" for i in range(230) if i != 100]
    assert len(log_rows(workspace)) == 230
    assert run_mem("-w", workspace, "always", "list", check=True).stdout.decode().strip().endswith("by hand")


def test_watch_with_a_debounce_out_of_range_is_one_line(workspace):
    """Regression: `mem watch --debounce-ms -5` ended in a traceback (OverflowError in watchfiles)."""
    for value in ("-5", "86400001"):
        result = run_mem("-w", workspace, "watch", "--debounce-ms", value)
        assert (result.returncode, result.stdout) == (2, b"")
        assert result.stderr.decode() == f"error: --debounce-ms must be between 0 and 86400000 (a day), not {value}\n"


def test_a_catalog_edit_in_mind_md_is_said_not_adopted_never_adopted_in_silence(workspace):
    """Regression: an edit of a page's hook in mind.md's catalog printed "adopted mind.md" and recorded nothing;
    the next `## Always` edit then rendered mind.md again and the catalog edit was gone without a word."""
    page = workspace.parent / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", page, check=True)
    run_mem("-w", workspace, "always", "add", "first rule", check=True)
    mind, rows = workspace / "mind.md", log_rows(workspace)
    mind.write_text(mind.read_text().replace("— staging first", "— my better hook"))
    result = run_mem("-w", workspace, "adopt")
    out = result.stdout.decode()
    assert result.returncode == 1 and "adopted mind.md" not in out, out
    assert "left mind.md: only lines outside `## Always` changed, which are not adopted" in out
    assert log_rows(workspace) == rows and "my better hook" in mind.read_text()  # left as the hand made it
    mind.write_text(mind.read_text().replace("- first rule", "- first rule, reworded"))
    out = run_mem("-w", workspace, "adopt").stdout.decode()
    assert "adopted mind.md" in out and "left mind.md: its `## Always` lines were adopted, and mind.md rendered " \
        "again without the other lines edited" in out, out
    assert "first rule, reworded" in mind.read_text() and "my better hook" not in mind.read_text()


def _stale_file_edited_by_hand(memory, path: str, edit) -> None:
    """A write whose file is not rewritten yet (as `mem mcp` defers it), then a hand edit of the file as it was."""
    before = (memory.root / path).read_text()
    edit(memory)
    assert (memory.root / path).read_text() == before, "the write must leave the file stale for this test"
    (memory.root / path).write_text(before + "Ask in #deploys.\n" if path != "mind.md"
                                    else before.replace("- keep me\n", "- keep me\n- Cite a seq for every claim.\n"))


def test_a_hand_edit_of_a_stale_page_is_applied_onto_the_version_written_since(memory):
    """Regression: the edit was adopted over the newer version (an acknowledged MCP str_replace) and undid it."""
    memory.write_page("deploy", PAGE)
    memory.defer_files = True
    newer = PAGE.replace(b"Staging first.", b"Staging first. Prod needs the owner's ack.")
    _stale_file_edited_by_hand(memory, "mind/deploy.md", lambda m: m.write_page("deploy", newer))
    memory.defer_files = False
    report = adopt(memory)
    assert report.adopted == ["mind/deploy.md"] and report.refused == {}
    page = memory.show("mind/deploy.md", memory.log.head())
    assert page.endswith("Staging first. Prod needs the owner's ack.\nAsk in #deploys.\n"), page
    assert (memory.root / "mind/deploy.md").read_text() == page
    assert workspace_status(memory).clean


def test_a_hand_edit_made_on_an_adopted_merge_is_merged_onto_it(memory):
    """Regression: an adopted merge left the base where it was (the file written before it), so the next edit of
    the file, still showing the hand's version, lost the newer write's line or was refused for good."""
    memory.write_page("deploy", PAGE)
    memory.defer_files = True  # as under `mem mcp`: the adopted merge is not written over the hand's file either
    newer = PAGE.replace(b"Staging first.", b"Staging first. Prod needs the owner's ack.")
    _stale_file_edited_by_hand(memory, "mind/deploy.md", lambda m: m.write_page("deploy", newer))
    assert adopt(memory).adopted == ["mind/deploy.md"]
    path = memory.root / "mind/deploy.md"
    path.write_text(path.read_text() + "Then tell #ops.\n")
    report = adopt(memory)
    assert report.adopted == ["mind/deploy.md"] and report.refused == {}, report
    page = memory.show("mind/deploy.md", memory.log.head())
    assert page.endswith("Staging first. Prod needs the owner's ack.\nAsk in #deploys.\nThen tell #ops.\n"), page


def test_a_hand_edit_left_on_a_base_an_adopted_version_outran_is_adopted(memory):
    """A workspace an earlier mindlog left so (a hand edit made while its version was being adopted kept the base
    before it): the file is the current version with lines appended, which `mem status` says `mem adopt` keeps."""
    import hashlib

    memory.write_page("deploy", PAGE)
    path = memory.root / "mind/deploy.md"
    path.write_bytes(PAGE + b"hand 1\n")
    adopt(memory)
    row = (PAGE, len(PAGE), *memory.views.wiki_file_meta("mind/deploy.md"))
    memory.views.written.record("mind/deploy.md", hashlib.sha256(PAGE).hexdigest(), row)  # the base the race left
    memory.views.written.mark_dirty(["mind/deploy.md"])
    path.write_bytes(PAGE + b"hand 1\nhand 2\n")
    assert "`mem adopt` keeps the edit" in memory.hand_edited_message(["mind/deploy.md"])
    report = adopt(memory)
    assert report.adopted == ["mind/deploy.md"] and report.refused == {}, report
    assert memory.page_text("deploy").endswith("hand 1\nhand 2\n")
    assert workspace_status(memory).clean


def test_a_hand_edit_of_a_stale_mind_md_does_not_remove_the_line_written_since(memory):
    """Regression: adopting it recorded an always.remove of the line an MCP insert had just added."""
    memory.always_add("keep me")
    memory.defer_files = True
    _stale_file_edited_by_hand(memory, "mind.md", lambda m: m.always_add("Prod needs the owner's ack."))
    memory.defer_files = False
    adopt(memory)
    # the hand-added line goes where the edit put it, after "keep me"; the line written since stays
    assert memory.always() == ["keep me", "Cite a seq for every claim.", "Prod needs the owner's ack."]
    assert "always.remove" not in [e.kind for e in memory.log.read()]


def test_a_hand_edit_of_a_stale_page_changing_the_same_lines_is_refused_and_left_on_disk(workspace):
    with Memory.open(workspace) as memory:
        memory.write_page("deploy", PAGE)
        memory.defer_files = True
        memory.write_page("deploy", PAGE.replace(b"# ", b"# Newer "))
        head = memory.log.head()
    path = workspace / "mind/deploy.md"
    path.write_text(path.read_text().replace("# ", "# By hand "))
    result = run_mem("adopt", "-w", workspace)
    assert result.returncode == 1, result
    said = (result.stdout + result.stderr).decode()
    assert "left mind/deploy.md: edited by hand on an older version of the page" in said, said
    assert "changed the same lines" in said and "`mem show mind/deploy.md` has the current version" in said, said
    assert "# By hand " in path.read_text()
    with Memory.open(workspace) as memory:
        assert memory.log.head() == head and "# Newer " in memory.show("mind/deploy.md", head)


def test_a_file_written_by_hand_while_mindlog_replaces_it_is_left_as_it_is(memory, tmp_path):
    """The check that a file is not a hand edit and its replacement are apart (the fsyncs between): an edit made
    in between is kept and reported, never renamed over."""
    from projections.materialize import FileReport, _land, _write_temp, stat_key

    target = tmp_path / "page.md"
    target.write_text("as written\n")
    checked = stat_key(target)
    tmp, digest = _write_temp(target, ["newer\n"], sync=False)
    with open(target, "a") as f:
        f.write("edited by hand meanwhile\n")
    report, records = FileReport(written=["page.md"]), []
    _land(memory.views, [(tmp, target, "page.md", digest, b"newer\n", checked)], records, report)
    assert target.read_text() == "as written\nedited by hand meanwhile\n"
    assert report.refused == ["page.md"] and report.written == [] and records == [] and not tmp.exists()


lines = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "d\n", "\n"]), max_size=12)
distinct = st.lists(st.integers(0, 99).map(lambda n: f"line {n}\n"), unique=True, max_size=12)
fresh = st.lists(st.integers(100, 199).map(lambda n: f"new {n}\n"), unique=True, max_size=4)


@given(distinct, st.data())
def test_a_three_way_merge_keeps_both_sides_changes_of_different_lines(base, data):
    """Each side replaces its own slice of the base, the slices apart: the merge holds both, in place (the base's
    lines distinct and the new ones fresh, so that each side's change is seen where it was made)."""
    cut = sorted(data.draw(st.lists(st.integers(0, len(base)), min_size=4, max_size=4)))
    ours_lines, theirs_lines = data.draw(fresh), data.draw(fresh)
    if cut[0] == cut[3] and ours_lines and theirs_lines or set(ours_lines) & set(theirs_lines):
        return  # both inserting at one place (which goes first is for a person), or a new line on both sides
    ours = base[:cut[0]] + ours_lines + base[cut[1]:]
    theirs = base[:cut[2]] + theirs_lines + base[cut[3]:]
    expected = base[:cut[0]] + ours_lines + base[cut[1]:cut[2]] + theirs_lines + base[cut[3]:]
    assert three_way("".join(base), "".join(ours), "".join(theirs)) == "".join(expected)
    assert three_way("".join(base), "".join(theirs), "".join(ours)) == "".join(expected)


@given(lines, lines)
def test_a_three_way_merge_of_one_side_is_that_side(base, other):
    base_text, other_text = "".join(base), "".join(other)
    assert three_way(base_text, other_text, base_text) == other_text
    assert three_way(base_text, base_text, other_text) == other_text
    assert three_way(base_text, other_text, other_text) == other_text


def test_a_three_way_merge_refuses_two_changes_of_one_line():
    assert three_way("a\nb\nc\n", "a\nB\nc\n", "a\nb2\nc\n") is None
    assert three_way("a\nc\n", "a\nx\nc\n", "a\ny\nc\n") is None
    assert three_way("a\nb\n", "A\nb\n", "a\nb\nc\n") == "A\nb\nc\n"


def test_a_three_way_merge_of_a_change_and_that_change_gone_on_is_the_longer():
    assert three_way("a\n", "a\nx\n", "a\nx\ny\n") == "a\nx\ny\n"
    assert three_way("a\n", "a\nx\ny\n", "a\nx\n") == "a\nx\ny\n"
    assert three_way("a\nb\nc\n", "a\nX\nc\n", "a\nw\nX\nc\n") == "a\nw\nX\nc\n"
    assert three_way("a\nb\nc\n", "a\nc\n", "a\nX\nc\n") is None  # a delete and a rewrite of one line


def test_a_write_refused_over_an_edit_of_mind_md_outside_always_says_what_puts_it_right(workspace):
    """Regression (nc13a): the refusal sent the user to `mem adopt`, which then left mind.md: only the `## Always`
    lines are adopted."""
    page = workspace.parent / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "always", "add", "a", check=True)
    with open(workspace / "mind.md", "a") as mind:
        mind.write("- hand line\n")
    before = log_rows(workspace)
    result = run_mem("-w", workspace, "page", "write", "p2", "--file", page)
    assert result.returncode == 1 and result.stderr.decode() == (
        "error: mind.md was edited by hand since mindlog wrote it: only lines outside `## Always` changed, which "
        "`mem adopt` does not take (the rest of mind.md is made from the pages (a page's title and `description`): "
        "edit mind/<slug>.md): `mem show mind.md > mind.md` puts the file back, or pass --force to overwrite it\n")
    assert log_rows(workspace) == before
    (workspace / "mind.md").write_bytes(run_mem("-w", workspace, "show", "mind.md", check=True).stdout)
    run_mem("-w", workspace, "page", "write", "p2", "--file", page, check=True)


def test_a_page_written_over_a_file_made_by_hand_is_refused_not_left_behind(workspace, tmp_path):
    """Regression (nc13c): `mem page write np` over a hand-made mind/np.md said "ingest", left the hand's text on disk
    (status: "not written"), and a later `mem adopt` took the hand's text over the agent's page."""
    (workspace / "mind/np.md").write_text("---\ntype: note\n---\n# Hand\n")
    (tmp_path / "np.md").write_text("---\ntype: note\n---\n# Agent\n")
    result = run_mem("-w", workspace, "page", "write", "np", "--file", tmp_path / "np.md")
    assert result.returncode == 1 and result.stderr.decode() == (
        "error: mind/np.md is on disk, made by hand: `mem adopt` keeps the edit (or `mem page write np --file "
        "mind/np.md`), or pass --force to overwrite it\n"), result.stderr
    assert log_rows(workspace) == []
    run_mem("-w", workspace, "page", "write", "np", "--file", tmp_path / "np.md", "--force", check=True)
    assert "# Agent" in (workspace / "mind/np.md").read_text()


def test_a_hand_edit_adopt_cannot_take_is_not_sent_to_adopt(workspace, tmp_path):
    """Regression (nc13c): every write over a hand-edited page with no frontmatter (or a secret) said to adopt it, which
    refused it; an agent called the adopt tool in a loop. The write now says why adopt cannot take it, and what can."""
    from mcp.client.client import Client

    from cli.mcp_server import build_server
    import anyio

    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "other", "--file", page, check=True)
    (workspace / "mind/other.md").write_text("no frontmatter\n")
    refused = run_mem("-w", workspace, "page", "delete", "other")
    assert refused.returncode == 1 and refused.stderr.decode() == (
        "error: mind/other.md was edited by hand since mindlog wrote it: `mem adopt` cannot take it (the page has no "
        "frontmatter: start it with '---', a line `type: ...`, and '---'): fix the file, or pass --force to overwrite "
        "it\n"), refused.stderr

    async def main():
        with Memory.open(workspace) as memory:
            async with Client(build_server(memory)) as client:
                return await client.session.call_tool("str_replace", {"path": "/memories/mind/other.md",
                                                                      "old_str": "Staging first.", "new_str": "Prod."})

    answer = anyio.run(main)
    assert answer.is_error and "the adopt tool cannot take it (the page has no frontmatter" in answer.content[0].text
    assert "a person must fix or delete the file in a shell" in answer.content[0].text
    (workspace / "mind/other.md").write_text(PAGE.decode() + "key AKIA4HXQ7ZT2LMNB3K5P\n")
    said = run_mem("-w", workspace, "page", "delete", "other").stderr.decode()
    assert "(`mem adopt --allow-secret` takes it as it is): fix the file, or pass --force" in said, said


def test_an_always_line_edited_in_place_keeps_its_place(memory):
    """Regression (nc19b): a line changed in the middle of `## Always`, or added between two, moved to the end when
    adopted (always.add only appended); the lines are where the edit put them, now and as of then, after a replay."""
    for line in ("first", "second", "third"):
        memory.always_add(line)
    root = memory.root
    text = (root / "mind.md").read_text()
    (root / "mind.md").write_text(text.replace("- second\n", "- second, sharpened\n").replace(
        "- first\n", "- zeroth\n- first\n"))
    report = adopt(memory)
    assert report.adopted == ["mind.md"] and report.refused == {}
    wanted = ["zeroth", "first", "second, sharpened", "third"]
    assert memory.always() == wanted
    assert "\n".join(f"- {line}" for line in wanted) in (root / "mind.md").read_text()
    assert memory.always(memory.log.head()) == wanted
    replay(memory)
    assert memory.always() == wanted and workspace_status(memory).clean


def test_always_add_at_a_place(workspace):
    """`mem always add --at N` puts the line at N (as `mem always list` numbers them); a place past the end plus one
    is refused, and the log is untouched."""
    for line in ("a", "c"):
        run_mem("-w", workspace, "always", "add", line, check=True)
    run_mem("-w", workspace, "always", "add", "b", "--at", "2", check=True)
    run_mem("-w", workspace, "always", "add", "d", "--at", "4", check=True)
    assert json.loads(run_mem("-w", workspace, "always", "list", "--json", check=True).stdout) == ["a", "b", "c", "d"]
    before = log_rows(workspace)
    for bad in ("0", "6", "-1"):
        result = run_mem("-w", workspace, "always", "add", "e", "--at", bad)
        assert result.returncode != 0 and "there is no place" in result.stderr.decode(), result.stderr
        assert "Traceback" not in result.stderr.decode()
    assert log_rows(workspace) == before


def test_always_remove_if_line_removes_nothing_when_the_lines_moved_since(workspace):
    """Regression (nc34a): `mem always remove N` removed whatever line N was by the time it ran: two removals of line
    1 at once, with an add at line 1 between them, removed a line neither caller had seen. `--if-line` says which line
    the caller saw; another there is refused, the log untouched."""
    for line in ("line 1", "line 2"):
        run_mem("-w", workspace, "always", "add", line, check=True)
    run_mem("-w", workspace, "always", "add", "new first", "--at", "1", check=True)
    before = log_rows(workspace)
    for number, said in (("1", "line 1 of `## Always` is 'new first' now, not 'line 1' (it is line 2 now)"),
                         ("9", "`## Always` has no line 9 now (3 lines), not 'line 1' (it is line 2 now)")):
        refused = run_mem("-w", workspace, "always", "remove", number, "--if-line", "line 1")
        assert refused.returncode == 1 and refused.stderr.decode() == f"error: {said}: nothing was removed\n", refused
    assert log_rows(workspace) == before
    run_mem("-w", workspace, "always", "remove", "2", "--if-line", "line 1", check=True)
    assert json.loads(run_mem("-w", workspace, "always", "list", "--json", check=True).stdout) == ["new first", "line 2"]


def test_always_lines_moved_or_a_repeated_line_removed_are_said_as_they_are(memory):
    """Regression (nc21b): lines only moved, or one copy of a line given twice removed, were reported "adopted mind.md"
    with nothing recorded, and `mem status` went on saying mind.md was edited by hand. A copy removed is removed; a
    move is refused, saying how to make it, and the file left as edited."""
    for line in ("a", "b", "a"):
        memory.always_add(line)
    root = memory.root
    text = (root / "mind.md").read_text()
    (root / "mind.md").write_text(text.replace("- a\n- b\n- a\n", "- a\n- b\n"))
    report = adopt(memory)
    assert report.adopted == ["mind.md"] and report.refused == {} and memory.always() == ["a", "b"]
    assert memory.log.read(after=memory.log.head() - 1).__next__().kind == "always.remove"

    head, moved = memory.log.head(), (root / "mind.md").read_text().replace("- a\n- b\n", "- b\n- a\n")
    (root / "mind.md").write_text(moved)
    report = adopt(memory)
    assert report.adopted == [] and memory.log.head() == head and memory.always() == ["a", "b"]
    assert report.refused == {"mind.md": "its `## Always` lines were only moved, which is not adopted: `mem always "
                                         "remove N`, then `mem always add --at M`, moves a line; `mem show mind.md > "
                                         "mind.md` puts the file back"}
    assert (root / "mind.md").read_text() == moved

    (root / "mind.md").write_text(moved.replace("- a\n", "- a\n- c\n"))  # moved, and a line added
    report = adopt(memory)
    assert report.adopted == ["mind.md"] and memory.always() == ["a", "c", "b"]
    assert report.refused["mind.md"].endswith("rendered again without the lines moved: `mem always remove N`, then "
                                              "`mem always add --at M`, moves a line")


def test_always_remove_of_a_line_given_twice_removes_the_one_named(workspace):
    """Regression: always.remove named the line by its text alone and the fold took the first copy, so `mem always
    remove 3` of a, b, a removed line 1."""
    for line in ("a", "b", "a"):
        run_mem("-w", workspace, "always", "add", line, check=True)
    run_mem("-w", workspace, "always", "remove", "3", check=True)
    assert json.loads(run_mem("-w", workspace, "always", "list", "--json", check=True).stdout) == ["a", "b"]
    run_mem("-w", workspace, "replay", check=True)
    assert json.loads(run_mem("-w", workspace, "always", "list", "--json", check=True).stdout) == ["a", "b"]
    assert json.loads(run_mem("-w", workspace, "always", "list", "--seq", "3", "--json", check=True).stdout) == [
        "a", "b", "a"]


MIND_BEFORE = "# Mind\n\n## Always\n\n- be brief\n\n## Notes\n\nOn-call: lee (until Friday).\n"
WIKI_LOG = ("# Log\n\n## [2026-11-02] update | Deploy\nRotated on-call to lee\n\n"
            "## [2026-11-01] ingest | Deploy\nFirst\n")


def test_a_wiki_folder_brought_under_mindlog_keeps_its_change_log(tmp_path):
    """Regression (nc24b, data loss): `mem init` in an existing wiki folder, then `mem adopt`, rewrote its own
    mind/log.md while saying it left it: adopting mind.md's Always lines forced every file due, the log's too, and
    the wiki's history was in no event. Its entries are now kept as a log.restore event, below those written since,
    and the file is mindlog's from then on; a log that is no change log is left, and says what to do. The wiki's
    mind.md, which mindlog renders from the pages but for `## Always` (its notes were lost), is kept as a file.
    Regression (nc31b): `mem status` said that a newer version of that mind.md waited, of a log holding nothing."""
    wiki = tmp_path / "wiki"
    (wiki / "mind").mkdir(parents=True)
    (wiki / "mind.md").write_text(MIND_BEFORE)
    (wiki / "mind/deploy.md").write_bytes(PAGE)
    (wiki / "mind/log.md").write_text(WIKI_LOG)
    said = run_mem("init", "-w", wiki, "--agent", "hermes", check=True).stdout.decode()
    assert "it holds a wiki already (mind.md, mind/): `mem adopt` records its pages" in said
    waiting = run_mem("-w", wiki, "status", check=True).stdout.decode()  # no "newer version waits" of an empty log
    assert ("mind.md  (edited by hand, but it is from before mindlog: `mem adopt` keeps it whole as imported/mind.md "
            "and takes its `## Always` lines)") in waiting and "newer version" not in waiting
    adopted = run_mem("-w", wiki, "adopt", check=True).stdout.decode()
    assert "adopted mind/log.md" in adopted and "adopted mind/deploy.md" in adopted
    assert ("kept mind.md as it was, from before mindlog, as imported/mind.md (`mem show imported/mind.md`): all but "
            "its `## Always` lines is made from the pages now") in adopted
    assert [row[6] for row in log_rows(wiki)] == ["log.restore", "file.write", "always.add", "page.ingest"]
    assert run_mem("-w", wiki, "show", "imported/mind.md", check=True).stdout == MIND_BEFORE.encode()
    text = (wiki / "mind/log.md").read_text()
    assert text.endswith(WIKI_LOG.removeprefix("# Log\n")) and text.index("ingest | ") < text.index("Rotated")
    assert run_mem("-w", wiki, "show", "mind/log.md", "--seq", "1", check=True).stdout.decode() == WIKI_LOG
    assert "clean" in run_mem("-w", wiki, "status", check=True).stdout.decode()
    listed = run_mem("-w", wiki, "log", check=True).stdout.decode().splitlines()
    assert listed[0].endswith("log.restore    2 entries of a mind/log.md from before")

    other = tmp_path / "other"
    (other / "mind").mkdir(parents=True)
    (other / "mind/deploy.md").write_bytes(PAGE)
    (other / "mind/log.md").write_text("my notes, not a change log\n")
    run_mem("init", "-w", other, check=True)
    result = run_mem("-w", other, "adopt")
    assert result.returncode == 1 and "left mind/log.md: it is no change log mindlog can read" in result.stdout.decode()
    assert (other / "mind/log.md").read_text() == "my notes, not a change log\n"


def test_a_wiki_folders_files_are_kept_byte_for_byte_and_no_always_line_is_lost_halfway(tmp_path):
    """Regression (nc25a): adopt kept the old mind.md with its CRLF turned LF and bytes that are not UTF-8 replaced,
    read a CRLF mind/log.md as no change log, and with a `## Always` line too long, wrote the lines before it,
    rendered mind.md again and lost that line and those after it (`mem status` then said clean). Status told a
    pre-mindlog log to be deleted or forced over; it says adopt keeps it."""
    wiki = tmp_path / "wiki"
    (wiki / "mind").mkdir(parents=True)
    mind = b"# Mind\r\n\r\n## Always\r\n\r\n- caf\xe9 rule\r\n- " + b"x" * 3000 + b"\r\n- after\r\n"
    log = b"# Log\r\n\r\n## [2026-11-01] ingest | A\r\nold caf\xe9\r\n"
    (wiki / "mind.md").write_bytes(mind)
    (wiki / "mind/log.md").write_bytes(log)
    run_mem("init", "-w", wiki, check=True)
    said = run_mem("-w", wiki, "status", check=True).stdout.decode()
    assert "mind/log.md  (edited by hand, but it is from before mindlog: `mem adopt` keeps its entries" in said
    refused = run_mem("-w", wiki, "adopt")
    assert "left mind.md: the Always line is longer than 2000 characters" in refused.stdout.decode()
    assert (wiki / "mind.md").read_bytes() == mind and not any(row[6] == "always.add" for row in log_rows(wiki))
    (wiki / "mind.md").write_bytes(mind.replace(b"x" * 3000, b"short"))
    run_mem("-w", wiki, "adopt", check=True)
    assert run_mem("-w", wiki, "show", "imported/mind/log.md", check=True).stdout == log
    assert run_mem("-w", wiki, "show", "imported/mind.md", check=True).stdout == mind.replace(b"x" * 3000, b"short")
    assert [line for line in (wiki / "mind.md").read_text().splitlines() if line.startswith("- ")][:3] == [
        "- caf\ufffd rule", "- short", "- after"]
    assert "old caf" in (wiki / "mind/log.md").read_text(errors="replace")


def test_a_wiki_mind_md_holding_a_secret_says_what_to_do_not_adopt_again(tmp_path):
    """Regression (nc25a): a pre-mindlog mind.md with a password in its notes could not be kept as imported/mind.md,
    and the pages waiting on it said "`mem adopt` records its `## Always` lines", the command that had just refused:
    a loop. Both now name the secret, `--allow-secret` and taking it out; either way on, adopt then takes all."""
    wiki = tmp_path / "wiki"
    (wiki / "mind").mkdir(parents=True)
    (wiki / "mind.md").write_text(MIND_BEFORE + "old db password: Tr0ub4dor3x9\n")
    (wiki / "mind/deploy.md").write_bytes(PAGE)
    run_mem("init", "-w", wiki, check=True)
    refused = run_mem("-w", wiki, "adopt")
    said = refused.stdout.decode()
    assert refused.returncode == 1 and log_rows(wiki) == []
    assert ("left mind.md: it could not be kept as imported/mind.md (the write looks like it holds a secret: Secret "
            "Keyword in `content`, line 10) (`mem adopt --allow-secret` keeps it as it is), so it is left as it is, "
            "and the pages wait for it: take that out of the file, then `mem adopt`") in said
    assert ("left mind/deploy.md: mind.md is on disk, made by hand: `mem adopt` cannot keep it as imported/mind.md "
            "(the write looks like it holds a secret") in said
    assert "`mem adopt` records its" not in said and "pass --allow-secret if" not in said
    status = run_mem("-w", wiki, "status", check=True).stdout.decode()  # not "`mem adopt` keeps the edit" (nc27a)
    assert "not written:     mind.md  (edited by hand, but `mem adopt` cannot keep it as imported/mind.md" in status
    tools = Memory.open(wiki).keep_hint("mind.md", tools=True)
    assert tools.startswith("the adopt tool cannot keep it as imported/mind.md (the write looks like it holds a secret")
    assert tools.endswith("a person must take that out of the file in a shell, then call the adopt tool")

    (wiki / "mind.md").write_text(MIND_BEFORE)
    adopted = run_mem("-w", wiki, "adopt", check=True).stdout.decode()
    assert "adopted mind/deploy.md" in adopted and "kept mind.md as it was" in adopted


def test_a_wiki_change_log_past_one_events_limit_is_kept_in_parts(tmp_path):
    """Regression (nc25a): an old mind/log.md over 8 MiB encoded was refused as one too large event, with no way on
    but --force, which lost it. Its entries are restored in as many events as they need, oldest part first, and the
    file mindlog renders from them is the wiki's byte for byte."""
    wiki = tmp_path / "wiki"
    (wiki / "mind").mkdir(parents=True)
    old = "# Log\n\n" + "\n".join(f"## [2024-01-0{day}] update | Page {day}\n" + "note word " * 200_000 + "\n"
                                  for day in range(5, 0, -1))
    (wiki / "mind/log.md").write_text(old)
    run_mem("init", "-w", wiki, check=True)
    assert "adopted mind/log.md" in run_mem("-w", wiki, "adopt", check=True).stdout.decode()
    rows = log_rows(wiki)
    assert [row[6] for row in rows] == ["log.restore"] * 5
    assert (wiki / "mind/log.md").read_text() == old
    assert run_mem("-w", wiki, "show", "mind/log.md", check=True).stdout.decode() == old
    assert "clean" in run_mem("-w", wiki, "status", check=True).stdout.decode()
    assert "Page 1\n" in run_mem("-w", wiki, "show", "mind/log.md", "--seq", "1", check=True).stdout.decode()


@given(st.lists(st.text(alphabet="ab \n", min_size=1, max_size=40), max_size=30), st.integers(8, 60))
def test_restores_in_parts_keep_every_entry_in_order(entries, limit):
    """The parts of a restore, appended oldest first and rendered newest first, are the entries as given."""
    from eventstore.kinds import LogRestore
    LogRestore.PART_BYTES, kept = limit, LogRestore.PART_BYTES
    try:
        parts = LogRestore.parts(entries)
    finally:
        LogRestore.PART_BYTES = kept
    assert [entry for part in reversed(parts) for entry in part.entries] == entries
    assert all(part.entries for part in parts)
    assert all(len(part.entries) == 1 or sum(len(e.encode()) + 1 for e in part.entries) <= limit + 1 for part in parts)


def test_a_wiki_change_log_that_cannot_be_kept_whole_is_left_untouched_with_the_way_on(tmp_path):
    """Regression (nc27a, data loss): a log over 8 MiB that mindlog writes otherwise (bytes not UTF-8, CRLF) was
    restored, rewritten on disk, and then its copy as it was refused as too large: its bytes were nowhere, while adopt
    said it left it and status said clean. One entry over an event's limit left every page waiting, each pointing back
    at adopt. Both are known before anything is appended, the file left as it is, and moving it aside is the way on."""
    wiki = tmp_path / "wiki"
    (wiki / "mind").mkdir(parents=True)
    (wiki / "mind/deploy.md").write_bytes(PAGE)
    old = ("# Log\n\n" + "\n".join(f"## [2026-01-{i % 28 + 1:02d}] update | page {i}\n" + "\xe9" * 1000 + "\n"
                                  for i in range(9000))).encode("latin-1")
    (wiki / "mind/log.md").write_bytes(old)
    run_mem("init", "-w", wiki, check=True)
    refused = run_mem("-w", wiki, "adopt")
    said = refused.stdout.decode()
    assert refused.returncode == 1 and log_rows(wiki) == [] and (wiki / "mind/log.md").read_bytes() == old
    assert ("left mind/log.md: mindlog would write it otherwise (CRLF line ends, bytes that are not UTF-8 or its "
            "layout), and at 9,331,896 bytes it is too large to keep as it is too") in said
    assert "move it aside (mindlog writes its own; the file stays yours), then `mem adopt` again" in said
    assert "`mem adopt` keeps its entries" not in run_mem("-w", wiki, "status", check=True).stdout.decode()

    (wiki / "mind/log.md").write_text("# Log\n\n## [2026-01-01] update | big\n" + "x" * (9 * 1024 * 1024) + "\n")
    said = run_mem("-w", wiki, "adopt").stdout.decode()
    assert "left mind/log.md: an entry of it is over 8 MiB, more than one event holds: move it aside" in said
    assert "left mind/deploy.md: mind/log.md is on disk, made by hand: it is from before mindlog, and `mem adopt` " \
        "cannot keep it (an entry of it is over 8 MiB" in said and log_rows(wiki) == []
    (wiki / "mind/log.md").rename(tmp_path / "old-log.md")
    assert "adopted mind/deploy.md" in run_mem("-w", wiki, "adopt", check=True).stdout.decode()


def test_the_way_to_put_an_entries_file_back_is_quoted_for_the_shell(workspace):
    """Regression (nc27a): `mem show PATH > PATH` was given unquoted: pasted, a path with a blank or `$` failed, and
    left a stray file behind."""
    run_mem("-w", workspace, "layer", "add", "notes", "memory/my notes $HOME.md", check=True)
    run_mem("-w", workspace, "entry", "add", "notes", "[FACT] 2026-11-01: kept", check=True)
    (workspace / "memory/my notes $HOME.md").write_text("edited\n")
    said = run_mem("-w", workspace, "adopt").stdout.decode()
    assert "`mem show 'memory/my notes $HOME.md' > 'memory/my notes $HOME.md'` puts the file back" in said


def test_watch_waits_for_the_files_to_be_quiet_as_long_as_debounce_ms_says(workspace):
    """Regression (nc30b): `--debounce-ms 1000` adopted eight saves 100 ms apart one by one (it was passed to
    watchfiles as the longest a group of changes may grow, whose quiet is 50 ms): a page saved in steps left every
    step in its history. The files quiet for the time given, the last text is adopted once."""
    watcher = subprocess.Popen([*mem_command(), "-w", str(workspace), "watch", "--debounce-ms", "1000"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert watcher.stderr.readline().startswith(b"watching")
        time.sleep(2)  # the watch begins after that line (begun mid-way, a first adoption would take a step)
        page = workspace / "mind/z.md"
        for step in range(8):
            page.write_bytes(PAGE + f"Step {step}.\n".encode())
            time.sleep(0.1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(log_rows(workspace)) < 1:
            time.sleep(0.2)
        time.sleep(1.5)
        rows = log_rows(workspace)
        assert [row[6] for row in rows] == ["page.ingest"], rows
        assert run_mem("-w", workspace, "show", "z", check=True).stdout.endswith(b"Step 7.\n")
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)


def test_a_mind_folder_deleted_while_it_held_no_page_is_made_again_by_the_next_write(workspace):
    """A mind/ that held only mindlog's change log is no folder of pages moved aside: a page written is written
    there, the folder made again (as before folders gone were kept from being made again)."""
    import shutil

    shutil.rmtree(workspace / "mind")
    page = workspace.parent / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "a", "--file", page, check=True)
    assert (workspace / "mind/a.md").read_bytes() == PAGE and (workspace / "mind/log.md").exists()
    assert "clean" in run_mem("-w", workspace, "status", check=True).stdout.decode()


def test_status_says_what_stands_where_mind_goes_instead_of_failing(workspace):
    """Regression (nc33a): with a file where mind/ was, `mem status` (and `--json`) failed with the error alone."""
    run_mem("-w", workspace, "page", "write", "a", "--file", "-", input=PAGE, check=True)
    os.replace(workspace / "mind", workspace.parent / "mind.bak")
    (workspace / "mind").write_text("not a folder\n")
    said = run_mem("-w", workspace, "status", check=True).stdout.decode()
    assert f"in the way:      {workspace / 'mind'} is a file where mindlog needs a folder" in said, said
    status = json.loads(run_mem("-w", workspace, "status", "--json", check=True).stdout)
    assert status["clean"] is False and status["missing"] == [] and status["in_the_way"] == [
        f"{workspace / 'mind'} is a file where mindlog needs a folder (for 2 files); move it away (`mem replay` "
        "then writes the files)"]


def test_the_mind_folder_moved_aside_is_not_taken_as_the_deletion_of_every_page(workspace):
    """Regression (nc30b): `mv mind mind.bak` (a backup, an editor's move) under `mem adopt` or `mem watch` recorded
    the deletion of every page; putting the folder back was then refused. It is reported and nothing recorded."""
    page = workspace.parent / "p.md"
    page.write_bytes(PAGE)
    for slug in ("a", "b"):
        run_mem("-w", workspace, "page", "write", slug, "--file", page, check=True)
    rows = log_rows(workspace)
    (workspace / "mind").rename(workspace / "mind.bak")
    adopted = run_mem("-w", workspace, "adopt")
    assert adopted.returncode == 1 and adopted.stdout.decode() == (
        "left mind/: the folder is gone, with its 2 page(s): not taken as their deletion (put it back, or `mem "
        "replay` writes it again from the log; `mkdir mind`, then `mem adopt`, records their deletion)\n"), adopted
    assert log_rows(workspace) == rows
    status = run_mem("-w", workspace, "status", check=True).stdout.decode()  # not three pages "deleted by hand"
    assert "folder gone:     mind/ (3 file(s) mindlog writes there" in status and "missing:" not in status, status
    written = run_mem("-w", workspace, "page", "write", "c", "--file", page)  # it made mind/ with c alone (nc31a)
    assert written.returncode == 1 and written.stderr.decode().startswith(
        "error: mind/ is gone, with its 2 page(s) (moved aside?): put it back"), written
    assert log_rows(workspace) == rows and not (workspace / "mind").exists()
    (workspace / "mind.bak").rename(workspace / "mind")
    assert run_mem("-w", workspace, "adopt", check=True).stdout == b"nothing edited by hand\n"
    assert log_rows(workspace) == rows


def test_a_page_the_log_never_had_is_adopted_as_written_by_hand_not_edited_in_place(workspace):
    """Regression (nc35b): adopting a wiki kept by hand before mindlog logged each of its pages as "edited in place";
    an edit of a page the log has keeps that note."""
    (workspace / "mind/deploy.md").write_bytes(PAGE)
    run_mem("-w", workspace, "adopt", check=True)
    (workspace / "mind/deploy.md").write_bytes(PAGE.replace(b"Staging first.", b"Staging first, always."))
    run_mem("-w", workspace, "adopt", check=True)
    notes = [event["body"].get("note") for event in json.loads(run_mem("-w", workspace, "log", "--json",
                                                                       check=True).stdout)]
    assert notes == ["written by hand", "edited in place"], notes
