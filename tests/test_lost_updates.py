"""Writes made from a version of a page that is no longer its current one: refused when the writer says which
version it read (`--if-version`), and never recorded against a version another process replaced meanwhile."""

from conftest import PAGE, log_rows, run_mem
from projections.memory import Memory
from projections.memory_tool import MemoryTool

NEWER = PAGE + b"Prod needs the owner's ack.\n"


def _written_by_a_process_stopped_before_its_views_followed(workspace, document: bytes) -> str:
    """A page version committed to the log by another process whose views had not followed it yet (it stopped
    in between; the next command catches up): the views this process reads are one version behind."""
    with Memory.open(workspace) as other:
        event = other.writer.page_write("deploy", document)
        other.log.append([event])
        return event.id


def test_a_write_from_a_version_since_replaced_is_refused_in_one_line_and_records_nothing(workspace):
    """Regression: two writes made from one read both succeeded; the second silently dropped the first's line."""
    path = workspace / "page.md"
    path.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", path, check=True)
    (workspace / "a.md").write_bytes(PAGE + b"- step from writer A\n")
    (workspace / "b.md").write_bytes(PAGE + b"- step from writer B\n")
    first = run_mem("-w", workspace, "page", "write", "deploy", "--file", workspace / "a.md", "--if-version", "1")
    assert first.returncode == 0 and b"(seq 2)" in first.stdout, first
    rows = log_rows(workspace)
    second = run_mem("-w", workspace, "page", "write", "deploy", "--file", workspace / "b.md", "--if-version", "1")
    said = second.stderr.decode()
    assert second.returncode == 1 and said.count("\n") == 1 and "Traceback" not in said, said
    assert "written since version 1" in said and "its current version is seq 2" in said, said
    assert log_rows(workspace) == rows
    with Memory.open(workspace) as memory:
        assert "writer A" in memory.page_text("deploy")
        head_id = memory.views.heads("deploy")[0]
    by_id = run_mem("-w", workspace, "page", "write", "deploy", "--file", workspace / "b.md", "--if-version", head_id)
    assert by_id.returncode == 0 and b"(seq 3)" in by_id.stdout, by_id


def test_an_if_version_that_names_no_version_of_the_page_says_so(workspace):
    """Regression: a seq past the head, a word, a negative number, an unknown id or another page's version were each
    said to be a version "written since", which sent the agent to redo a change from a version that never was."""
    path = workspace / "page.md"
    path.write_bytes(PAGE)
    for slug, again in (("deploy", ()), ("other", ()), ("deploy", ("--force",))):  # the same page again: --force
        run_mem("-w", workspace, "page", "write", slug, "--file", path, *again, check=True)
    rows = log_rows(workspace)
    for given, says in (("999999", "seq 999999 is past the log's head (3)"),
                        ("abc", "--if-version takes a version's seq or event id"), ("-1", "not '-1'"),
                        ("01a237d3-ed37-7874-a4b0-4702f254ffff", "that is no version of mind/deploy.md"),
                        ("2", "that is no version of mind/deploy.md")):
        result = run_mem("-w", workspace, "page", "write", "deploy", "--file", path, "--if-version", given)
        said = result.stderr.decode()
        assert result.returncode == 1 and said.count("\n") == 1 and says in said and "since" not in said, (given, said)
    stale = run_mem("-w", workspace, "page", "write", "deploy", "--file", path, "--if-version", "1")
    assert "written since version 1" in stale.stderr.decode()
    assert log_rows(workspace) == rows


