"""Shared pages never lose a write: a hand edit names as parent the version its file showed, so a
teammate's newer version becomes a conflict (loud, everywhere) instead of vanishing; adopt and watch
cover shared pages; status tells the sync state."""

import json
import subprocess
import time

import pytest

from conftest import log_rows, mem_command
from projections.memory import Memory
from teamhub import CONTRACT, PAGE, Team
from test_shared_hold import assert_kept_heads_are_the_heads

PRICING = "content/drafts/pricing.md"


@pytest.fixture
def team(tmp_path):
    team = Team(tmp_path, agents=("writer", "reviewer"))
    yield team
    team.stop()


def heads_everywhere(team):
    found = {}
    for agent in team.agents:
        result = team.mem(agent, "conflicts", "--json")
        assert result.returncode == 1, result.stderr
        found[agent] = json.loads(result.stdout)
    return found


def test_a_hand_edit_never_overwrites_a_teammate_silently(team):
    team.mem("writer", "page", "write", "pricing", "--layer", "drafts", "--file", team.page("v1", "Pricing", "v1"),
             check=True)
    team.mem("writer", "sync", check=True)
    team.mem("reviewer", "sync", check=True)
    edited = (team.root / "reviewer" / PRICING).read_text().replace("v1", "v1 + the reviewer's edit")
    (team.root / "reviewer" / PRICING).write_text(edited)
    team.mem("writer", "page", "write", "pricing", "--layer", "drafts", "--file", team.page("v2", "Pricing", "v2"),
             check=True)
    team.mem("writer", "sync", check=True)

    pulled = team.mem("reviewer", "sync", check=True)
    assert b"not written: content/drafts/pricing.md was edited by hand" in pulled.stderr
    assert (team.root / "reviewer" / PRICING).read_text() == edited
    status = json.loads(team.mem("reviewer", "status", "--json", check=True).stdout)
    assert status["skipped"] == [PRICING] and status["conflicts"] == []
    again = team.mem("reviewer", "pull", check=True)  # said once (it was twice: the opening refresh, the pull)
    assert again.stderr.decode().count(PRICING) == 1, again.stderr

    team.mem("reviewer", "page", "write", "pricing", "--layer", "drafts", "--file", team.root / "reviewer" / PRICING,
             check=True)
    for agent in ("reviewer", "writer", "reviewer"):
        team.mem(agent, "sync", check=True)

    found = heads_everywhere(team)
    assert found["writer"] == found["reviewer"] and len(found["writer"]) == 1
    assert sorted(h["agent"] for h in found["writer"][0]["heads"]) == ["reviewer", "writer"]
    for agent in team.agents:
        shown = team.mem(agent, "conflicts", "--show")
        assert shown.returncode == 1
        assert b"\nv2\n" in shown.stdout and b"v1 + the reviewer's edit" in shown.stdout
        assert b"by writer at 20" in shown.stdout and b"by reviewer at 20" in shown.stdout
        assert b"conflict:        drafts/pricing (2 heads" in team.mem(agent, "status", check=True).stdout
    writer, reviewer = (team.root / a / PRICING for a in team.agents)
    assert writer.read_bytes() == reviewer.read_bytes()

    merged = team.page("merged", "Pricing", "v2 and the reviewer's edit")
    team.mem("writer", "resolve", "drafts/pricing", "--file", merged, check=True)
    team.mem("writer", "sync", check=True)
    team.mem("reviewer", "sync", check=True)
    for agent in team.agents:
        assert team.mem(agent, "conflicts").returncode == 0
    rows = log_rows(team.root / "reviewer")
    again = team.mem("reviewer", "resolve", "drafts/pricing", "--file", merged)  # wrote an identical version
    assert again.returncode == 1 and again.stderr.decode() == (
        "error: drafts/pricing has no conflict (one head): write it with `mem page write pricing --layer drafts`\n")
    assert log_rows(team.root / "reviewer") == rows


