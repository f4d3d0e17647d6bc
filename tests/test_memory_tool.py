"""Claude's memory-tool commands over /memories, as a library (no MCP): results, refusals, one event each."""

import pytest

from conftest import PAGE, log_rows
from eventstore.errors import MemError
from eventstore.layers import Contract, ContractLayer
from projections.memory_tool import MemoryTool, format_size


@pytest.fixture
def tool(memory):
    return MemoryTool(memory)


def refused(tool, workspace, command, *args) -> str:
    before = log_rows(workspace)
    with pytest.raises(MemError) as caught:
        getattr(tool, command)(*args)
    assert log_rows(workspace) == before
    return str(caught.value)


def test_a_page_session_is_one_event_per_call(tool, memory, workspace):
    assert tool.create("/memories/mind/deploy.md", PAGE.decode()) == \
        "File created successfully at: /memories/mind/deploy.md"
    assert memory.log.head() == 1 and memory.log.get_by_seq(1).kind == "page.ingest"
    assert tool.view("/memories/mind/deploy.md") == (
        "Here's the content of /memories/mind/deploy.md with line numbers:\n"
        "     1\t---\n     2\ttype: procedure\n     3\tdescription: staging first\n     4\t---\n"
        "     5\t# Deploy procedure\n     6\t\n     7\tStaging first.\n     8\t")
    assert tool.view("/memories/mind/deploy.md", [5, 7]).splitlines()[1:] == [
        "     5\t# Deploy procedure", "     6\t", "     7\tStaging first."]
    result = tool.str_replace("/memories/mind/deploy.md", "Staging first.", "Staging first, always.")
    assert result.splitlines()[0].startswith("The memory file has been edited.")
    assert "     7\tStaging first, always." in result
    assert tool.insert("/memories/mind/deploy.md", 7, "Prod needs an ack.") == \
        "The file /memories/mind/deploy.md has been edited."
    assert (workspace / "mind/deploy.md").read_text().endswith("Staging first, always.\nProd needs an ack.\n")
    assert tool.rename("/memories/mind/deploy.md", "/memories/mind/deploy-procedure.md") == \
        "Successfully renamed /memories/mind/deploy.md to /memories/mind/deploy-procedure.md"
    assert tool.delete("/memories/mind/deploy-procedure.md") == \
        "Successfully deleted /memories/mind/deploy-procedure.md"
    assert [e.kind for e in memory.log.read()] == ["page.ingest", "page.update", "page.update", "page.rename",
                                                   "page.delete"]
    assert all(e.agent == "alice" for e in memory.log.read())
    assert not (workspace / "mind/deploy-procedure.md").exists()


def test_a_replacement_that_changes_nothing_says_so(tool, memory, workspace):
    """Regression (nc17b): it answered "The memory file has been edited" though nothing was recorded."""
    tool.create("/memories/notes/today.md", "one\ntwo\n")
    before = log_rows(workspace)
    assert tool.str_replace("/memories/notes/today.md", "two", "two") == (
        "No change was made: old_str and new_str are the same, so /memories/notes/today.md is as it was and nothing "
        "was recorded.")
    assert log_rows(workspace) == before


def test_files_outside_the_wiki(tool, memory, workspace):
    tool.create("/memories/notes/today.md", "one\ntwo\n")
    assert memory.log.get_by_seq(1).kind == "file.write"
    assert tool.view("/memories/notes/today.md") == \
        "Here's the content of /memories/notes/today.md with line numbers:\n     1\tone\n     2\ttwo\n     3\t"
    tool.str_replace("/memories/notes/today.md", "two", "three")
    tool.rename("/memories/notes/today.md", "/memories/notes/done.md")
    assert [e.kind for e in memory.log.read()] == ["file.write", "file.write", "file.write", "file.delete"]
    assert memory.views.file("notes/done.md")[1] == b"one\nthree\n"
    assert memory.views.file("notes/today.md") is None
    assert tool.view("/memories").splitlines() == [
        "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items:",
        "45B\t/memories", "6B\t/memories/mind/", "6B\t/memories/mind/log.md", "29B\t/memories/mind.md",
        "10B\t/memories/notes/", "10B\t/memories/notes/done.md"]
    assert tool.view("/memories/notes").splitlines()[1:] == ["10B\t/memories/notes", "10B\t/memories/notes/done.md"]
    tool.delete("/memories/notes/done.md")
    assert memory.log.get_by_seq(5).kind == "file.delete"