def test_if_version_0_creates_a_page_only_if_it_has_no_current_version(workspace):
    """Regression (nc26b): there was no way to write a page only if no one had (two agents creating it at once),
    and a page that never existed was sent to `mem history`, which only says it never existed."""
    path = workspace / "page.md"
    path.write_bytes(PAGE)
    never = run_mem("-w", workspace, "page", "write", "deploy", "--file", path, "--if-version", "3")
    assert never.returncode == 1 and never.stderr.decode() == (
        "error: mind/deploy.md has no current version, not 3 (the version the write was made from): nothing was "
        "written; it never existed (--if-version 0 writes a page only if it has none)\n")
    run_mem("-w", workspace, "page", "write", "deploy", "--file", path, "--if-version", "0", check=True)
    rows = log_rows(workspace)
    second = run_mem("-w", workspace, "page", "write", "deploy", "--file", workspace / "page.md", "--if-version", "0")
    assert second.returncode == 1 and second.stderr.decode() == (
        "error: mind/deploy.md exists (its current version is seq 1), and --if-version 0 writes it only if it does "
        "not: nothing was written; `mem show deploy` has it\n")
    assert log_rows(workspace) == rows
    run_mem("-w", workspace, "page", "delete", "deploy", check=True)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", path, "--if-version", "0", check=True)


def test_a_write_without_a_version_is_the_last_writers(workspace):
    with Memory.open(workspace) as memory:
        memory.write_page("deploy", PAGE)
        memory.write_page("deploy", NEWER)
        memory.write_page("deploy", PAGE + b"- another\n")
        assert "owner's ack" not in memory.page_text("deploy")


def test_a_write_names_as_parent_the_version_current_at_its_append(workspace):
    """Regression: the parent was read from views another process's commit had not reached yet, naming a version
    already replaced (a fork nobody is told of)."""
    with Memory.open(workspace) as memory:
        memory.write_page("deploy", PAGE)
        newer = _written_by_a_process_stopped_before_its_views_followed(workspace, NEWER)
        event = memory.write_page("deploy", NEWER + b"- and a step\n")
        assert event.body.parents == [newer]


def test_a_memory_tool_edit_is_made_on_the_version_current_at_its_write(workspace):
    """Regression: str_replace read the page from views behind the log and wrote its edit over the newer version."""
    with Memory.open(workspace) as memory:
        memory.write_page("deploy", PAGE)
        _written_by_a_process_stopped_before_its_views_followed(workspace, NEWER)
        MemoryTool(memory).str_replace("/memories/mind/deploy.md", "Staging first.", "Staging first, always.")
        text = memory.page_text("deploy")
        assert "Staging first, always." in text and "owner's ack" in text, text


def test_a_write_of_what_the_page_holds_already_records_nothing(workspace):
    """Regression (nc13c): writing a page's current version again (a re-save, a `str_replace` of a text by itself)
    recorded an update that changed nothing, and a line in mind/log.md. Nothing is recorded now, unless --force; a
    file edited by hand is still refused, and one deleted by hand is written again."""
    path = workspace / "page.md"
    path.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", path, check=True)
    rows = log_rows(workspace)
    again = run_mem("-w", workspace, "page", "write", "deploy", "--file", path, "--note", "same", check=True)
    assert again.stdout.decode() == ("unchanged mind/deploy.md: it is version 1 already; nothing recorded (--force "
                                     "records it again)\n")
    with Memory.open(workspace) as memory:
        MemoryTool(memory).str_replace("/memories/mind/deploy.md", "Staging first.", "Staging first.")
    assert log_rows(workspace) == rows
    (workspace / "mind/deploy.md").write_bytes(PAGE + b"by hand\n")
    assert b"edited by hand" in run_mem("-w", workspace, "page", "write", "deploy", "--file", path).stderr
    (workspace / "mind/deploy.md").unlink()
    assert b"update mind/deploy.md (seq 2)" in run_mem("-w", workspace, "page", "write", "deploy", "--file", path,
                                                       check=True).stdout
    assert (workspace / "mind/deploy.md").read_bytes() == PAGE
    forced = run_mem("-w", workspace, "page", "write", "deploy", "--file", path, "--force", check=True)
    assert forced.stdout.decode() == "update mind/deploy.md (seq 3)\n"
