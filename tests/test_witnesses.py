"""The views' checkpoint and anchor are the only witnesses that a log lost events at its end, was rewritten, or is not
theirs (projections.integrity). Regressions (newcomer nc10c): `mem replay` rebuilt from a log cut short, removed the
pages it no longer held and made `mem verify` say ok; any read folded a log onto another workspace's views, showed
that agent's memory and made verify say ok; a deleted log.db was re-created empty and the pages still served."""

import shutil
import sqlite3

import pytest

from conftest import PAGE, log_rows, run_mem


def written(root, agent="a"):
    run_mem("init", "-w", root, "--agent", agent, check=True)
    run_mem("-w", root, "page", "write", "deploy", "--file", "-", input=PAGE, check=True)
    run_mem("-w", root, "always", "add", f"{agent} rule", check=True)
    run_mem("-w", root, "page", "write", "other", "--file", "-", input=PAGE, check=True)
    return root


def refused(result, *starts):
    err = result.stderr.decode()
    assert result.returncode == 1 and len(err.splitlines()) == 1 and err.startswith(starts), err
    return err


def test_a_log_cut_short_is_never_rebuilt_over_unasked(tmp_path):
    root = written(tmp_path / "ws")
    db = sqlite3.connect(root / ".mem" / "log.db")
    db.execute("DELETE FROM events WHERE seq >= 2")
    db.commit()
    db.close()
    pages = sorted(p.name for p in (root / "mind").iterdir())
    cut = "error: the views are at seq 3, past the log head 1: the log is damaged or was cut short; run `mem verify`"
    for command in (("page", "list"), ("show", "mind/deploy.md"), ("search", "staging"), ("always", "list")):
        refused(run_mem("-w", root, *command), cut)
    err = refused(run_mem("-w", root, "replay"), cut)
    assert "`mem replay --log-as-is` rebuilds the views from the log as it is" in err
    assert sorted(p.name for p in (root / "mind").iterdir()) == pages  # nothing removed
    assert run_mem("-w", root, "verify").returncode == 1  # the evidence is still there
    run_mem("-w", root, "replay", "--log-as-is", check=True)
    assert run_mem("-w", root, "verify", check=True).stdout.startswith(b"ok: 1 event")


def test_a_deleted_log_is_not_taken_for_an_empty_one(tmp_path):
    root = written(tmp_path / "ws")
    (root / ".mem" / "log.db").unlink()
    refused(run_mem("-w", root, "page", "list"), "error: the views are at seq 3, past the log head 0")
    refused(run_mem("-w", root, "replay"), "error: the views are at seq 3, past the log head 0")
    assert (root / "mind" / "deploy.md").exists()


def test_another_workspaces_views_are_never_folded_onto(tmp_path):
    root, other = written(tmp_path / "ws"), tmp_path / "zed"
    run_mem("init", "-w", other, "--agent", "zed", check=True)
    run_mem("-w", other, "always", "add", "zed rule", check=True)
    for suffix in ("", "-wal", "-shm"):
        (root / ".mem" / f"views.db{suffix}").unlink(missing_ok=True)
    shutil.copy(other / ".mem" / "views.db", root / ".mem" / "views.db")
    rows = log_rows(root)
    foreign = "error: the views were built up to seq 1 on a log whose chain there is "
    for command in (("always", "list"), ("page", "list"), ("replay", "--check"), ("replay",)):
        refused(run_mem("-w", root, *command), foreign)
    refused(run_mem("-w", root, "always", "add", "more"), foreign)
    assert log_rows(root) == rows and run_mem("-w", root, "verify").returncode == 1
    run_mem("-w", root, "replay", "--log-as-is", check=True)
    assert run_mem("-w", root, "always", "list", check=True).stdout.decode().split("\n")[0].endswith("a rule")
    run_mem("-w", root, "verify", check=True)