def test_always_lines_are_edited_through_mind_md(tool, memory, workspace):
    tool.insert("/memories/mind.md", 4, "- Cite a seq for every claim.")
    tool.str_replace("/memories/mind.md", "claim.\n", "claim.\n- No deploys on Friday.\n")
    assert memory.always() == ["Cite a seq for every claim.", "No deploys on Friday."]
    tool.str_replace("/memories/mind.md", "- Cite a seq for every claim.\n", "")
    assert memory.always() == ["No deploys on Friday."]
    assert [e.kind for e in memory.log.read()] == ["always.add", "always.add", "always.remove"]
    tool.create("/memories/mind/deploy.md", PAGE.decode())
    assert "catalog is generated" in refused(tool, workspace, "str_replace", "/memories/mind.md",
                                              "staging first", "anything")
    assert "one event per call" in refused(tool, workspace, "str_replace", "/memories/mind.md",
                                            "No deploys on Friday.", "No deploys on Fridays.")
    # a line inserted above another is recorded there, as `mem always add --at` does; it was refused (nc21b)
    tool.str_replace("/memories/mind.md", "- No deploys on Friday.\n", "- Staging first.\n- No deploys on Friday.\n")
    assert memory.always() == ["Staging first.", "No deploys on Friday."]
    assert "- Staging first.\n- No deploys on Friday.\n" in (workspace / "mind.md").read_text()
    # an empty line inserted was answered "edited" and recorded nothing, where `mem always add ""` refuses (nc28a)
    for text in ("", "\n", "  "):
        assert refused(tool, workspace, "insert", "/memories/mind.md", 4, text) == "an Always line cannot be empty"
    tool.create("/memories/notes/a.md", "one\n")
    before = memory.log.head()
    tool.insert("/memories/notes/a.md", 1, "")  # a file's empty line is a change
    assert memory.log.head() == before + 1 and memory.log.get_by_seq(before + 1).kind == "file.write"


def test_memory_tool_refusals_leave_the_log_untouched(tool, memory, workspace):
    tool.create("/memories/mind/deploy.md", PAGE.decode())
    tool.create("/memories/notes/a.md", "same\nsame\n")
    tool.create("/memories/notes/b.md", "aa a\nb\na\n")
    assert refused(tool, workspace, "view", "/etc/passwd") == "Path must start with /memories, got: /etc/passwd"
    assert refused(tool, workspace, "view", "/memories/nothing.md") == \
        "The path /memories/nothing.md does not exist. Please provide a valid path."
    assert refused(tool, workspace, "create", "/memories/mind/deploy.md", "x") == \
        "File /memories/mind/deploy.md already exists"
    assert refused(tool, workspace, "str_replace", "/memories/notes/a.md", "other", "x") == \
        "No replacement was performed, old_str `other` did not appear verbatim in /memories/notes/a.md."
    assert refused(tool, workspace, "str_replace", "/memories/notes/a.md", "same", "x") == \
        ("No replacement was performed. Multiple occurrences of old_str `same` in lines: 1, 2. "
         "Please ensure it is unique")
    assert refused(tool, workspace, "str_replace", "/memories/notes/b.md", "a", "x") == \
        "No replacement was performed. Multiple occurrences of old_str `a` in lines: 1, 3. Please ensure it is unique"
    assert refused(tool, workspace, "insert", "/memories/notes/a.md", 3, "x") == \
        "Invalid `insert_line` parameter: 3. It should be within the range [0, 2]."
    assert refused(tool, workspace, "rename", "/memories/notes/a.md", "/memories/mind/deploy.md") == \
        "The destination /memories/mind/deploy.md already exists"
    assert refused(tool, workspace, "delete", "/memories") == "Cannot delete the /memories directory itself"
    assert refused(tool, workspace, "delete", "/memories/mind.md") == \
        "/memories/mind.md is part of the wiki and cannot be deleted"
    assert "derived from the log" in refused(tool, workspace, "insert", "/memories/mind/log.md", 0, "x")
    assert "a page is renamed to another page" in refused(tool, workspace, "rename", "/memories/mind/deploy.md",
                                                           "/memories/notes/deploy.md")
    assert refused(tool, workspace, "create", "/memories/../etc/passwd", "x") == \
        "file path '../etc/passwd' contains an empty, '.' or '..' segment"
    assert refused(tool, workspace, "create", "/memories/mind/../../x.md", "x").startswith(
        "slug '../../x.md' contains a path separator or '..'")
    assert refused(tool, workspace, "create", "/memories/mind/log2.txt", PAGE.decode()).startswith(
        "/memories/mind/log2.txt is not a page path")
    assert refused(tool, workspace, "create", "/memories/mind/new.md", "no frontmatter") == \
        "the page has no frontmatter: start it with '---', a line `type: ...`, and '---'"
    assert refused(tool, workspace, "str_replace", "/memories/mind/deploy.md", "type: procedure\n", "") == \
        "frontmatter has no `type`; it is required (e.g. `type: procedure`)"