def test_adopt_and_watch_cover_shared_pages(team):
    team.mem("writer", "page", "write", "pricing", "--layer", "drafts", "--file", team.page("v1", "Pricing", "v1"),
             check=True)
    team.mem("writer", "sync", check=True)
    team.mem("reviewer", "sync", check=True)
    team.mem("writer", "page", "write", "pricing", "--layer", "drafts", "--file", team.page("v2", "Pricing", "v2"),
             check=True)
    team.mem("writer", "sync", check=True)
    # the reviewer edits by hand before pulling v2, creates a page and deletes none yet
    reviewer = team.root / "reviewer"
    (reviewer / PRICING).write_text((reviewer / PRICING).read_text() + "\nA reviewer's note.\n")
    (reviewer / "content/drafts/faq.md").write_text("---\ntype: draft\n---\n# FAQ\n\nnew by hand\n")
    (reviewer / "content/drafts/broken.md").write_text("no frontmatter\n")
    team.mem("reviewer", "pull", check=True)
    adopted = team.mem("reviewer", "adopt")
    out = adopted.stdout.decode()
    assert adopted.returncode == 1 and "adopted content/drafts/faq.md" in out and f"adopted {PRICING}" in out
    assert "left content/drafts/broken.md: the page has no frontmatter" in out
    (reviewer / "content/drafts/broken.md").unlink()
    team.mem("reviewer", "sync", check=True)
    team.mem("writer", "sync", check=True)
    found = heads_everywhere(team)
    assert [c["slug"] for c in found["writer"]] == ["pricing"] and found["writer"] == found["reviewer"]
    listed = json.loads(team.mem("writer", "page", "list", "--layer", "drafts", "--json", check=True).stdout)
    assert [(p["slug"], p["heads"]) for p in listed] == [("faq", 1), ("pricing", 2)]

    watcher = subprocess.Popen([*mem_command(), "-w", reviewer, "watch", "--debounce-ms", "100"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.5)
        rows = len(log_rows(reviewer))
        (reviewer / "content/drafts/faq.md").unlink()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(log_rows(reviewer)) == rows:
            time.sleep(0.1)
        (reviewer / "content/drafts/broken.md").write_text("no frontmatter\n")
        time.sleep(1.0)
        (reviewer / "content/drafts/other.txt").write_text("a change elsewhere\n")
        time.sleep(1.0)
    finally:
        watcher.terminate()
        out, _err = watcher.communicate(timeout=10)
    assert b"adopted content/drafts/faq.md" in out
    assert out.count(b"left content/drafts/broken.md: the page has no frontmatter") == 1, out
    (reviewer / "content/drafts/broken.md").unlink()
    (reviewer / "content/drafts/other.txt").unlink()
    assert log_rows(reviewer)[-1][6] == "page.delete"
    team.mem("reviewer", "sync", check=True)
    team.mem("writer", "sync", check=True)
    assert not (team.root / "writer/content/drafts/faq.md").exists()


def test_shared_page_rename_delete_and_list(team):
    team.mem("writer", "page", "write", "pricing", "--layer", "drafts", "--file", team.page("v1", "Pricing", "v1"),
             check=True)
    assert b"rename content/drafts/pricing.md -> content/drafts/prices.md" in team.mem("writer", "page", "rename", "pricing", "prices",
                                                                 "--layer", "drafts", check=True).stdout
    drafts = team.root / "writer/content/drafts"
    assert sorted(p.name for p in drafts.iterdir()) == ["prices.md"] and "v1" in (drafts / "prices.md").read_text()
    team.mem("writer", "sync", check=True)
    team.mem("reviewer", "sync", check=True)
    assert sorted(p.name for p in (team.root / "reviewer/content/drafts").iterdir()) == ["prices.md"]
    listed = team.mem("reviewer", "page", "list", "--layer", "drafts", check=True).stdout.decode()
    assert listed.split()[:3] == ["prices", "Pricing", "writer"]
    for agent in team.agents:  # the history follows the rename, as a wiki page's does (it began at the rename)
        lines = team.mem(agent, "history", "content/drafts/prices.md", check=True).stdout.decode().splitlines()
        assert [line.split()[3:] for line in lines] == [
            ["page.ingest", "content/drafts/pricing.md"],
            ["page.ingest", "content/drafts/prices.md", "(renamed", "from", "content/drafts/pricing.md)", "—",
             "renamed", "from", "pricing"]], lines  # the version's own note follows the line
    before = log_rows(team.root / "writer")
    for args, expect in ((["page", "rename", "ghost", "x", "--layer", "drafts"], "no page ghost"),
                         (["page", "delete", "ghost", "--layer", "drafts"], "no page ghost"),
                         (["page", "list", "--layer", "nowhere"], "not in the contract")):
        refused = team.mem("writer", *args)
        assert refused.returncode == 1 and expect in refused.stderr.decode(), (args, refused.stderr)
    assert log_rows(team.root / "writer") == before
    team.mem("writer", "page", "delete", "prices", "--layer", "drafts", check=True)
    assert list(drafts.iterdir()) == []
    assert json.loads(team.mem("writer", "page", "list", "--layer", "drafts", "--json", check=True).stdout) == []


def test_status_tells_the_sync_state(team):
    team.mem("writer", "entry", "add", "insights", "[FACT] one", check=True)
    team.mem("writer", "entry", "add", "insights", "[FACT] two", check=True)
    status = json.loads(team.mem("writer", "status", "--json", "--fetch", check=True).stdout)
    (origin,) = status["remotes"]
    assert origin["unpushed"] == 2 and origin["behind"] == 0 and origin["held"] == []
    # `clean` is about the files (it was false with every file list empty while events waited to be pushed)
    assert status["clean"] and not (status["hand_edited"] or status["pending"] or status["missing"])
    text = team.mem("writer", "status", check=True).stdout.decode()
    assert ": 2 to push;" in text and text.endswith("clean: every file is what the log says\n"), text
    insights = team.root / "writer/memory/insights.md"
    rendered = insights.read_bytes()
    insights.write_text("edited by hand\n")
    status = json.loads(team.mem("writer", "status", "--json", check=True).stdout)
    assert not status["clean"] and status["hand_edited"] == ["memory/insights.md"]
    insights.write_bytes(rendered)
    team.mem("writer", "push", check=True)
    status = json.loads(team.mem("reviewer", "status", "--json", "--fetch", check=True).stdout)
    assert status["remotes"][0]["behind"] == 2 and status["remotes"][0]["last_pull"] is None
    team.mem("reviewer", "pull", check=True)
    status = json.loads(team.mem("reviewer", "status", "--json", "--fetch", check=True).stdout)
    assert status["remotes"][0]["behind"] == 0 and status["remotes"][0]["pulled_to"] >= 2
    team.stop()
    text = team.mem("reviewer", "status", "--fetch", check=True).stdout.decode()
    assert "remote origin" in text and "behind the hub: unknown" in text
    team.server.start()


# --- the open conflicts, kept as the fold goes (in-process) -----------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def version_dags(draw):
    """Versions of two pages: each an ingest, an update or a delete naming earlier versions of its page as
    parents, appended in an order that may put a child before its parent (as a sync can), in batches."""
    made = []  # (slug, index, parents)
    for index in range(draw(st.integers(1, 14))):
        slug = draw(st.sampled_from(["a", "b"]))
        earlier = [i for s, i, _p in made if s == slug]
        parents = sorted(set(draw(st.lists(st.sampled_from(earlier), max_size=2)))) if earlier else []
        made.append((slug, index, parents))
    order = draw(st.permutations(range(len(made))))
    cuts = sorted(set(draw(st.lists(st.integers(1, len(made)), max_size=3))))
    deletes = draw(st.sets(st.sampled_from(range(len(made)))))
    return made, order, cuts, deletes


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dag=version_dags())
def test_open_conflicts_follow_the_heads_whatever_the_order_and_batches(tmp_path_factory, dag):
    from eventstore.envelope import new_event
    from eventstore.kinds import PageDelete, PageIngest, PageUpdate
    from projections import search
    from projections.memory import Memory

    made, order, cuts, deletes = dag
    root = tmp_path_factory.mktemp("heads")
    Memory.init(root, "alice").close()
    (root / ".mem" / "contract.json").write_text(json.dumps({"layers": {"drafts": {
        "path": "content/drafts/", "format": "pages", "producers": ["*"], "consumers": ["*"]}}}))
    events = {}
    for slug, index, parents in made:  # ids in creation order: the winner is the newest head
        ids = [events[p].id for p in parents]
        body = (PageDelete(slug=slug, parents=ids) if index in deletes and ids else
                PageUpdate(slug=slug, frontmatter={}, text=f"v{index}", parents=ids) if ids else
                PageIngest(slug=slug, frontmatter={}, text=f"v{index}"))
        events[index] = new_event(body, agent="bob", layer="drafts")
    appended = [events[i] for i in order]
    with Memory.open(root) as mem:
        start = 0
        for cut in [*cuts, len(appended)]:
            if appended[start:cut]:
                mem.log.append(appended[start:cut])
                mem.refresh(files=False)
                assert_kept_heads_are_the_heads(mem.views.shared, [("drafts", "a"), ("drafts", "b")])
            start = cut
        seq_of = {e.id: mem.log.get(e.id).seq for e in appended}

        def expected(as_of):
            seen = [e for e in appended if seq_of[e.id] <= as_of]
            named = {p for e in seen for p in e.body.parents}
            by_slug = {}
            for e in seen:
                if e.id not in named:
                    by_slug.setdefault(e.body.slug, set()).add(e.id)
            deleting = {e.id for e in seen if isinstance(e.body, PageDelete)}
            return {slug: heads for slug, heads in by_slug.items() if len(heads) > 1 and not heads <= deleting}

        def found(as_of):
            return {c.slug: {h.id for h in c.heads} for c in mem.views.shared.conflicts(as_of)}

        def current(event, as_of):
            """A version is found by a search as of a seq while it is a head: no version then names it (one
            that came after a version naming it is never found)."""
            return not any(event.id in e.body.parents for e in appended if seq_of[e.id] <= as_of)

        head = mem.views.checkpoint()
        assert found(head) == expected(head)  # the kept heads
        for as_of in range(1, head + 1):
            assert found(as_of) == expected(as_of)  # the statement over every version then
            for index, event in events.items():
                if seq_of[event.id] <= as_of and not isinstance(event.body, PageDelete):
                    hits = search.search(mem.views, f"v{index}", as_of=as_of, day="2026-11-30", include_all=True)
                    assert [h.seq for h in hits] == ([seq_of[event.id]] if current(event, as_of) else []), as_of