def test_views_whose_checkpoint_was_moved_back_are_refused_until_a_replay(tmp_path):
    """Regression (nc10c M3): a checkpoint edited back made the next read fold the same events again and fail on a
    raw UNIQUE constraint error."""
    root = written(tmp_path / "ws")
    views = sqlite3.connect(root / ".mem" / "views.db")
    views.execute("UPDATE meta SET value = '1' WHERE key = 'checkpoint'")
    views.commit()
    views.close()
    rows = log_rows(root)
    edited = "error: the views say they are at seq 1 but folded up to seq 3: they were changed outside mem"
    for command in (("page", "list"), ("always", "add", "more"), ("show", "mind/deploy.md")):
        assert "`mem replay` rebuilds them" in refused(run_mem("-w", root, *command), edited)
    assert log_rows(root) == rows
    run_mem("-w", root, "replay", check=True)
    assert b"other" in run_mem("-w", root, "page", "list", check=True).stdout
    run_mem("-w", root, "verify", check=True)


def test_another_workspaces_views_at_the_same_head_are_refused_before_anything_is_appended(tmp_path):
    """Regression (newcomer nc11, High): views copied from a workspace whose log ends at the same seq were read as
    this workspace's (its mind.md shown), and a write appended its event before it was refused."""
    root, other = written(tmp_path / "ws"), written(tmp_path / "zed", agent="zed")
    for suffix in ("", "-wal", "-shm"):
        (root / ".mem" / f"views.db{suffix}").unlink(missing_ok=True)
    shutil.copy(other / ".mem" / "views.db", root / ".mem" / "views.db")
    rows = log_rows(root)
    foreign = "error: the views were built up to seq 3 on a log whose chain there is "
    for command in (("always", "list"), ("show", "mind.md"), ("loop", "append", "--role", "user", "--text", "hi"),
                    ("always", "add", "more")):
        refused(run_mem("-w", root, *command), foreign)
    assert log_rows(root) == rows


def edit_meta(root, *statements):
    views = sqlite3.connect(root / ".mem" / "views.db")
    for statement in statements:
        views.execute(statement)
    views.commit()
    views.close()


@pytest.mark.parametrize("statements, says", [
    (["UPDATE meta SET value = '5 ' || substr(value, 3) WHERE key = 'anchor'"],
     "error: the views say they are at seq 3 but folded up to seq 5: they were changed outside mem"),
    (["UPDATE meta SET value = 'abc' WHERE key = 'checkpoint'"],
     "error: the views database {views} is damaged (their checkpoint is 'abc', not a seq): run `mem replay`"),
    (["UPDATE meta SET value = '3' WHERE key = 'anchor'"],
     "error: the views database {views} is damaged (their anchor is '3', not a seq and a chain): run `mem replay`"),
    (["DELETE FROM meta WHERE key = 'anchor'", "UPDATE meta SET value = '1' WHERE key = 'checkpoint'"],
     "error: the views database {views} is damaged (they hold events past their checkpoint, seq 1: "),
])
def test_views_meta_edited_outside_mem_is_one_line_and_a_replay_rebuilds_them(tmp_path, statements, says):
    """Regression (newcomer nc11): an anchor moved past the head was not seen, a checkpoint that is no number and an
    anchor without its chain were tracebacks (`mem replay` too), and a checkpoint moved back without its anchor a raw
    UNIQUE constraint error."""
    root = written(tmp_path / "ws")
    edit_meta(root, *statements)
    rows = log_rows(root)
    says = says.format(views=root / ".mem" / "views.db")
    for command in (("page", "list"), ("always", "add", "more")):
        refused(run_mem("-w", root, *command), says)
    assert log_rows(root) == rows
    run_mem("-w", root, "replay", check=True)
    assert b"a rule" in run_mem("-w", root, "always", "list", check=True).stdout
    run_mem("-w", root, "verify", check=True)


def test_status_names_edited_views_instead_of_counting_them_behind(tmp_path):
    """Regression (newcomer nc11 L5): views whose checkpoint was moved back read as `views at 1 (2 behind the log)`,
    exit 0, as though the next command would catch up; every other command refuses them."""
    root = written(tmp_path / "ws")
    edit_meta(root, "UPDATE meta SET value = '1' WHERE key = 'checkpoint'")
    refused(run_mem("-w", root, "status"), "error: the views say they are at seq 1 but folded up to seq 3")
    run_mem("-w", root, "replay", check=True)
    assert run_mem("-w", root, "status", check=True).returncode == 0
