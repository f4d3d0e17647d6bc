"""Point-in-time reads place each layer's file by the contract in force then: a layer dropped from the hub's
contract reads as it was while it was shared, a moved one at its old path for the moments before the move
(found by a newcomer run: both read by today's contract, so the dropped layer's past "never existed").

A real hub (`mem serve` on 127.0.0.1) and real `mem` subprocesses."""

import json

import pytest

from conftest import log_rows
from teamhub import Team, layer

OPS = layer("ops", "memory/ops.md")
INSIGHTS = layer("insights", "memory/insights.md")


def placed(root: str) -> str:
    return layer("notes", f"{root}/notes.md") + layer("drafts", f"{root}/drafts/", "pages")


@pytest.fixture
def team(tmp_path):
    team = Team(tmp_path, agents=("alice",), contract=OPS + INSIGHTS)
    yield team
    team.stop()


def out(result) -> str:
    return result.stdout.decode()


def test_a_dropped_layer_reads_as_it_was_while_it_was_shared(team, tmp_path):
    team.mem("alice", "entry", "add", "ops", "[EPISODE] 2026-12-01: pager fired at 03:00", check=True)
    team.mem("alice", "push", check=True)
    team.apply(INSIGHTS)  # ops is dropped
    team.mem("alice", "pull", check=True)
    alice = tmp_path / "alice"

    assert not (alice / "memory/ops.md").exists()  # the workspace follows the contract now...
    assert any(row[5] == "ops" for row in log_rows(alice))  # ...and the log keeps the layer's events
    shown = team.mem("alice", "show", "memory/ops.md", "--seq", "1", check=True)
    assert out(shown) == "# ops\n\n[EPISODE] 2026-12-01: pager fired at 03:00\n"
    history = out(team.mem("alice", "history", "memory/ops.md", check=True)).splitlines()
    assert [line.split()[3] for line in history] == ["entry.append", "contract.change"], history
    assert history[1].endswith("memory/ops.md  (layer ops dropped from the contract)")
    after = team.mem("alice", "show", "memory/ops.md", "--seq", history[1].split()[0])
    assert after.returncode == 1 and after.stderr == (  # the way back to it, as without a moment (nc19b)
        b"error: memory/ops.md: layer ops dropped from the contract at seq 2; `mem show memory/ops.md --seq 1` shows "
        b"it as it was\n")

    log = out(team.mem("alice", "log", "--layer", "ops", check=True))
    assert "entry.append   pager fired at 03:00" in log
    typo = team.mem("alice", "log", "--layer", "opz")
    assert typo.returncode == 1 and typo.stderr.decode() == (
        "error: layer 'opz' is not in the contract, nor in the log (layers: agent, loop, mind, insights, ops)\n")

    then = out(team.mem("alice", "search", "pager", "--seq", "1", check=True))
    assert "— memory/ops.md (entry)\n" in then, then
    now = out(team.mem("alice", "search", "pager", check=True))
    assert "— memory/ops.md (entry) · FLAGGED: layer ops was dropped from the contract" in now, now

    team.mem("alice", "checkout", tmp_path / "then", "--seq", "1", check=True)
    assert (tmp_path / "then/memory/ops.md").read_text().endswith("pager fired at 03:00\n")
    believed = json.loads(out(team.mem("alice", "believed", "--seq", "1", "--json", check=True)))
    assert "pager fired" in believed["shared"]["memory/ops.md"]

    team.mem("alice", "replay", check=True)  # the views built again from the log place it the same
    assert out(team.mem("alice", "show", "memory/ops.md", "--seq", "1", check=True)) == out(shown)