def test_shared_layers_go_through_the_shared_writers(tool, memory, workspace):
    memory.set_contract(Contract(layers={
        "insights": ContractLayer(path="memory/insights.md", format="entries", producers=["*"], consumers=["*"]),
        "drafts": ContractLayer(path="content/drafts/", format="pages", producers=["alice"], consumers=["*"]),
        "decisions": ContractLayer(path="memory/decisions.md", format="entries", producers=["bob"],
                                   consumers=["*"])}))
    tool.create("/memories/memory/insights.md", "[DECISION] 2026-11-01: The hub runs on SQLite\n")
    tool.insert("/memories/memory/insights.md", 3, "[FACT] 2026-11-02: Tests run in three minutes")
    assert [e.body.content for e in memory.log.read(layers=["insights"])] == [
        "The hub runs on SQLite", "Tests run in three minutes"]
    tool.create("/memories/content/drafts/launch.md", PAGE.decode())
    tool.str_replace("/memories/content/drafts/launch.md", "Staging first.", "Tuesday.")
    assert [(e.layer, e.kind) for e in memory.log.read(layers=["drafts"])] == [
        ("drafts", "page.ingest"), ("drafts", "page.update")]
    assert refused(tool, workspace, "create", "/memories/memory/decisions.md", "[DECISION] mine\n") == \
        "agent 'alice' does not produce layer 'decisions' under the contract"
    assert "one entry per call" in refused(tool, workspace, "str_replace", "/memories/memory/insights.md",
                                           "SQLite", "PostgreSQL")
    assert tool.rename("/memories/content/drafts/launch.md", "/memories/content/drafts/go-live.md") == \
        "Successfully renamed /memories/content/drafts/launch.md to /memories/content/drafts/go-live.md"
    assert [(e.kind, e.body.slug) for e in memory.log.read(layers=["drafts"])][-2:] == [
        ("page.delete", "launch"), ("page.ingest", "go-live")]
    assert "a page of a pages layer to another page of that layer" in refused(
        tool, workspace, "rename", "/memories/content/drafts/go-live.md", "/memories/notes/go-live.md")
    tool.delete("/memories/content/drafts/go-live.md")
    assert memory.log.get_by_seq(memory.log.head()).kind == "page.delete"
    tool.create("/memories/content/drafts/kept.md", PAGE.decode())
    memory.set_contract(Contract(layers={"drafts": ContractLayer(path="content/drafts/", format="pages",
                                                                 producers=["bob"], consumers=["*"])}))
    # regression (nc23b): "File ... already exists" sent an agent that may not write the layer on to str_replace
    assert refused(tool, workspace, "create", "/memories/content/drafts/kept.md", PAGE.decode()) == \
        "agent 'alice' does not produce layer 'drafts' under the contract"


def test_format_size_matches_the_reference():
    assert [format_size(n) for n in (0, 6, 1024, 1536, 4096, 3 * 1024 * 1024)] == ["0B", "6B", "1K", "1.5K", "4K",
                                                                                   "3M"]
