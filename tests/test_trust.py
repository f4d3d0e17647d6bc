"""The trust fields withhold, flag and refuse: what must NOT be retrieved, now and as of past moments."""

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from conftest import log_rows, run_mem

from eventstore.errors import Held, InvalidInput
from projections import audit, search

TODAY = "2026-11-30"


def page(title: str, body: str, **fields) -> bytes:
    extra = "".join(f"{k}: {json.dumps(v)}\n" for k, v in fields.items())
    return f"---\ntype: procedure\n{extra}---\n# {title}\n\n{body}\n".encode()


def found(memory, query, day=TODAY, **options):
    return [h.citation for h in search.search(memory.views, query, day=day, **options)]


@pytest.mark.parametrize("status", ["deprecated", "archived", "superseded-by: runbook", "Deprecated: use x"])
def test_withheld_status_is_left_out_of_search_and_believed_unless_all(memory, status):
    memory.write_page("runbook", page("Runbook", "Rollback with the script."))
    memory.loop_append("user", [{"type": "text", "text": "hello"}])
    current = memory.write_page("old", page("Old way", "Rollback by hand.")).seq
    withheld = memory.write_page("old", page("Old way", "Rollback by hand.", status=status)).seq
    assert found(memory, "rollback") == ["adf-file://mind/runbook.md"]
    assert "adf-file://mind/old.md" in found(memory, "rollback", include_all=True)
    assert found(memory, "hand") == [] and found(memory, "hand", as_of=withheld) == []
    assert found(memory, "hand", as_of=current) == ["adf-file://mind/old.md"]  # before it was withheld
    assert audit.believed(memory.views, withheld, last=0, day=TODAY).loop == []
    slugs = [p["slug"] for p in audit.believed(memory.views, withheld, day=TODAY).pages]
    assert slugs == ["runbook"]
    assert [p["slug"] for p in audit.believed(memory.views, current, day=TODAY).pages] == ["old", "runbook"]
    assert [p["slug"] for p in audit.believed(memory.views, withheld, include_all=True, day=TODAY).pages] == \
        ["old", "runbook"]
    line = next(x for x in (memory.root / "mind.md").read_text().splitlines() if "mind/old.md" in x)
    assert line.startswith("- [Old way](adf-file://mind/old.md) — (")
    assert ("superseded by runbook" if status.startswith("superseded") else status.split(":")[0].lower()) in line


def test_stale_pages_are_flagged_and_rank_below_fresh_ones(memory):
    memory.write_page("stale", page("Deploy deploy deploy", "Deploy deploy the thing.", stale_after="2026-10-01"))
    memory.write_page("fresh", page("Notes", "Deploy once.", stale_after="2027-01-01"))
    hits = search.search(memory.views, "deploy", day=TODAY)
    assert [h.citation for h in hits] == ["adf-file://mind/fresh.md", "adf-file://mind/stale.md"]
    assert hits[1].flags == ["stale since 2026-10-01"] and hits[0].flags == []
    before = search.search(memory.views, "deploy", day="2026-09-30")  # as the page stood fresh
    assert before[0].citation == "adf-file://mind/stale.md" and before[0].flags == []
    pages = {p["slug"]: p["flags"] for p in audit.believed(memory.views, memory.views.checkpoint(), day=TODAY).pages}
    assert pages == {"fresh": "", "stale": "stale since 2026-10-01"}


def test_stale_flag_in_mind_md_is_a_function_of_the_log(memory):
    memory.write_page("old", page("Old", "x", stale_after="2000-01-01"))
    assert "(stale since 2000-01-01)" in (memory.root / "mind.md").read_text()
    memory.write_page("new", page("New", "y", stale_after="2999-01-01"))
    assert "stale since 2999" not in (memory.root / "mind.md").read_text()