def test_search_flags_a_conflicts_losing_head_whose_text_the_file_does_not_hold(team):
    """Regression: both heads of a conflict were hits citing the shared file, unflagged, though the file holds only
    the winner's text: an agent quoting the loser's hit cited words the file does not contain."""
    team.conflict("pricing", "Pricing", "base", "pricing by the {agent} zebrafish")
    hits = json.loads(team.mem("writer", "search", "zebrafish", "--layer", "drafts", "--json", check=True).stdout)
    shown = (team.root / "writer" / PRICING).read_text()
    assert len(hits) == 2
    for hit in hits:
        in_file = hit["snippet"].replace("**", "").split("the ")[-1].split(" ")[0] in shown
        flagged = "conflict: not the version the file shows (`mem conflicts --show`)" in hit["flags"]
        assert in_file != flagged, (hit, shown)


def test_a_hand_edit_made_on_text_a_pulled_redaction_removed_is_not_adopted(team):
    """Regression: a redaction pulled from the hub left a hand edit of the shared page it changed adoptable, and
    `mem adopt` recorded the edited file, the redacted text in it, as a new version (as a local redaction did
    before nc14b). The pull now marks the file as a local redaction does."""
    team.mem("writer", "page", "write", "pricing", "--layer", "drafts",
             "--file", team.page("v1", "Pricing", "my home address is 12 lemur street"), check=True)
    team.mem("writer", "sync", check=True)
    team.mem("reviewer", "sync", check=True)
    with open(team.root / "reviewer" / PRICING, "a") as edited:
        edited.write("the reviewer's line\n")
    version = next(e["id"] for e in json.loads(team.mem("writer", "log", "--kind", "page.ingest", "--json",
                                                        check=True).stdout))
    team.mem("writer", "redact", version, "--reason", "pii", "--yes", check=True)
    team.mem("writer", "sync", check=True)

    pulled = team.mem("reviewer", "pull", check=True)
    said = "the edit was made on text redacted since (pii) and may hold it, so `mem adopt` does not take it"
    assert f"not written: {PRICING} was edited by hand, but {said}" in pulled.stderr.decode(), pulled.stderr
    status = json.loads(team.mem("reviewer", "status", "--json", check=True).stdout)
    assert status["skipped"] == [PRICING]
    events = len(log_rows(team.root / "reviewer"))
    adopted = team.mem("reviewer", "adopt")
    assert adopted.returncode == 1 and f"left {PRICING}: {said}" in adopted.stdout.decode(), adopted
    assert len(log_rows(team.root / "reviewer")) == events
    assert b"lemur" not in team.mem("reviewer", "search", "lemur", "--json", check=True).stdout


