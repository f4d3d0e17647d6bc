"""A team agent moved by `mem export adf` / `mem import adf`: the hub's shared layers' files in the export are the
team's, left out by the import (a pull brings them back, where a redaction on the hub reaches them), and an export
never fails on two rows of one path (regression: they became the agent's own file.write events, which a redaction
never reached, held twice after the first pull, and every later export died on a UNIQUE constraint)."""

import json
import sqlite3

import pytest

from conftest import run_mem
from projections.memory import Memory
from sync.client import add_remote
from teamhub import Team, layer


@pytest.fixture
def team(tmp_path):
    team = Team(tmp_path, agents=("main", "writer"))
    yield team
    team.stop()


def file_writes(root) -> list[str]:
    with Memory.open(root) as memory:
        return [event.body.path for event in memory.log.read() if event.kind == "file.write"]


def test_an_imported_team_agent_pulls_the_shared_files_again_and_a_redaction_reaches_them(team):
    team.mem("main", "entry", "add", "insights", "[FACT] 2026-11-01: on-call phone SECRETPHONE-555-0199", check=True)
    team.mem("main", "sync", check=True)
    team.mem("writer", "sync", check=True)
    adf = team.root / "writer.adf"
    team.mem("writer", "export", "adf", adf, check=True)
    meta = dict(sqlite3.connect(adf).execute("SELECT key, value FROM adf_meta").fetchall())
    assert json.loads(meta["mindlog_shared_layers"])["insights"] == {"path": "memory/insights.md", "format": "entries"}

    moved = team.root / "writer2"
    run_mem("init", "-w", moved, "--agent", "writer", check=True)
    said = run_mem("import", "adf", adf, "-w", moved, check=True).stdout.decode()
    assert "left out 1 file of the hub's shared layers (memory/insights.md)" in said, said
    assert file_writes(moved) == []
    with Memory.open(moved) as memory:
        add_remote(memory, "origin", team.url, str(team.root / "writer.token"))
    run_mem("sync", "-w", moved, check=True)
    listed = run_mem("file", "list", "-w", moved, "--json", check=True).stdout.decode()
    assert [row["path"] for row in json.loads(listed)].count("memory/insights.md") == 1, listed
    run_mem("export", "adf", team.root / "again.adf", "-w", moved, check=True)

    target = json.loads(team.mem("main", "log", "--json", "--layer", "insights", check=True).stdout)[0]["id"]
    run_mem("hub", "redact", target, "--reason", "private phone", *team.hub, check=True)
    run_mem("sync", "-w", moved, check=True)
    assert run_mem("search", "SECRETPHONE", "-w", moved, check=True).stdout.decode().startswith("no matches")
    assert "SECRETPHONE" not in (moved / "memory/insights.md").read_text()


def test_an_import_leaves_out_files_at_the_paths_of_this_workspaces_contract(team, tmp_path):
    """An ADF file that does not name them (made elsewhere): its rows at a layer's path are refused as `mem file
    write` refuses them, not kept as the agent's own beside the layer."""
    foreign = tmp_path / "foreign"
    run_mem("init", "-w", foreign, "--agent", "writer", check=True)
    run_mem("file", "write", "memory/insights.md", "--file", "-", "-w", foreign, input=b"# insights\n\nnot the team's\n", check=True)
    adf = tmp_path / "foreign.adf"
    run_mem("export", "adf", adf, "-w", foreign, check=True)
    moved = tmp_path / "moved"
    with Memory.init(moved, "writer") as memory:
        add_remote(memory, "origin", team.url, str(team.root / "writer.token"))
    said = run_mem("import", "adf", adf, "-w", moved, check=True).stdout.decode()
    assert "left out 1 file of the hub's shared layers (memory/insights.md)" in said, said
    assert file_writes(moved) == []


