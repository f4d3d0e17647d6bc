"""A file's history and diffs (projections.history), in-process: the seqs at which its text changed,
following a page through a rename, for the wiki's files and for adf_files alike."""

import json

from projections.history import diff, history

from conftest import PAGE


def seqs(memory, path):
    return [(v.seq, v.kind, v.deleted) for v in history(memory, path)]


def test_a_page_history_follows_it_through_a_rename(memory):
    memory.write_page("deploy", PAGE)
    memory.always_add("Ack before prod.")  # not a change of the page
    memory.write_page("deploy", PAGE.replace(b"Staging first.", b"Staging first, then prod."))
    memory.rename_page("deploy", "release")
    memory.write_page("release", PAGE.replace(b"Staging first.", b"Prod on Tuesdays."))
    assert seqs(memory, "mind/release.md") == [(1, "page.ingest", False), (3, "page.update", False),
                                               (4, "page.rename", False), (5, "page.update", False)]
    assert seqs(memory, "mind/deploy.md") == [(1, "page.ingest", False), (3, "page.update", False),
                                              (4, "page.rename", True)]
    assert "-Staging first.\n+Staging first, then prod.\n" in diff(memory, "mind/deploy.md", 1, 3)
    # regression (nc13a): across the rename the whole page read as added
    across = diff(memory, "mind/release.md", 3, 5)
    assert across.startswith("--- mind/deploy.md@3\n+++ mind/release.md@5\n"), across
    assert "-Staging first, then prod.\n+Prod on Tuesdays.\n" in across and "+---" not in across
    # regression (nc19b): a rename and nothing else printed nothing at all
    assert diff(memory, "mind/release.md", 3, 4) == "rename from mind/deploy.md@3\nrename to mind/release.md@4\n"


def test_mind_md_and_a_plain_file_have_histories_too(memory):
    memory.write_page("deploy", PAGE)
    memory.always_add("Ack before prod.")
    memory.file_write("notes/a.txt", b"one\n")
    memory.file_write("notes/a.txt", b"one\n")  # the same bytes again: not a version
    memory.file_write("notes/a.txt", b"two\n")
    memory.file_delete("notes/a.txt")
    assert [v.seq for v in history(memory, "mind.md")] == [1, 2]
    assert seqs(memory, "notes/a.txt") == [(3, "file.write", False), (5, "file.write", False),
                                           (6, "file.delete", True)]
    assert diff(memory, "notes/a.txt", 3, 5).endswith("-one\n+two\n")


def test_mem_history_names_a_renames_other_path(memory):
    """Regression: `mem history deploy` showed the rename to release as `mind/deploy.md  (deleted)`."""
    from conftest import run_mem

    memory.write_page("deploy", PAGE)
    memory.rename_page("deploy", "release")
    old = run_mem("-w", memory.root, "history", "deploy", check=True).stdout.decode().splitlines()
    new = run_mem("-w", memory.root, "history", "release", check=True).stdout.decode().splitlines()
    assert old[-1].endswith("page.rename    mind/deploy.md  (renamed to mind/release.md)"), old
    assert new[-1].endswith("page.rename    mind/release.md  (renamed from mind/deploy.md)"), new
    listed = json.loads(run_mem("-w", memory.root, "history", "deploy", "--json", check=True).stdout)
    assert [(v["path"], v["deleted"], v.get("change")) for v in listed] == [  # a rename, not a delete (nc29a)
        ("mind/deploy.md", False, None), ("mind/deploy.md", True, "renamed to mind/release.md")]
    memory.delete_page("release")
    assert run_mem("-w", memory.root, "history", "release", check=True).stdout.decode().endswith(
        "mind/release.md  (deleted)\n")


def test_a_rename_reads_as_one_only_in_the_history_of_the_pages_two_paths(memory):
    """Regression: `mem history mind.md` and `mem history mind/log.md` said `(renamed from mind/deploy.md)` at the
    rename, which changed them but renamed neither."""
    from conftest import run_mem

    memory.write_page("deploy", PAGE)
    memory.rename_page("deploy", "release")
    for path in ("mind.md", "mind/log.md"):
        lines = run_mem("-w", memory.root, "history", path, check=True).stdout.decode().splitlines()
        assert lines[-1].endswith(f"page.rename    {path}"), lines


