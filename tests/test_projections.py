"""mind.md, pages and mind/log.md as projections: formats, one write three outputs, safe files."""

import os
import time

import pytest

from eventstore.errors import HandEdited
from projections.materialize import hand_edited

from conftest import PAGE, run_mem

V2 = (b"---\ntype: procedure\ndescription: staging first, prod needs owner ack\nowner: ops\n---\n"
      b"# Deploy procedure\n\nProd ack.\n")


def read(memory, path):
    return (memory.root / path).read_text()


def test_mind_md_layout(memory):
    memory.write_page("deploy-procedure", PAGE)
    memory.write_page("monitor", b"---\ntype: person\n---\n# Monitor [agent]\n")
    memory.always_add("Nothing on weekends. They want their time off.")
    assert read(memory, "mind.md") == (
        "# Mind\n\n## Always\n\n- Nothing on weekends. They want their time off.\n\n## Pages\n\n"
        "- [Deploy procedure](adf-file://mind/deploy-procedure.md) — staging first\n"
        "- [Monitor \\[agent\\]](adf-file://mind/monitor.md)\n")


def test_page_file_is_canonical_frontmatter_and_body(memory):
    memory.write_page("deploy", b"---\nzeta: 1\ndescription: 'staging: first'\ntype: procedure\n"
                                b"stale_after: 2026-12-01\n---\n# Deploy\n\nbody")
    assert read(memory, "mind/deploy.md") == (
        '---\ntype: procedure\ndescription: "staging: first"\nstale_after: 2026-12-01\nzeta: 1\n---\n'
        "# Deploy\n\nbody\n")


def test_unknown_frontmatter_keys_are_kept(memory):
    memory.write_page("deploy", V2)
    assert "owner: ops\n" in read(memory, "mind/deploy.md")


def test_log_md_newest_first_with_kinds(memory):
    memory.write_page("deploy", PAGE, "first [S1]")
    memory.write_page("deploy", V2, "second")
    memory.rename_page("deploy", "deploy-procedure")
    memory.delete_page("deploy-procedure", "gone")
    text = read(memory, "mind/log.md")
    headings = [line.split("] ", 1)[1] for line in text.splitlines() if line.startswith("## [")]
    assert headings == ["delete | Deploy procedure", "rename | Deploy procedure", "update | Deploy procedure",
                        "ingest | Deploy procedure"]
    assert text.startswith("# Log\n\n## [")
    assert "mind/deploy.md → mind/deploy-procedure.md" in text and "first [S1]" in text


def test_one_page_event_updates_page_catalog_and_log_together(memory):
    memory.write_page("deploy", PAGE)
    before = {p: read(memory, p) for p in ("mind.md", "mind/log.md", "mind/deploy.md")}
    memory.write_page("deploy", V2, "ack")
    after = {p: read(memory, p) for p in before}
    assert all(before[p] != after[p] for p in before)
    assert "staging first, prod needs owner ack" in after["mind.md"]
    assert "update | Deploy procedure" in after["mind/log.md"]
    event = memory.log.get_by_seq(memory.log.head())
    assert event.kind == "page.update" and event.body.parents == [memory.log.get_by_seq(1).id]


def test_rename_moves_the_file_and_keeps_history(memory):
    memory.write_page("deploy", PAGE)
    memory.rename_page("deploy", "deploy-procedure")
    assert not (memory.root / "mind/deploy.md").exists()
    assert read(memory, "mind/deploy-procedure.md") == (
        "---\ntype: procedure\ndescription: staging first\n---\n# Deploy procedure\n\nStaging first.\n")
    assert memory.show("mind/deploy.md", 1) is not None


def test_files_are_written_only_when_their_bytes_change(memory):
    memory.write_page("a", PAGE)
    page = memory.root / "mind/a.md"
    stat = page.stat()
    time.sleep(0.01)
    memory.write_page("b", PAGE)
    assert page.stat().st_mtime_ns == stat.st_mtime_ns and page.stat().st_ino == stat.st_ino
    memory.write_page("a", V2)
    assert page.stat().st_ino != stat.st_ino  # replaced by rename, not rewritten in place


def test_no_temporary_files_are_left_behind(memory):
    for i in range(5):
        memory.write_page(f"p{i}", PAGE)
    assert [p.name for p in (memory.root / "mind").iterdir() if p.name.startswith(".")] == []


def test_hand_edited_file_is_reported_and_never_silently_overwritten(memory):
    memory.write_page("deploy", PAGE)
    page = memory.root / "mind/deploy.md"
    page.write_text(page.read_text() + "my edit\n")
    assert hand_edited(memory.views, memory.root) == ["mind/deploy.md"]
    with pytest.raises(HandEdited, match="edited by hand"):
        memory.write_page("deploy", V2)
    assert memory.log.head() == 1 and "my edit" in page.read_text()
    memory.write_page("deploy", V2, force=True)
    assert "my edit" not in page.read_text()


def test_editing_the_page_file_then_writing_it_adopts_the_edit(memory):
    memory.write_page("deploy", PAGE)
    page = memory.root / "mind/deploy.md"
    page.write_text(page.read_text() + "my edit\n")
    memory.write_page("deploy", page.read_bytes())
    assert hand_edited(memory.views, memory.root) == []
    assert "my edit" in memory.show("mind/deploy.md", memory.log.head())


def test_mem_status_reports_hand_edits_behind_views_and_untracked(workspace):
    page = workspace.parent / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", page, check=True)
    (workspace / "mind.md").write_text("# Mind\n\nmine now\n")
    (workspace / "mind" / "stray.md").write_text("x")
    out = run_mem("-w", workspace, "status", check=True).stdout.decode()
    assert "edited by hand:  mind.md" in out and "untracked:       mind/stray.md" in out
    refused = run_mem("-w", workspace, "always", "add", "x")
    assert refused.returncode == 1 and b"mind.md was edited by hand" in refused.stderr
    assert run_mem("-w", workspace, "always", "add", "x", "--force").returncode == 0
    assert "mine now" not in (workspace / "mind.md").read_text()


def test_views_update_incrementally_with_their_checkpoint(memory):
    memory.write_page("a", PAGE)
    assert memory.views.checkpoint() == 1
    memory.always_add("x")
    assert memory.views.checkpoint() == 2
    assert memory.views.db.execute("SELECT count(*) FROM page_versions").fetchone()[0] == 1


def test_a_file_removed_by_hand_is_reported_and_replay_restores_it(memory):
    from projections.replay import replay
    from projections.status import workspace_status

    memory.write_page("a", PAGE)
    os.unlink(memory.root / "mind/a.md")
    assert workspace_status(memory).missing == ["mind/a.md"]
    replay(memory)
    assert (memory.root / "mind/a.md").read_bytes() == PAGE
    assert workspace_status(memory).clean
