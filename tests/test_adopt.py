"""Direct edits of the wiki files become events (`mem adopt`, `mem watch`); what cannot is left and reported."""

import subprocess
import time

from projections.adopt import adopt
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
    assert report.refused == {}
    kinds = [e.kind for e in memory.log.read(after=4)]
    assert sorted(kinds) == ["always.add", "always.remove", "page.delete", "page.ingest", "page.update"]
    assert memory.always() == ["keep me", "added by hand"]
    assert "Prod needs an ack." in memory.show("mind/deploy.md", memory.log.head())
    assert workspace_status(memory).clean


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


def test_watch_adopts_edits_as_they_happen(workspace):
    page = workspace.parent / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", page, check=True)
    watcher = subprocess.Popen([*mem_command(), "-w", str(workspace), "watch", "--debounce-ms", "100"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.5)
        (workspace / "mind/deploy.md").write_text(PAGE.decode() + "Edited while watched.\n")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(log_rows(workspace)) < 2:
            time.sleep(0.2)
        rows = log_rows(workspace)
        assert len(rows) == 2 and rows[1][6] == "page.update"
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)