def test_a_file_as_the_workspace_began_has_an_empty_history_not_none(tmp_path):
    """Regression: in a new workspace `mem show mind.md` showed the index and `mem history mind.md` said it never
    existed; the MCP history tool too."""
    from conftest import run_mem

    run_mem("init", "-w", tmp_path / "ws", check=True)
    for path in ("mind.md", "mind/log.md"):
        said = run_mem("-w", tmp_path / "ws", "history", path, check=True).stdout.decode()
        assert said == f"{path} is as the workspace began: no event has changed it\n"
        assert run_mem("-w", tmp_path / "ws", "history", path, "--json", check=True).stdout == b"[]\n"
    refused = run_mem("-w", tmp_path / "ws", "history", "mind/nosuch.md", "--json")
    assert refused.returncode == 1 and refused.stderr == b"error: mind/nosuch.md never existed\n"


def test_a_redacted_rename_is_still_followed_as_the_folds_follow_it(memory):
    """Regression: the history read a redacted event's body as written (no `old`/`new`): a page renamed by an
    event later redacted lost the versions it had under its older name, though the views still rename it."""
    from projections.redact import redact

    memory.write_page("deploy", PAGE)
    rename = memory.rename_page("deploy", "release")
    redact(memory, [rename], "wrong note")
    assert seqs(memory, "mind/release.md") == [(1, "page.ingest", False), (2, "redacted", False)]


def test_mem_history_shows_each_versions_note_as_the_web_history_does(workspace, tmp_path):
    """Regression (nc23b): the note a version was written with (`mem page write --note`, a resolve's) showed in the
    web history only: `mem history` and its --json had none, so why a page changed was in `mem log --json` alone."""
    import json

    from conftest import run_mem

    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", page, check=True)
    page.write_bytes(PAGE + b"Then the canary.\n")
    run_mem("-w", workspace, "page", "write", "deploy", "--file", page, "--note", "canary after the outage", check=True)
    lines = run_mem("-w", workspace, "history", "deploy", check=True).stdout.decode().splitlines()
    assert not lines[0].endswith("—") and " — " not in lines[0]
    assert lines[1].endswith("page.update    mind/deploy.md — canary after the outage"), lines
    versions = json.loads(run_mem("-w", workspace, "history", "deploy", "--json", check=True).stdout)
    assert ["note" in v for v in versions] == [False, True] and versions[1]["note"] == "canary after the outage"


def test_a_page_renamed_away_and_back_keeps_the_versions_it_had_under_the_other_name(workspace, tmp_path):
    """Regression (nc29a): `mem history alpha` after alpha -> beta, an update of beta, beta -> alpha left out the
    update made under beta (only a first version renamed in was followed, as `git log --follow` follows them all);
    so for a page of a pages layer, local or shared."""
    from conftest import run_mem

    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    w = ("-w", workspace)
    run_mem(*w, "layer", "add", "nts", "nts/", "--format", "pages", check=True)
    for layer in ((), ("--layer", "nts")):
        run_mem(*w, "page", "write", "alpha", "--file", page, *layer, check=True)
        run_mem(*w, "page", "rename", "alpha", "beta", *layer, check=True)
        page.write_bytes(PAGE + b"Under beta.\n")
        run_mem(*w, "page", "write", "beta", "--file", page, "--note", "made as beta", *layer, check=True)
        run_mem(*w, "page", "rename", "beta", "alpha", *layer, check=True)
        page.write_bytes(PAGE)
    listed = {path: [(v["path"], v.get("change")) for v in json.loads(run_mem(*w, "history", path, "--json",
                                                                             check=True).stdout)]
              for path in ("mind/alpha.md", "nts/alpha.md", "nts/beta.md")}
    assert listed == {
        "mind/alpha.md": [("mind/alpha.md", None), ("mind/alpha.md", "renamed to mind/beta.md"), ("mind/beta.md", None),
                          ("mind/alpha.md", "renamed from mind/beta.md")],
        "nts/alpha.md": [("nts/alpha.md", None), ("nts/alpha.md", "renamed to nts/beta.md"),
                         ("nts/beta.md", "renamed from nts/alpha.md"), ("nts/beta.md", None),
                         ("nts/alpha.md", "renamed from nts/beta.md")],
        "nts/beta.md": [("nts/alpha.md", None), ("nts/beta.md", "renamed from nts/alpha.md"), ("nts/beta.md", None),
                        ("nts/beta.md", "renamed to nts/alpha.md")]}, listed