def test_reversed_entries_rank_below_what_reversed_them(memory):
    memory.declare_layer("decisions", "memory/decisions.md")
    first = memory.entry_add("decisions", "[DECISION] 2026-11-01: The hub runs on SQLite, SQLite, SQLite").seq
    first_id = memory.log.get_by_seq(first).id
    memory.entry_add("decisions", "[DECISION] 2026-11-29: The hub moves to PostgreSQL from SQLite", reverses=first_id)
    hits = search.search(memory.views, "sqlite hub", day=TODAY)
    assert [h.kind for h in hits] == ["entry", "entry"]
    assert hits[1].citation == first_id and hits[1].flags[0].startswith("reversed by ")
    assert hits[0].flags == []
    [alone] = search.search(memory.views, "sqlite hub", as_of=first, day=TODAY)  # not reversed yet then
    assert alone.citation == first_id and alone.flags == []


def test_stale_after_must_be_a_date_and_superseded_by_a_page(memory):
    before = log_rows(memory.root)
    with pytest.raises(InvalidInput, match="stale_after"):
        memory.write_page("p", page("P", "x", stale_after="soon"))
    with pytest.raises(InvalidInput, match="no page 'ghost'"):
        memory.write_page("p", page("P", "x", status="superseded-by: ghost"))
    with pytest.raises(InvalidInput, match="superseded by itself"):
        memory.write_page("p", page("P", "x", status="superseded-by: p"))
    assert log_rows(memory.root) == before


def test_held_pages_refuse_changes_until_released_and_both_are_logged(memory):
    memory.write_page("policy", page("Policy", "Never deploy on Fridays.", governance="hold"))
    before = log_rows(memory.root)
    with pytest.raises(Held, match="mem page release policy"):
        memory.write_page("policy", page("Policy", "Deploy whenever."))
    with pytest.raises(Held):
        memory.rename_page("policy", "rules")
    with pytest.raises(Held):
        memory.delete_page("policy")
    assert log_rows(memory.root) == before
    memory.release_page("policy", "The owner agreed to revise it.")
    memory.write_page("policy", page("Policy", "Deploy Monday to Thursday.", governance="hold"))
    with pytest.raises(Held):  # the new version holds it again
        memory.delete_page("policy")
    log = (memory.root / "mind/log.md").read_text()
    assert "hold | Policy" in log and "release | Policy\n\nThe owner agreed to revise it." in log
    memory.write_page("open", page("Open", "Anyone may edit."))
    with pytest.raises(InvalidInput, match="not held"):
        memory.release_page("open", "nothing to release")


def test_a_release_is_a_view_row_and_views_made_before_it_fold_again(workspace):
    """held_since reads page_releases (folded with the release); views made without that table start over,
    so a release folded before is not forgotten."""
    import sqlite3

    from projections.memory import Memory

    with Memory.open(workspace) as memory:
        memory.write_page("policy", page("Policy", "Never deploy on Fridays.", governance="hold"))
        release = memory.release_page("policy", "The owner agreed to revise it.")
        assert memory.views.released_after("policy", release.seq - 1)
        assert not memory.views.released_after("policy", release.seq)
        assert not memory.views.released_after("other", 0)
    views = sqlite3.connect(workspace / ".mem" / "views.db", isolation_level=None)
    views.execute("DROP TABLE page_releases")
    views.close()
    with Memory.open(workspace) as memory:
        memory.write_page("policy", page("Policy", "Deploy Monday to Thursday."))  # still released
        assert "Monday" in (workspace / "mind/policy.md").read_text()