def test_every_agent_lists_the_same_versions_of_a_shared_page_whatever_order_they_came_in(team):
    """Regression (nc15b): `mem history` of a shared page listed the versions after which the winner changed, so the
    agent whose own side of a conflict stayed the winner left the other side out: the agents' lists differed."""
    team.mem("writer", "page", "write", "pricing", "--layer", "drafts", "--file", team.page("v1", "Pricing", "v1"),
             check=True)
    for agent in ("writer", "reviewer"):
        team.mem(agent, "sync", check=True)
    for agent in ("writer", "reviewer"):
        team.mem(agent, "page", "write", "pricing", "--layer", "drafts",
                 "--file", team.page(f"v2-{agent}", "Pricing", f"v2 by the {agent}"), check=True)
    for agent in ("writer", "reviewer", "writer"):
        team.mem(agent, "sync", check=True)
    listed = {}
    for agent in ("writer", "reviewer"):
        versions = json.loads(team.mem(agent, "history", PRICING, "--json", check=True).stdout)
        listed[agent] = sorted((v["agent"], v["kind"], v["deleted"]) for v in versions)
    assert listed["writer"] == listed["reviewer"] == [("reviewer", "page.update", False),
                                                      ("writer", "page.ingest", False),
                                                      ("writer", "page.update", False)], listed
    # regression (nc16a): the side the reviewer's file never showed read as a version `mem show --seq` would show
    hidden = [v for v in json.loads(team.mem("reviewer", "history", PRICING, "--json", check=True).stdout)
              if v.get("shown") is False]
    assert [(v["agent"], v["kind"]) for v in hidden] == [("writer", "page.update")], hidden
    text = team.mem("reviewer", "history", PRICING, check=True).stdout.decode()
    assert text.count("(not shown: the other side of a conflict)") == 1, text
    named = team.mem("reviewer", "history", "drafts/pricing", check=True)  # regression (nc16b): "never existed"
    assert named.stdout.decode() == text
    assert team.mem("reviewer", "show", "drafts/pricing", check=True).stdout == (team.root / "reviewer" /
                                                                                  PRICING).read_bytes()
    heads = heads_everywhere(team)
    assert heads["writer"] == heads["reviewer"] and len(heads["writer"][0]["heads"]) == 2