def test_a_moved_layer_reads_at_its_old_path_before_the_move(tmp_path):
    team = Team(tmp_path, agents=("alice",), contract=placed("memory"))
    try:
        team.mem("alice", "entry", "add", "notes", "[FACT] 2026-12-01: one", check=True)
        team.mem("alice", "page", "write", "plan", "--layer", "drafts", "--file", team.page("plan", "Plan", "first"),
                 check=True)
        team.mem("alice", "push", check=True)
        before = len(log_rows(tmp_path / "alice"))  # the moment before the move
        team.apply(placed("team"))
        team.mem("alice", "pull", check=True)
        team.mem("alice", "entry", "add", "notes", "[FACT] 2026-12-01: two", check=True)
    finally:
        team.stop()
    head = len(log_rows(tmp_path / "alice"))

    def checkout(seq: int) -> list[str]:
        target = tmp_path / f"at-{seq}"
        team.mem("alice", "checkout", target, "--seq", seq, check=True)
        return sorted(str(p.relative_to(target)) for p in target.rglob("*.md") if not p.is_relative_to(target / "mind"))

    assert checkout(before) == ["memory/drafts/plan.md", "memory/notes.md", "mind.md"]
    assert checkout(head) == ["mind.md", "team/drafts/plan.md", "team/notes.md"]
    assert out(team.mem("alice", "show", "memory/notes.md", "--seq", before, check=True)).endswith("one\n")
    assert team.mem("alice", "show", "team/notes.md", "--seq", before).returncode == 1
    old = out(team.mem("alice", "history", "memory/notes.md", check=True)).splitlines()
    assert old[-1].endswith("contract.change memory/notes.md  (moved to team/notes.md)"), old
    moved = team.mem("alice", "show", "memory/notes.md")  # it said "was deleted" (nc21a)
    assert moved.returncode == 1 and moved.stderr.decode() == (
        f"error: memory/notes.md: moved to team/notes.md at seq {before + 1}; `mem show memory/notes.md --seq "
        f"{before}` shows it as it was\n"), moved.stderr
    new = out(team.mem("alice", "history", "team/notes.md", check=True)).splitlines()
    assert [line.split()[3] for line in new] == ["entry.append", "contract.change", "entry.append"], new
    assert new[0].split()[4] == "memory/notes.md", new  # followed to its older path, as a rename is
    assert new[1].endswith("contract.change team/notes.md  (moved from memory/notes.md)"), new
    moved_page = out(team.mem("alice", "history", "team/drafts/plan.md", check=True)).splitlines()
    assert [line.split()[3:5] for line in moved_page] == [["page.ingest", "memory/drafts/plan.md"],
                                                          ["contract.change", "team/drafts/plan.md"]], moved_page
    page = out(team.mem("alice", "history", "memory/drafts/plan.md", check=True)).splitlines()
    assert [line.split()[3] for line in page] == ["page.ingest", "contract.change"], page
    assert "— memory/drafts/plan.md (shared-page)" in out(team.mem("alice", "search", "first", "--seq", before,
                                                                     check=True))


def test_a_hand_edit_left_behind_by_a_moved_layer_is_told_where_to_go(tmp_path):
    """Pull, status and adopt named `mem adopt` for a hand edit in a folder the contract had moved the layer
    out of, and `mem adopt` then refused the file as "not a page of the wiki" (found by a newcomer run)."""
    team = Team(tmp_path, agents=("alice",), contract=placed("memory"))
    try:
        team.mem("alice", "page", "write", "plan", "--layer", "drafts", "--file", team.page("plan", "Plan", "first"),
                 check=True)
        team.mem("alice", "push", check=True)
        with open(tmp_path / "alice/memory/drafts/plan.md", "a") as edited:
            edited.write("A HAND EDIT\n")
        team.apply(placed("team"))
        pulled = team.mem("alice", "pull", check=True)
        where = ("layer drafts moved to team/drafts/: copy the edit to team/drafts/plan.md, then `mem adopt`")
        assert (f"not written: memory/drafts/plan.md was edited by hand, but {where}\n"
                in pulled.stderr.decode()), pulled.stderr
        status = out(team.mem("alice", "status", check=True))
        assert f"not written:     memory/drafts/plan.md  (edited by hand, but {where})" in status, status
        refused = team.mem("alice", "adopt")
        assert refused.returncode == 1 and f"memory/drafts/plan.md: {where}" in out(refused) + refused.stderr.decode()
        (tmp_path / "alice/team/drafts/plan.md").write_bytes((tmp_path / "alice/memory/drafts/plan.md").read_bytes())
        (tmp_path / "alice/memory/drafts/plan.md").unlink()
        team.mem("alice", "adopt", check=True)
    finally:
        team.stop()
    assert out(team.mem("alice", "show", "team/drafts/plan.md", check=True)).endswith("A HAND EDIT\n")


