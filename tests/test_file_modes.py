"""What mindlog makes on disk is readable by its user alone where it holds more than that user may show: a
workspace's `.mem/` (the log and the views), a hub's SQLite file (every layer) and its pages' mirror (every layer's
files). Regression: they followed the umask (0644, 0755), and another account on the host read the hub's private
layers straight from `hub.db.ui/` while the hub's pages showed each token only what the contract allows."""

import stat

from conftest import run_mem


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_workspace_keeps_its_log_and_views_to_its_user(tmp_path):
    run_mem("init", "-w", tmp_path / "ws", "--agent", "a", check=True)
    run_mem("-w", tmp_path / "ws", "always", "add", "staging first", check=True)
    assert mode(tmp_path / "ws" / ".mem") == 0o700


def test_a_new_sqlite_hub_and_its_pages_mirror_are_its_users_alone(tmp_path):
    from hubserver import mem_serve

    db = tmp_path / "hub.db"
    run_mem("hub", "init", "--db", db, check=True)
    assert mode(db) == 0o600
    with mem_serve(str(db)):
        pass
    assert mode(db) == 0o600 and all(mode(p) == 0o600 for p in tmp_path.glob("hub.db-*"))
    assert mode(tmp_path / "hub.db.ui") == 0o700