def test_a_pulled_redaction_of_another_page_leaves_a_hand_edit_adoptable(team):
    """The mark a pulled redaction sets is for the files whose page it took a version of: a hand edit of another page
    of the layer, which the same pull updated, is left as any hand edit is (`mem adopt` keeps it)."""
    for slug, text in (("pricing", "v1"), ("memo", "my home address is 12 lemur street")):
        team.mem("writer", "page", "write", slug, "--layer", "drafts", "--file", team.page(slug, slug.title(), text),
                 check=True)
    team.mem("writer", "sync", check=True)
    team.mem("reviewer", "sync", check=True)
    with open(team.root / "reviewer" / PRICING, "a") as edited:
        edited.write("the reviewer's line\n")
    team.mem("writer", "page", "write", "pricing", "--layer", "drafts", "--file", team.page("v2", "Pricing", "v2"),
             check=True)
    memo = next(e["id"] for e in json.loads(team.mem("writer", "log", "--kind", "page.ingest", "--json",
                                                     check=True).stdout) if e["body"]["slug"] == "memo")
    team.mem("writer", "redact", memo, "--reason", "pii", "--yes", check=True)
    team.mem("writer", "sync", check=True)
    pulled = team.mem("reviewer", "pull", check=True).stderr.decode()
    assert f"not written: {PRICING} was edited by hand; `mem adopt` keeps the edit" in pulled, pulled
    assert "lemur" not in (team.root / "reviewer/content/drafts/memo.md").read_text()