def test_refusals_through_the_cli(workspace, tmp_path):
    held = tmp_path / "held.md"
    held.write_bytes(page("Policy", "Frozen.", governance="hold"))
    run_mem("-w", workspace, "page", "write", "policy", "--file", held, check=True)
    before = log_rows(workspace)
    bad = tmp_path / "bad.md"
    for fields, message in (({"stale_after": "next week"}, b"stale_after"),
                            ({"status": "superseded-by: nowhere"}, b"no page 'nowhere'")):
        bad.write_bytes(page("P", "x", **fields))
        result = run_mem("-w", workspace, "page", "write", "p", "--file", bad)
        assert result.returncode == 1 and result.stderr.startswith(b"error: ") and message in result.stderr
    result = run_mem("-w", workspace, "page", "delete", "policy")
    assert result.returncode == 1 and b"is held" in result.stderr and b"Traceback" not in result.stderr
    result = run_mem("-w", workspace, "page", "release", "nothing", "--note", "x")
    assert result.returncode == 1 and result.stderr.startswith(b"error: ")
    assert log_rows(workspace) == before
    out = run_mem("-w", workspace, "page", "release", "policy", "--note", "Revising.", check=True).stdout
    assert out.startswith(b"release mind/policy.md")
    run_mem("-w", workspace, "page", "delete", "policy", check=True)


@given(st.one_of(st.none(), st.text(max_size=20), st.just("\tdeprecated "),
                 st.builds(lambda w, sep, rest: w + sep + rest,
                           st.sampled_from(["deprecated", "Archived", "superseded", "SUPERSEDED-by", "draft", "current"]),
                           st.sampled_from(["", ":", " ", "-", ": ", "x"]), st.text(max_size=8))))
@example("deprecated\x1f0")  # a unit separator is whitespace to Python, not to SQL's LIKE 'deprecated %'
def test_the_sql_twin_of_withheld_agrees_with_it(status):
    import sqlite3

    from projections import trust

    db = sqlite3.connect(":memory:")
    stored = trust.stored_status(status)
    shown = db.execute(f"SELECT {trust.WITHHELD_SQL} FROM (SELECT ? AS status)", (stored,)).fetchone()[0]
    assert bool(shown) == (trust.withheld(status) is None)


def test_a_hand_edit_of_a_held_page_is_not_adopted(memory):
    from projections.adopt import adopt

    memory.write_page("policy", page("Policy", "Frozen.", governance="hold"))
    (memory.root / "mind/policy.md").write_bytes(page("Policy", "Thawed by hand.", governance="hold"))
    before = log_rows(memory.root)
    report = adopt(memory)
    assert "is held" in report.refused["mind/policy.md"] and report.adopted == []
    assert log_rows(memory.root) == before


@pytest.mark.parametrize("compact", ["20200101", "2020-W01-1", "2020-001"])
def test_a_stale_after_the_readers_cannot_read_is_refused_on_write(workspace, tmp_path, compact):
    """Regression: the write check took what `date.fromisoformat` takes (ISO basic and week dates too), the
    readers only YYYY-MM-DD: `stale_after: 20200101` was written and its page never judged stale."""
    bad = tmp_path / "bad.md"
    bad.write_bytes(f"---\ntype: note\nstale_after: {compact}\n---\n# Compact\n\nThe narwhal protocol.\n".encode())
    before = log_rows(workspace)
    result = run_mem("-w", workspace, "page", "write", "compact", "--file", bad)
    assert (result.returncode, result.stderr.decode()) == (
        1, f"error: frontmatter `stale_after` must be a date like 2026-12-31, not {int(compact) if compact.isdigit() else compact!r}\n")
    assert log_rows(workspace) == before


def test_a_page_already_logged_with_a_compact_stale_after_reads_as_having_none(memory):
    """A log written before the check agreed with the readers may hold `stale_after: 20200101`: it is read as
    unreadable (trust.stale_day), never stale, everywhere alike, and nothing fails on it."""
    event = memory.writer.page_write("compact", page("Compact", "The narwhal protocol.", stale_after="20200101"))
    memory.append_all([event], checked=True)
    [hit] = search.search(memory.views, "narwhal", day=TODAY)
    assert hit.flags == []
    assert [p["slug"] for p in audit.believed(memory.views, event.seq, day=TODAY).pages] == ["compact"]