def test_a_change_of_producers_alone_records_nothing(team, tmp_path):
    """Only a contract that moves, drops or adds a layer's file is recorded: seqs stay as they were otherwise."""
    team.apply(layer("ops", "memory/ops.md", producers=["alice"]) + INSIGHTS)
    team.mem("alice", "pull", check=True)
    assert log_rows(tmp_path / "alice") == []


def test_the_hubs_pages_place_a_moved_layers_past_at_its_old_path(tmp_path):
    """Regression: the hub's pages (`mem serve`'s /ui, over its mirror) placed every layer where its latest contract
    put it, so as of a moment before a move the moved layer's file and pages were listed and read at their new
    paths (and the old ones were a 404)."""
    import httpx

    from conftest import run_mem
    from hubserver import mem_serve

    db = tmp_path / "hub.db"
    (tmp_path / "c.toml").write_text(placed("memory"))
    run_mem("hub", "init", "--db", db, check=True)
    run_mem("hub", "contract", "apply", tmp_path / "c.toml", "--db", db, check=True)
    token = run_mem("hub", "agent", "add", "alice", "--db", db, check=True).stdout.decode().strip()
    (tmp_path / "alice.token").write_text(token + "\n")
    (tmp_path / "plan.md").write_text("---\ntype: draft\n---\n# Plan\n\nfirst\n")
    with mem_serve(db) as url:
        alice = ("-w", tmp_path / "alice")
        run_mem("init", *alice, "--agent", "alice", check=True)
        run_mem("remote", "add", "origin", url, "--token-file", tmp_path / "alice.token", *alice, check=True)
        run_mem(*alice, "entry", "add", "notes", "[FACT] 2026-12-01: one", check=True)
        run_mem(*alice, "page", "write", "plan", "--layer", "drafts", "--file", tmp_path / "plan.md", check=True)
        run_mem(*alice, "push", check=True)
        (tmp_path / "c.toml").write_text(placed("team"))
        run_mem("hub", "contract", "apply", tmp_path / "c.toml", "--db", db, check=True)  # hub position 4
        run_mem(*alice, "sync", check=True)
        run_mem(*alice, "entry", "add", "notes", "[FACT] 2026-12-01: two", check=True)
        run_mem(*alice, "push", check=True)

        def page(query: str) -> httpx.Response:
            return httpx.get(f"{url}/ui/{query}", headers={"authorization": f"Bearer {token}"}, timeout=60)

        def listed(seq: int) -> list[str]:
            shared = page(f"asof?seq={seq}").text.split('id="shared"', 1)[1].split("</ul>", 1)[0]
            return sorted(line.split('">', 1)[1].split("<", 1)[0] for line in shared.splitlines() if "<a " in line)

        assert listed(3) == ["memory/drafts/plan.md", "memory/notes.md"]
        assert listed(5) == ["team/drafts/plan.md", "team/notes.md"]
        then = page("asof?seq=3&file=memory/notes.md")
        assert then.status_code == 200 and "one" in then.text, then.text
        assert page("asof?seq=3&file=memory/drafts/plan.md").status_code == 200
        assert page("asof?seq=3&file=team/notes.md").status_code == 404
        now = page("asof?seq=5&file=team/notes.md")
        assert now.status_code == 200 and "two" in now.text and "one" in now.text
        assert page("asof?file=team/notes.md").status_code == 200
        history = page("history?path=memory/notes.md")  # the old path's history, asked now
        assert history.status_code == 200 and "contract.change" in history.text, history.text
        assert "rename from memory/notes.md@" in history.text and "rename to team/notes.md@" in history.text  # moved,
        # as the diff of the versions either side of the move says (nc30a: a deletion of every line)