def test_a_page_two_agents_delete_at_once_is_deleted_not_a_conflict_and_can_be_written_anew(team):
    """Regression (nc29b): two deletes of one page at once were a conflict between two deletions, listed by `mem
    conflicts` (exit 1) on every replica and warned of at the pull ("its file shows..."; there was no file), which
    `mem page delete` could not clear ("there is no page"). Both deleted it: nothing to choose. Written anew, the
    page supersedes both deletions, not one of them (that was a conflict again)."""
    page = team.page("plan", "Plan", "first")
    team.mem("writer", "page", "write", "plan", "--layer", "drafts", "--file", page, check=True)
    for agent in ("writer", "reviewer"):
        team.mem(agent, "sync", check=True)
    for agent in ("writer", "reviewer"):
        team.mem(agent, "page", "delete", "plan", "--layer", "drafts", check=True)
    for agent in ("writer", "reviewer", "writer"):
        synced = team.mem(agent, "sync", check=True)
        assert b"conflict" not in synced.stderr, synced.stderr
    for agent in ("writer", "reviewer"):
        listed = team.mem(agent, "conflicts", "--json")
        assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed
        assert b"not shown" not in team.mem(agent, "history", "drafts/plan", check=True).stdout  # (nc30a)
    team.mem("reviewer", "page", "write", "plan", "--layer", "drafts", "--file", page, check=True)
    for agent in ("reviewer", "writer"):
        team.mem(agent, "sync", check=True)
        assert team.mem(agent, "conflicts").returncode == 0
        assert (team.root / agent / "content/drafts/plan.md").read_text().endswith("first\n")


def test_a_layers_pages_are_listed_as_of_a_moment(team):
    """Regression (nc29a): `mem page list --layer L --seq N` was refused, though the README lists `page list` among
    the reads that take --at or --seq."""
    team.mem("writer", "page", "write", "plan", "--layer", "drafts", "--file", team.page("plan", "Plan", "x"),
             check=True)
    then = len(log_rows(team.root / "writer"))
    team.mem("writer", "page", "write", "launch", "--layer", "drafts", "--file", team.page("launch", "Launch", "y"),
             check=True)
    team.mem("writer", "page", "delete", "plan", "--layer", "drafts", check=True)
    listed = {seq: [p["slug"] for p in json.loads(team.mem("writer", "page", "list", "--layer", "drafts", "--seq",
                                                           str(seq), "--json", check=True).stdout)]
              for seq in (then, then + 1, then + 2)}
    assert listed == {then: ["plan"], then + 1: ["launch", "plan"], then + 2: ["launch"]}
    assert team.mem("writer", "page", "list", "--layer", "drafts", "--json", check=True).stdout == team.mem(
        "writer", "page", "list", "--layer", "drafts", "--seq", str(then + 2), "--json", check=True).stdout


def test_a_conflict_left_in_a_layer_the_contract_dropped_is_no_longer_listed(team):
    """Regression: a conflict open when its layer was dropped from the contract stayed in `mem conflicts` (exit 1)
    and `mem status` for good, with no way to resolve it (the layer is gone); its past stays readable by --seq."""
    from teamhub import CONTRACT

    team.conflict("plan", "Plan", "base", "by {agent}")
    before = len(log_rows(team.root / "writer"))
    assert team.mem("writer", "conflicts").returncode == 1
    team.apply(CONTRACT.split("[layers.drafts]")[0])
    for agent in team.agents:
        team.mem(agent, "pull", check=True)
        listed = team.mem(agent, "conflicts", "--json")
        assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed
        assert json.loads(team.mem(agent, "status", "--json", check=True).stdout)["conflicts"] == []
    then = team.mem("writer", "show", "content/drafts/plan.md", "--seq", str(before), check=True).stdout.decode()
    assert "by " in then


def test_a_pages_layers_folder_moved_aside_is_not_taken_as_the_deletion_of_its_pages(team):
    """Regression (nc31a): `mv content/drafts content/drafts.bak` under `mem adopt` or `mem watch` deleted every
    shared page of the layer, and the next sync deleted them from every agent. It is reported, nothing recorded."""
    for slug in ("p", "q"):
        team.mem("writer", "page", "write", slug, "--layer", "drafts", "--file", team.page(slug, slug.upper(), "x"),
                 check=True)
    team.mem("writer", "sync", check=True)
    rows = log_rows(team.root / "writer")
    drafts = team.root / "writer/content/drafts"
    drafts.rename(drafts.with_name("drafts.bak"))
    adopted = team.mem("writer", "adopt")
    assert adopted.returncode == 1 and adopted.stdout.decode() == (
        "left content/drafts/: the folder is gone, with its 2 page(s): not taken as their deletion (put it back, or "
        "`mem replay` writes it again from the log)\n"), adopted
    assert log_rows(team.root / "writer") == rows