def test_a_layer_moved_onto_an_own_file_leaves_the_file_the_agents_until_it_is_deleted(team):
    """Regression (newcomer7 M1): the pull took the move without a word, `mem show`/`cite` answered the layer (the
    agent's own file unreachable), `mem file list` listed the path twice, status said clean, and every export died
    on a raw UNIQUE constraint. The agent's own file keeps its path; the layer's file is written there once it goes."""
    team.mem("writer", "file", "write", "notes/x.md", "--file", "-", input=b"my own private notes\n", check=True)
    team.mem("main", "entry", "add", "insights", "[FACT] 2026-11-01: shared fact", check=True)
    team.mem("main", "sync", check=True)
    team.apply(layer("insights", "notes/x.md") + layer("drafts", "content/drafts/", "pages",
                                                       producers=("main", "writer")))
    synced = team.mem("writer", "sync", check=True)
    said = synced.stderr.decode()
    assert said.count("\n") == 1 and said.startswith("warning: layer 'insights' is placed at notes/x.md, where this "
                                                      "agent's own file is"), said
    assert team.mem("writer", "sync", check=True).stderr == b""  # said once, at the change
    writer = team.root / "writer"
    assert not (writer / "notes/x.md").exists() and not (writer / "memory/insights.md").exists()
    assert team.mem("writer", "show", "notes/x.md", check=True).stdout == b"my own private notes\n"
    assert team.mem("writer", "cite", "adf-file://notes/x.md", check=True).stdout == b"my own private notes\n"
    listed = json.loads(team.mem("writer", "file", "list", "--json", check=True).stdout)
    assert [row["path"] for row in listed].count("notes/x.md") == 1, listed
    status = team.mem("writer", "status", check=True).stdout.decode()
    assert "own file:        layer 'insights' is placed at notes/x.md" in status, status
    assert "insights" in json.loads(team.mem("writer", "status", "--json", check=True).stdout)["blocked"]["notes/x.md"]
    refused = team.mem("writer", "file", "write", "notes/x.md", "--file", "-", input=b"again\n")
    assert refused.returncode == 1 and b"belongs to layer 'insights'" in refused.stderr, refused.stderr

    adf = team.root / "writer.adf"
    team.mem("writer", "export", "adf", adf, check=True)
    rows = sqlite3.connect(adf).execute("SELECT content FROM adf_files WHERE path = 'notes/x.md'").fetchall()
    assert rows == [(b"my own private notes\n",)], rows
    moved = team.root / "writer2"
    run_mem("init", "-w", moved, "--agent", "writer", check=True)
    run_mem("import", "adf", adf, "-w", moved, check=True)
    assert file_writes(moved) == ["notes/x.md"]

    team.mem("writer", "file", "delete", "notes/x.md", check=True)
    assert "shared fact" in (writer / "notes/x.md").read_text()
    assert b"shared fact" in team.mem("writer", "show", "notes/x.md", check=True).stdout
    assert team.mem("writer", "show", "notes/x.md", "--seq", "1", check=True).stdout == b"my own private notes\n"
    history = json.loads(team.mem("writer", "history", "notes/x.md", "--json", check=True).stdout)
    assert [(v["kind"], v["deleted"]) for v in history] == [("file.write", False), ("file.delete", False)], history
    assert team.mem("writer", "history", "notes/x.md", check=True).stdout.count(b"\n") == 2  # it was a traceback
    assert team.mem("writer", "status", check=True).stdout.decode().endswith("clean: every file is what the log says\n")
    team.mem("writer", "replay", "--check", check=True)


def test_remote_add_says_when_the_hubs_contract_places_a_layer_on_an_own_file(team):
    """Regression: `mem sync` said it, `mem remote add` (which takes the contract first) said nothing, and the next
    sync had nothing new to say: the agent never heard why its layer's file was missing."""
    moved = team.root / "writer2"
    run_mem("init", "-w", moved, "--agent", "writer", check=True)
    run_mem("file", "write", "memory/insights.md", "--file", "-", "-w", moved, input=b"mine\n", check=True)
    added = run_mem("remote", "add", "origin", team.url, "--token-file", team.root / "writer.token", "-w", moved,
                    check=True)
    said = added.stderr.decode()
    assert said.count("\n") == 1 and said.startswith("warning: layer 'insights' is placed at memory/insights.md, "
                                                      "where this agent's own file is"), said
    assert added.stdout.decode().startswith("remote origin -> ")
    again = run_mem("remote", "add", "origin", team.url, "--token-file", team.root / "writer.token", "-w", moved,
                    "--json", check=True)
    assert again.stderr == b"" and json.loads(again.stdout)["warnings"] == []  # said once, at the change
