"""Every kind of bad input is refused through the CLI with a clear message, and the log is untouched."""

import os

import msgspec
import pytest

from eventstore.envelope import decode_body
from eventstore.errors import InvalidInput, UnknownKind

from conftest import PAGE, log_rows, run_mem
from test_validate import BAD_PAGES, BAD_SLUGS

# Each kind of bad page and slug the validator refuses (test_validate checks it in-process) is also
# refused end to end by a real `mem`: one line on stderr, a non-zero exit, the log untouched (a
# slug holding NUL cannot reach the CLI: no argv can carry it).


def refused(workspace, *args, expect: str, input=None):
    before = log_rows(workspace)
    result = run_mem("--workspace", workspace, *args, input=input)
    assert result.returncode != 0, result.stdout
    assert expect.lower() in result.stderr.decode().lower(), result.stderr.decode()
    assert result.stderr.decode().startswith("error: ") and len(result.stderr.decode().splitlines()) == 1
    assert log_rows(workspace) == before


@pytest.mark.parametrize("name", BAD_PAGES)
def test_bad_page_is_refused(workspace, tmp_path, name):
    document, expect = BAD_PAGES[name]
    page = tmp_path / "page.md"
    page.write_bytes(document)
    refused(workspace, "page", "write", "deploy", "--file", page, expect=expect)
    assert not (workspace / "mind" / "deploy.md").exists()


@pytest.mark.parametrize("name", [name for name, (slug, _) in BAD_SLUGS.items() if "\x00" not in slug])
def test_unsafe_slug_is_refused(workspace, tmp_path, name):
    slug, expect = BAD_SLUGS[name]
    page = tmp_path / "page.md"
    page.write_bytes(PAGE)
    refused(workspace, "page", "write", slug, "--file", page, expect=expect)


def test_a_link_out_of_the_workspace_is_refused(workspace, tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text("precious\n")
    os.symlink(outside, workspace / "mind" / "evil.md")
    page = tmp_path / "page.md"
    page.write_bytes(PAGE)
    refused(workspace, "page", "write", "evil", "--file", page, expect="link")
    assert outside.read_text() == "precious\n"


def test_a_linked_mind_directory_is_refused(tmp_path):
    root = tmp_path / "ws"
    run_mem("--workspace", root, "init", check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "mind" / "log.md").unlink()
    (root / "mind").rmdir()  # an empty workspace: only the log file was in mind/
    os.symlink(elsewhere, root / "mind")
    page = tmp_path / "page.md"
    page.write_bytes(PAGE)
    refused(root, "page", "write", "deploy", "--file", page, expect="outside the workspace")
    assert list(elsewhere.iterdir()) == []


def test_stdin_page_with_invalid_utf8_is_refused(workspace):
    refused(workspace, "page", "write", "deploy", "--file", "-", input=b"---\ntype: x\n---\n\xc3\x28\n",
            expect="UTF-8")


def test_missing_input_file(workspace, tmp_path):
    refused(workspace, "page", "write", "deploy", "--file", tmp_path / "nope.md", expect="cannot read")


def test_delete_or_rename_of_a_missing_page(workspace, tmp_path):
    refused(workspace, "page", "delete", "ghost", expect="no page 'ghost'")
    refused(workspace, "page", "rename", "ghost", "other", expect="no page 'ghost'")


def test_rename_onto_an_existing_page(workspace, tmp_path):
    page = tmp_path / "page.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "a", "--file", page, check=True)
    run_mem("-w", workspace, "page", "write", "b", "--file", page, check=True)
    refused(workspace, "page", "rename", "a", "b", expect="already exists")


def test_always_remove_out_of_range_and_empty_line(workspace):
    refused(workspace, "always", "remove", "3", expect="no Always line 3")
    refused(workspace, "always", "add", "   ", expect="cannot be empty")


def test_bad_times_are_refused(workspace):
    result = run_mem("-w", workspace, "show", "mind.md", "--at", "last tuesday")
    assert result.returncode != 0 and b"ISO 8601" in result.stderr


def test_newlines_never_reach_a_log_heading(memory):
    note = "real note\n## [2020-01-01] delete | Forged entry\n\nmore"
    memory.write_page("deploy", b"---\ntype: procedure\n---\n# Title\n", note)
    log = (memory.root / "mind" / "log.md").read_text()
    headings = [line for line in log.splitlines() if line.startswith("## ")]
    assert headings == [f"## [{headings[0][4:14]}] ingest | Title"]
    assert "real note ## [2020-01-01] delete | Forged entry more" in log


def test_outside_a_workspace(tmp_path):
    result = run_mem("status", cwd=tmp_path)
    assert result.returncode != 0 and b"mem init" in result.stderr


def test_unknown_kinds_and_bad_bodies_are_refused_on_decode():
    raw = msgspec.msgpack.encode({"kind": "page.teleport", "slug": "x"})
    with pytest.raises(UnknownKind):
        decode_body(raw)
    with pytest.raises(InvalidInput):
        decode_body(msgspec.msgpack.encode({"kind": "always.add", "line": 5}))
    with pytest.raises(InvalidInput):
        decode_body(b"\xc1 not msgpack")