def test_a_pull_writes_no_page_into_a_pages_layers_folder_moved_aside(team):
    """Regression (nc31a): a pull bringing a page of a layer whose folder was moved aside made the folder again
    holding that page alone, and the next `mem adopt` took the others for deleted (and sync spread it). The page
    waits, said by the pull and by `mem status`; the folder put back, the next command writes it; `mem replay`
    writes the folder again."""
    for slug in ("p", "q"):
        team.mem("writer", "page", "write", slug, "--layer", "drafts", "--file", team.page(slug, slug.upper(), "x"),
                 check=True)
    team.mem("writer", "sync", check=True)
    team.mem("reviewer", "sync", check=True)
    drafts = team.root / "reviewer/content/drafts"
    drafts.rename(drafts.with_name("drafts.bak"))
    team.mem("writer", "page", "write", "r", "--layer", "drafts", "--file", team.page("r", "R", "x"), check=True)
    team.mem("writer", "sync", check=True)
    pulled = team.mem("reviewer", "pull", check=True)
    assert ("not written: content/drafts/r.md: its folder content/drafts/ is gone, with the pages mindlog wrote "
            "there (moved aside?): put it back, or `mem replay` writes it again from the log") in pulled.stderr.decode()
    assert not drafts.exists()
    status = team.mem("reviewer", "status", check=True).stdout.decode()
    assert "folder gone:     content/drafts/ (3 file(s) mindlog writes there; moved aside?" in status
    assert "missing:" not in status and "not yet written:" not in status
    assert json.loads(team.mem("reviewer", "status", "--json", check=True).stdout)["folders_gone"] == {
        "content/drafts/": 3}
    later = team.mem("reviewer", "show", "mind.md").stderr.decode()  # nc33a: not "not overwriting hand-edited"
    assert later == ("warning: not writing content/drafts/r.md: its folder is gone (moved aside?); put it back, or "
                     "`mem replay` writes it again from the log (see `mem status`)\n"), later
    rows = log_rows(team.root / "reviewer")
    team.apply(CONTRACT.replace('producers = ["researcher", "writer", "reviewer"]', 'producers = ["*"]'))
    team.mem("reviewer", "pull", check=True)
    written = team.mem("reviewer", "page", "write", "s", "--layer", "drafts", "--file", team.page("s", "S", "x"))
    assert written.returncode == 1 and written.stderr.decode().endswith(  # nc33a: recorded, exit 0, unsaid
        "error: content/drafts/ is gone, with its 3 page(s) (moved aside?): put it back, or `mem replay` writes it "
        "again from the log (`mkdir content/drafts` then `mem adopt` records their deletion); then write again\n"), written
    assert log_rows(team.root / "reviewer") == rows  # a change of producers records nothing
    rows = log_rows(team.root / "reviewer")
    assert team.mem("reviewer", "adopt").returncode == 1 and log_rows(team.root / "reviewer") == rows
    drafts.with_name("drafts.bak").rename(drafts)
    assert team.mem("reviewer", "adopt", check=True).stdout == b"nothing edited by hand\n"
    assert sorted(p.name for p in drafts.iterdir()) == ["p.md", "q.md", "r.md"]
    assert log_rows(team.root / "reviewer") == rows
    drafts.rename(drafts.with_name("drafts.bak"))
    team.mem("reviewer", "replay", check=True)
    assert sorted(p.name for p in drafts.iterdir()) == ["p.md", "q.md", "r.md"]
    assert "clean" in team.mem("reviewer", "status", check=True).stdout.decode()