def test_a_hand_edit_left_behind_by_a_dropped_layer_is_told_it_has_nowhere_to_go(team, tmp_path):
    """Pull, status and adopt said "`mem adopt` keeps the edit" and "not a page of the wiki" of a hand edit of a
    layer the contract had dropped (found by a helper after the moved-layer fix)."""
    team.mem("alice", "entry", "add", "ops", "[EPISODE] 2026-12-01: pager fired at 03:00", check=True)
    team.mem("alice", "push", check=True)
    with open(tmp_path / "alice/memory/ops.md", "a") as edited:
        edited.write("A HAND EDIT\n")
    team.apply(INSIGHTS)  # ops is dropped
    pulled = team.mem("alice", "pull", check=True).stderr.decode()
    why = ("layer ops was dropped from the hub's contract, so the edit has no layer to go to: it stays on disk only "
           "(the layer's last text is in the log: `mem history memory/ops.md`)")
    assert f"not written: memory/ops.md was edited by hand, but {why}\n" in pulled, pulled
    assert f"memory/ops.md  (edited by hand, but {why})" in out(team.mem("alice", "status", check=True))
    refused = team.mem("alice", "adopt")
    assert refused.returncode == 1 and f"memory/ops.md: {why}" in out(refused) + refused.stderr.decode()
    assert (tmp_path / "alice/memory/ops.md").read_text().endswith("A HAND EDIT\n")


def test_a_hand_edited_entries_file_is_not_sent_to_mem_adopt(tmp_path):
    """Regression: pull and status said `mem adopt` keeps the edit of an entries layer's file, and `mem adopt` then
    refused it (an entries file is derived from its entries)."""
    team = Team(tmp_path, agents=("writer", "reviewer"))
    try:
        team.mem("writer", "entry", "add", "insights", "[FACT] 2026-11-01: Staging first", check=True)
        team.mem("writer", "push", check=True)
        team.mem("reviewer", "pull", check=True)
        with open(tmp_path / "reviewer/memory/insights.md", "a") as edited:
            edited.write("[FACT] 2026-11-02: A HAND EDIT\n")
        team.mem("writer", "entry", "add", "insights", "[FACT] 2026-11-03: Then prod", check=True)
        team.mem("writer", "push", check=True)
        pulled = team.mem("reviewer", "pull", check=True).stderr.decode()
        why = ("the entries of layer insights are rendered from its events, which an edit does not make: `mem entry "
               "add` adds one; `mem show memory/insights.md > memory/insights.md` puts the file back")
        assert f"not written: memory/insights.md was edited by hand, but {why}\n" in pulled, pulled
        assert "mem adopt" not in pulled, pulled
        status = out(team.mem("reviewer", "status", check=True))
        assert f"not written:     memory/insights.md  (edited by hand, but {why})" in status, status
        (tmp_path / "reviewer/memory/insights.md").unlink()
        team.mem("reviewer", "pull", check=True)
        assert "Then prod" in (tmp_path / "reviewer/memory/insights.md").read_text()
    finally:
        team.stop()


def test_a_pull_whose_file_a_directory_stands_in_the_way_of_records_the_events_and_says_so(tmp_path):
    """Regression (nc13b): the pull recorded the events, then failed with `error:` and exit 1 (the README: an
    append whose files cannot follow is recorded, and the command says the files are behind)."""
    team = Team(tmp_path, agents=("writer", "reviewer"))
    try:
        (tmp_path / "reviewer/memory/insights.md").mkdir(parents=True)
        team.mem("writer", "entry", "add", "insights", "[FACT] 2026-11-01: Staging first", check=True)
        team.mem("writer", "push", check=True)
        pulled = team.mem("reviewer", "pull")
        assert pulled.returncode == 0 and pulled.stdout == b"pulled 1 event from origin\n", pulled
        assert pulled.stderr.decode() == (
            f"warning: recorded, but the files are behind the log ({tmp_path}/reviewer/memory/insights.md "
            "is a directory where mindlog writes a file; move it away (`mem replay` then writes the file)); they "
            "are written at the next command that can\n")
        (tmp_path / "reviewer/memory/insights.md").rmdir()
        team.mem("reviewer", "pull", check=True)
        assert "Staging first" in (tmp_path / "reviewer/memory/insights.md").read_text()
    finally:
        team.stop()