def test_a_push_past_the_hubs_request_limit_goes_in_several_requests(team):
    """Regression (nc32b, high): a push was cut into batches of 5,000 events by count alone; 20 pages of 900 KB (each
    under the page limit) made one request past the hub's 16 MiB, refused at every push for good. Each request now
    carries at most half the hub's limit, and every page reaches the other agents."""
    from sync.wire import MAX_REQUEST_BYTES

    prose = "lorem ipsum dolor sit amet " * 3 + "\n"  # 900 KB of lines, as a long page has (quick to scan)
    with Memory.open(team.root / "writer") as memory:
        for i in range(20):
            memory.shared_page_write("drafts", f"big-{i}", PAGE.format(title=f"Big {i}", text=prose * 11_000).encode())
    assert 20 * len(prose) * 11_000 > MAX_REQUEST_BYTES
    pushed = team.mem("writer", "push")
    assert pushed.returncode == 0 and pushed.stdout == b"pushed 20 events to origin\n", pushed
    team.mem("reviewer", "pull", check=True)
    drafts = team.root / "reviewer/content/drafts"
    assert sorted(p.name for p in drafts.iterdir()) == sorted(f"big-{i}.md" for i in range(20))
    assert (drafts / "big-7.md").read_text().count("lorem") == 33_000


def test_a_page_command_given_layer_and_slug_names_the_layer_option(team):
    """Regression (nc33b): `mem page write drafts/launch` (the LAYER/SLUG `mem show` and `mem history` take) was
    refused as a slug holding a path separator, with no word of --layer; nothing is written either way."""
    rows = log_rows(team.root / "writer")
    page = team.page("launch", "Launch", "Tuesday")
    for args, said in ((["write", "drafts/launch", "--file", page],
                        "`mem page write launch --file FILE --layer drafts` writes it"),
                       (["delete", "drafts/launch"], "`mem page delete launch --layer drafts` deletes it"),
                       (["rename", "drafts/launch", "drafts/go"], "`mem page rename launch go --layer drafts` renames it")):
        refused = team.mem("writer", "page", *args)
        assert refused.returncode == 2 and refused.stderr.decode() == (
            f"error: drafts/launch names page launch of layer drafts: {said}\n"), refused
    assert log_rows(team.root / "writer") == rows


def test_history_says_when_each_version_was_made_as_well_as_when_this_copy_recorded_it(team):
    """Regression (nc34b): an agent that caught up later read from its history every version as written at its own
    pull (`recorded_at` alone): `made_at` is when the version's agent made it, the same on every copy."""
    team.mem("writer", "page", "write", "pricing", "--layer", "drafts", "--file", team.page("v1", "Pricing", "v1"),
             check=True)
    team.mem("writer", "sync", check=True)
    time.sleep(0.05)
    team.mem("reviewer", "sync", check=True)
    [written], [pulled] = (json.loads(team.mem(agent, "history", PRICING, "--json", check=True).stdout)
                           for agent in ("writer", "reviewer"))
    assert pulled["made_at"] == written["made_at"] <= written["recorded_at"] < pulled["recorded_at"], (written, pulled)


def test_a_shared_page_in_conflict_is_not_renamed_until_it_is_resolved(team):
    """Regression (nc35a): a rename's delete superseded every head of a page in conflict: the renamed page kept the
    winner's text alone, the other version dropped without a word, `mem conflicts` empty. It is refused, the log
    untouched, until the page is resolved."""
    team.conflict("plan", "Plan", "base", "{agent} says")
    before = log_rows(team.root / "reviewer")
    refused = team.mem("reviewer", "page", "rename", "plan", "plan-2", "--layer", "drafts")
    assert refused.returncode == 1 and refused.stderr.decode() == (
        "error: drafts/plan is in conflict (2 heads): renamed, it would keep the winner's text alone; resolve it "
        "first (`mem resolve drafts/plan --file F`)\n"), refused.stderr
    assert log_rows(team.root / "reviewer") == before
    team.mem("reviewer", "resolve", "drafts/plan", "--file", team.page("both", "Plan", "both say"), check=True)
    team.mem("reviewer", "page", "rename", "plan", "plan-2", "--layer", "drafts", check=True)


def test_a_shared_page_written_again_by_hand_after_its_delete_is_adopted_as_written_by_hand(team):
    """Regression (nc36a): the note was "edited in place" for a shared page deleted before (its winner a delete)."""
    team.mem("writer", "page", "write", "pricing", "--layer", "drafts", "--file", team.page("v1", "Pricing", "v1"),
             check=True)
    team.mem("writer", "page", "delete", "pricing", "--layer", "drafts", check=True)
    (team.root / "writer" / PRICING).write_text(team.page("v2", "Pricing", "again").read_text())
    team.mem("writer", "adopt", check=True)
    last = json.loads(team.mem("writer", "log", "--json", check=True).stdout)[-1]
    assert last["body"]["note"] == "written by hand", last