def test_a_pull_says_when_a_layer_it_took_left_the_contract(tmp_path):
    """Regression (nc13a): a contract applied with `[layers.insight]` for `[layers.insights]` took every consumer's
    file of the layer away at their next sync, which said nothing (`pulled 0 events`)."""
    team = Team(tmp_path, agents=("writer", "reviewer"))
    try:
        team.mem("writer", "entry", "add", "insights", "[FACT] 2026-11-01: Staging first", check=True)
        team.mem("writer", "push", check=True)
        team.mem("reviewer", "pull", check=True)
        team.apply(layer("insight", "memory/insights.md") + layer("drafts", "content/drafts/", "pages"))
        pulled = team.mem("reviewer", "pull", check=True)
        assert pulled.stderr.decode() == (
            "warning: layer insights left the hub's contract, and its file memory/insights.md with it (its past stays "
            "in the log: `mem history memory/insights.md`)\n"), pulled.stderr
        again = team.mem("reviewer", "pull", check=True)
        assert again.stderr == b"", again.stderr
        refused = team.mem("reviewer", "entry", "add", "insights", "[FACT] 2026-11-02: more")  # nc34b: "`mem pull`"
        assert refused.returncode == 1 and refused.stderr.decode() == (
            "error: layer 'insights' was dropped from the hub's contract at seq 2 (layers now: drafts, insight): it "
            "takes no writes (`mem pull` takes it again if the hub has it back)\n"), refused.stderr
    finally:
        team.stop()


def test_the_history_of_a_layer_moved_away_and_back_says_each_move_at_its_path(tmp_path):
    """Regression (nc29a): a layer's file moved A -> B -> A by contract changes made `mem history A` a traceback
    (each move was described by the path asked about, where the layer was not at the move to B); its --json said
    nothing of renames and moves, which the text says."""
    team = Team(tmp_path, agents=("alice",), contract=placed("memory"))
    try:
        team.mem("alice", "entry", "add", "notes", "[FACT] 2026-12-01: one", check=True)
        team.mem("alice", "sync", check=True)
        for root in ("team", "memory"):
            team.apply(placed(root))
            team.mem("alice", "pull", check=True)
    finally:
        team.stop()
    for asked, last in (("memory/notes.md", ["memory/notes.md", "(moved", "from", "team/notes.md)"]),
                        ("team/notes.md", ["team/notes.md", "(moved", "to", "memory/notes.md)"])):
        lines = out(team.mem("alice", "history", asked, check=True)).splitlines()
        assert [line.split()[3:] for line in lines] == [
            ["entry.append", "memory/notes.md"],
            ["contract.change", "team/notes.md", "(moved", "from", "memory/notes.md)"],
            ["contract.change", *last]], lines
    versions = json.loads(out(team.mem("alice", "history", "memory/notes.md", "--json", check=True)))
    assert [(v["path"], v.get("change")) for v in versions] == [
        ("memory/notes.md", None), ("team/notes.md", "moved from memory/notes.md"),
        ("memory/notes.md", "moved from team/notes.md")]
    moves = [str(v["seq"]) for v in versions[1:]]
    diffed = team.mem("alice", "diff", "memory/notes.md", "--from", f"seq:{versions[0]['seq']}", "--to",
                      f"seq:{moves[0]}", check=True)  # followed at --to as at --from (nc30a: a deletion)
    assert out(diffed) == f"rename from memory/notes.md@{versions[0]['seq']}\nrename to team/notes.md@{moves[0]}\n"


def drop_and_put_back(team, back_at: str | None) -> None:
    """alice writes drafts/launch twice (v1, v2) and syncs; the hub drops `drafts`, then puts it back at `back_at`
    (None: not)."""
    team.apply(OPS + INSIGHTS + layer("drafts", "content/drafts/", "pages"))
    team.mem("alice", "pull", check=True)
    for text in ("v1", "v2"):
        team.mem("alice", "page", "write", "launch", "--layer", "drafts", "--file", team.page("launch", "L", text),
                 check=True)
    team.mem("alice", "sync", check=True)
    for contract in (OPS + INSIGHTS, *([OPS + INSIGHTS + layer("drafts", back_at, "pages")] if back_at else [])):
        team.apply(contract)
        team.mem("alice", "sync", check=True)


def test_the_history_of_a_page_of_a_layer_dropped_and_put_back_keeps_its_versions_from_before(team, tmp_path):
    """Regression (nc29b): once its layer was dropped from the contract and put back, a shared page's history was
    the contract change alone: every version from before the drop was left out (`--seq` before it still had them)."""
    drop_and_put_back(team, "content/drafts/")
    lines = out(team.mem("alice", "history", "drafts/launch", check=True)).splitlines()
    assert [line.split(None, 3)[3] for line in lines] == [
        "page.ingest    content/drafts/launch.md", "page.update    content/drafts/launch.md",
        "contract.change content/drafts/launch.md  (layer drafts dropped from the contract)",
        "contract.change content/drafts/launch.md  (layer drafts placed here by the contract)"], lines


def test_a_page_of_a_dropped_layer_is_named_by_layer_and_slug_as_before(team, tmp_path):
    """Regression (nc32b): while its layer was dropped, `mem history drafts/launch` said "never existed" and `mem show
    drafts/launch --seq 1` "did not exist then" (LAYER/SLUG was read by today's contract); the path form worked."""
    drop_and_put_back(team, None)
    named, by_path = (out(team.mem("alice", "history", name, check=True)) for name in ("drafts/launch",
                                                                                      "content/drafts/launch.md"))
    assert named == by_path and "page.ingest    content/drafts/launch.md" in named, named
    seq = named.split()[0]
    assert "v1" in out(team.mem("alice", "show", "drafts/launch", "--seq", seq, check=True))


def test_the_show_tool_says_where_a_dropped_layers_page_went_as_the_cli_does(team, tmp_path):
    """Regression (nc33a): the MCP `show` tool said a page of a dropped layer "does not exist" (or "did not exist
    then"), where `mem show` says the layer was dropped and how to read the page as it was."""
    import anyio
    from mcp.client.client import Client

    from cli.mcp_server import build_server
    from projections.memory import Memory

    drop_and_put_back(team, None)
    cli = team.mem("alice", "show", "drafts/launch").stderr.decode()
    dropped = [row[0] for row in log_rows(team.root / "alice") if row[6] == "contract.change"][-1]

    async def main():
        with Memory.open(team.root / "alice") as mem:
            async with Client(build_server(mem)) as client:
                return [await client.session.call_tool("show", {"path": "drafts/launch", **extra})
                        for extra in ({}, {"seq": dropped})]

    for result in anyio.run(main):
        assert result.is_error and result.content[0].text == (
            f"content/drafts/launch.md: layer drafts dropped from the contract at seq {dropped}; the show tool with "
            f"path 'content/drafts/launch.md' and seq {dropped - 1} shows it as it was"), result.content[0].text
    assert cli == (f"error: content/drafts/launch.md: layer drafts dropped from the contract at seq {dropped}; `mem show "
                   f"content/drafts/launch.md --seq {dropped - 1}` shows it as it was\n"), cli


def test_the_history_of_a_page_of_a_layer_dropped_and_put_back_elsewhere_keeps_its_versions_from_before(team):
    """Regression (nc33a): a layer dropped, then put back at another folder: `mem history LAYER/SLUG` began at the
    contract change that placed it anew; the versions at its old folder (which `mem diff` links) were left out."""
    drop_and_put_back(team, "content/posts/")
    team.mem("alice", "page", "write", "launch", "--layer", "drafts", "--file", team.page("launch", "L", "v3"),
             check=True)
    for name in ("drafts/launch", "content/posts/launch.md"):
        lines = out(team.mem("alice", "history", name, check=True)).splitlines()
        assert [line.split(None, 3)[3] for line in lines] == [
            "page.ingest    content/drafts/launch.md", "page.update    content/drafts/launch.md",
            "contract.change content/drafts/launch.md  (layer drafts dropped from the contract)",
            "contract.change content/posts/launch.md  (layer drafts placed here by the contract)",
            "page.update    content/posts/launch.md"], (name, lines)
