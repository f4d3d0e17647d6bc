"""Sync says what it did: remotes are checked, own events coming back are counted apart, what cannot be
pushed is named, `pull --follow` reports each batch, and the hub refuses entries without a real date."""

import json
import signal
import subprocess
import time

import httpx
import pytest

from conftest import log_rows, mem_command, run_mem
from teamhub import CONTRACT, Team


@pytest.fixture
def team(tmp_path):
    team = Team(tmp_path)
    yield team
    team.stop()


def test_remote_add_checks_the_agent_fetches_the_contract_and_lists(team, tmp_path):
    run_mem("init", "-w", tmp_path / "fresh", "--agent", "writer", check=True)
    wrong = run_mem("-w", tmp_path / "fresh", "remote", "add", "origin", team.url, "--token-file",
                    tmp_path / "reviewer.token")
    assert wrong.returncode == 1
    assert b"agent 'reviewer'" in wrong.stderr and b"--force" in wrong.stderr
    assert json.loads(run_mem("-w", tmp_path / "fresh", "remote", "list", "--json", check=True).stdout) == []

    added = run_mem("-w", tmp_path / "fresh", "remote", "add", "origin", team.url, "--token-file",
                    tmp_path / "writer.token", check=True)
    assert b"(agent writer)" in added.stdout
    # the contract came with it: a shared write works before any pull
    run_mem("-w", tmp_path / "fresh", "entry", "add", "insights", "[FACT] 2026-11-29: no pull needed", check=True)

    again = run_mem("-w", tmp_path / "fresh", "remote", "add", "origin", team.url + "/", "--token-file",
                    tmp_path / "writer.token", check=True)
    assert again.stdout.startswith(b"replaced remote origin's token (the same hub: its cursors are kept)\n"), again
    forced = run_mem("-w", tmp_path / "fresh", "remote", "add", "other", team.url, "--token-file",
                     tmp_path / "reviewer.token", "--force", check=True)
    assert b"(agent reviewer)" in forced.stdout
    names = [r["name"] for r in json.loads(run_mem("-w", tmp_path / "fresh", "remote", "list", "--json").stdout)]
    assert names == ["origin", "other"]
    assert b"removed remote other" in run_mem("-w", tmp_path / "fresh", "remote", "remove", "other",
                                              check=True).stdout
    gone = run_mem("-w", tmp_path / "fresh", "remote", "remove", "other")
    assert gone.returncode == 1 and b"no remote 'other'" in gone.stderr
    assert [r["name"] for r in json.loads(run_mem("-w", tmp_path / "fresh", "remote", "list", "--json").stdout)] \
        == ["origin"]
    # a token file swapped behind mindlog's back is caught on the next sync
    (tmp_path / "fresh.token").write_text((tmp_path / "writer.token").read_text())
    run_mem("-w", tmp_path / "fresh", "remote", "add", "swap", team.url, "--token-file", tmp_path / "fresh.token",
            check=True)
    (tmp_path / "fresh.token").write_text((tmp_path / "reviewer.token").read_text())
    rows = log_rows(tmp_path / "fresh")
    for command in ("pull", "push"):
        swapped = run_mem("-w", tmp_path / "fresh", command, "swap")
        assert swapped.returncode == 1 and b"now belongs to agent 'reviewer', not 'writer'" in swapped.stderr
    assert log_rows(tmp_path / "fresh") == rows


def test_own_events_coming_back_are_counted_apart(team):
    team.mem("writer", "entry", "add", "insights", "[FACT] only the writer wrote", check=True)
    synced = team.mem("writer", "sync", check=True).stdout.decode()
    assert synced.startswith("pushed 1, pulled 0 (origin)") and "1 of this agent's own came back" in synced
    report = json.loads(team.mem("writer", "pull", "--json", check=True).stdout)
    assert report["pulled"] == 0 and report["returned"] == 0
    assert json.loads(team.mem("reviewer", "pull", "--json", check=True).stdout)["pulled"] == 1


def test_events_already_held_are_counted_apart_from_own(team):
    """A remote added again (or another remote on the same hub) starts with no pull cursor: its pull brings
    back every event the log held, and said they were all "this agent's own" (a newcomer's 7 were other
    agents', none its own)."""
    for agent in ("writer", "researcher"):
        team.mem(agent, "entry", "add", "insights", f"[FACT] {agent} wrote this", check=True)
        team.mem(agent, "push", check=True)
    team.mem("reviewer", "entry", "add", "insights", "[FACT] reviewer wrote this", check=True)
    team.mem("reviewer", "sync", check=True)
    token = team.root / "reviewer.token"
    team.mem("reviewer", "remote", "remove", "origin", check=True)
    team.mem("reviewer", "remote", "add", "origin", team.url, "--token-file", token, check=True)
    pulled = team.mem("reviewer", "pull", check=True).stdout.decode()
    assert pulled == "pulled 0 events from origin (2 already here, and 1 of this agent's own came back)\n"
    team.mem("reviewer", "remote", "add", "again", team.url, "--token-file", token, check=True)
    report = json.loads(team.mem("reviewer", "pull", "again", "--json", check=True).stdout)
    assert (report["pulled"], report["returned"], report["already_held"]) == (0, 1, 2)
    team.mem("writer", "pull", check=True)
    team.mem("writer", "remote", "add", "again", team.url, "--token-file", team.root / "writer.token", check=True)
    synced = team.mem("writer", "sync", "again", check=True).stdout.decode()
    # its own event goes to a new remote too (the hub holds it already): its coming back from origin made it no hub's
    assert synced == "pushed 0 (1 already there), pulled 0 (again); 2 already here, 1 of this agent's own came back\n"


def test_hub_believed_shows_a_redacted_event_as_mem_log_does(team):
    """`mem hub believed` listed a redacted event with an empty description where `mem log` said what it was."""
    added = team.mem("writer", "entry", "add", "insights", "[FACT] a secret-ish fact", check=True)
    team.mem("writer", "push", check=True)
    run_mem("hub", "redact", added.stdout.decode().split()[0], "--reason", "not ours to keep", *team.hub,
            check=True)
    team.mem("reviewer", "pull", check=True)
    logged = team.mem("reviewer", "log", "--layer", "insights", check=True).stdout.decode().splitlines()
    believed = run_mem("hub", "believed", "reviewer", *team.hub, check=True).stdout.decode().splitlines()
    described = "was entry.append: not ours to keep"
    assert [line for line in logged if "redacted" in line][0].endswith(described), logged
    assert [line for line in believed if "redacted" in line][0].endswith(described), believed


def test_push_names_what_the_contract_keeps_back(team):
    page = team.page("p", "Pricing", "v1")
    team.mem("writer", "page", "write", "pricing", "--layer", "drafts", "--file", page, check=True)
    team.apply(CONTRACT.replace('producers = ["researcher", "writer", "reviewer"]',
                                'producers = ["researcher", "reviewer"]'))
    pushed = team.mem("writer", "push")
    assert pushed.returncode == 1
    assert b"pushed 0 events" in pushed.stdout
    assert b"1 event in layer drafts cannot be pushed" in pushed.stderr and b"producers of 'drafts'" in pushed.stderr
    assert team.mem("writer", "sync").returncode == 1
    assert json.loads(team.mem("reviewer", "pull", "--json", check=True).stdout)["pulled"] == 0
    # given back the right, the held event goes out on the next push
    team.apply(CONTRACT)
    assert json.loads(team.mem("writer", "push", "--json", check=True).stdout)["pushed"] == 1
    assert json.loads(team.mem("reviewer", "pull", "--json", check=True).stdout)["pulled"] == 1
    assert "v1" in (team.root / "reviewer/content/drafts/pricing.md").read_text()



def test_a_consumer_whose_contract_copy_was_tampered_is_told_it_is_no_producer(tmp_path):
    """Regression: a consumer whose `.mem/contract.json` was edited to make it a producer was told the hub's contract
    'no longer lists' it, as if it once did; and an event in a layer the hub never had was 'no longer in' it."""
    team = Team(tmp_path, agents=("writer", "reader"))
    try:
        team.mem("reader", "sync", check=True)
        copy = tmp_path / "reader/.mem/contract.json"
        copy.write_text(copy.read_text().replace('"researcher"', '"reader","researcher"'))
        team.mem("reader", "page", "write", "launch", "--layer", "drafts", "--file", team.page("l", "Launch", "v1"),
                 check=True)
        why = "the hub's contract does not list 'reader' among the producers of 'drafts'"
        pushed = team.mem("reader", "push")
        assert (pushed.returncode, pushed.stderr.decode()) == (
            1, f"error: 1 event in layer drafts cannot be pushed: {why}\n")
        assert f"  held back: 1 in drafts: {why}\n" in team.mem("reader", "status", check=True).stdout.decode()
        copy.write_text(copy.read_text().replace('"layers":{', '"layers":{"news":{"path":"news.md","format":'
                                                 '"entries","producers":["*"],"consumers":["*"]},'))
        team.mem("reader", "entry", "add", "news", "[FACT] 2026-12-02: never in the hub's contract", check=True)
        pushed = team.mem("reader", "push")
        assert "1 event in layer news cannot be pushed: the hub's contract has no layer 'news'\n" in (
            pushed.stderr.decode()), pushed.stderr
    finally:
        team.stop()

def test_pull_follow_prints_a_line_per_batch(team):
    team.mem("reviewer", "pull", check=True)
    follower = subprocess.Popen([*mem_command(), "-w", team.root / "reviewer", "pull", "--follow"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)
        for n in range(2):
            team.mem("writer", "entry", "add", "insights", f"[FACT] batch {n}", check=True)
            team.mem("writer", "push", check=True)
            target = team.root / "reviewer/memory/insights.md"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (target.exists() and f"batch {n}" in target.read_text()):
                time.sleep(0.1)
    finally:
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=30)
    lines = [line for line in out.decode().splitlines() if line.startswith("pulled 1 event up to hub position")]
    assert len(lines) == 2, (out, err)


def test_the_hub_refuses_an_entry_without_a_real_date(team):
    import msgspec

    from eventstore.envelope import new_event
    from eventstore.kinds import EntryAppend

    token = (team.root / "writer.token").read_text().strip()
    for date in ("2026-13-45", "2026-02-30", "2026-1-5", "yesterday"):
        event = new_event(EntryAppend(type="FACT", date=date, content="x"), agent="writer", layer="insights")
        body = msgspec.json.encode({"events": [event]})
        answer = httpx.post(team.url + "/v1/push", content=body, headers={"authorization": f"Bearer {token}",
                                                                          "content-type": "application/json"})
        assert answer.status_code == 422, (date, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["type"].endswith("/invalid-input") and date in answer.json()["detail"]
    assert json.loads(run_mem("hub", "believed", "writer", *team.hub, "--json", check=True).stdout)["events"] == []


def test_entries_carry_real_dates_locally(team):
    before = log_rows(team.root / "writer")
    for text in ("[FACT] 2026-13-45: x", "[LESSON] 2026-02-30: y", "[LESSON] 2026-1-5: z", "[FACT] 2026-11: w"):
        refused = team.mem("writer", "entry", "add", "insights", text)
        assert refused.returncode == 1 and b"error: entry date" in refused.stderr, (text, refused.stderr)
    assert log_rows(team.root / "writer") == before
    ok = team.mem("writer", "entry", "add", "insights", "[LESSON] 2028-02-29: leap day", check=True)
    assert b"[LESSON] 2028-02-29: leap day" in ok.stdout


def test_a_second_workspace_of_an_agent_never_pushes_what_it_pulled(team, tmp_path):
    """Events a pull brought are at the hub: a second workspace syncing as the same agent neither pushes
    them, nor counts them as waiting, nor holds them back when the contract stops it producing their layer."""
    page = team.page("p", "Pricing", "v1")
    team.mem("writer", "page", "write", "pricing", "--layer", "drafts", "--file", page, check=True)
    team.mem("writer", "entry", "add", "insights", "[FACT] 2026-11-29: the first workspace wrote this", check=True)
    team.mem("writer", "sync", check=True)
    team.apply(CONTRACT.replace('producers = ["researcher", "writer", "reviewer"]',
                                'producers = ["researcher", "reviewer"]'))
    second = tmp_path / "second"
    run_mem("init", "-w", second, "--agent", "writer", check=True)
    run_mem("-w", second, "remote", "add", "origin", team.url, "--token-file", tmp_path / "writer.token", check=True)
    run_mem("-w", second, "entry", "add", "insights", "[FACT] 2026-11-30: the second workspace wrote this", check=True)
    assert json.loads(run_mem("-w", second, "pull", "--json", check=True).stdout)["pulled"] == 2

    status = json.loads(run_mem("-w", second, "status", "--json", check=True).stdout)
    remote = status["remotes"][0]
    assert remote["unpushed"] == 1 and remote["held"] == []
    pushed = run_mem("-w", second, "push")
    assert pushed.returncode == 0, pushed.stderr
    assert pushed.stdout.startswith(b"pushed 1 event to") and b"cannot be pushed" not in pushed.stderr
    status = json.loads(run_mem("-w", second, "status", "--json", check=True).stdout)
    assert status["remotes"][0]["unpushed"] == 0 and status["remotes"][0]["held"] == []
    assert b"held back" not in run_mem("-w", second, "status", check=True).stdout
    # the first workspace gets the second's own entry; the second pushes nothing more
    assert json.loads(team.mem("writer", "pull", "--json", check=True).stdout)["pulled"] == 1
    assert run_mem("-w", second, "push", check=True).stdout.startswith(b"pushed 0 events")


def test_sync_returns_once_the_hub_has_committed_what_it_received(team):
    """`mem hub believed` right after `mem sync` shows the cursor the sync acknowledged (the hub used to
    commit pull records up to half a second later)."""
    from sync.storage import open_storage

    team.mem("reviewer", "entry", "add", "insights", "[FACT] 2026-11-29: the reviewer wrote this", check=True)
    team.mem("reviewer", "sync", check=True)
    for agent, text in (("writer", None), ("writer", "[FACT] 2026-11-30: the writer wrote this"),
                        ("reviewer", None)):
        if text:
            team.mem(agent, "entry", "add", "insights", text, check=True)
        team.mem(agent, "sync", check=True)
        hub = open_storage(str(team.db))
        try:
            assert hub.received_by(agent, None) == hub.head(), agent
        finally:
            hub.close()


def test_a_push_moves_its_cursor_only_past_the_batches_the_hub_committed(team, monkeypatch):
    """A push reads the next batch while the hub answers the last, but sends it only once that answer
    came: a refused batch leaves the cursor after the last one committed, and nothing after it goes out."""
    from eventstore.envelope import new_event
    from eventstore.kinds import EntryAppend
    from projections.memory import Memory
    from sync import client
    from sync.storage import open_storage

    monkeypatch.setattr(client, "BATCH", 3)
    secret = "the deploy key is AKIA4HXQ7ZT2LMNB3K5P"
    events = [new_event(EntryAppend(type="FACT", date="2026-11-29", content=secret if i == 7 else f"fact {i}"),
                        agent="writer", layer="insights") for i in range(11)]
    with Memory.open(team.root / "writer") as memory:
        memory.log.append(events)  # past mem's own secret check: the hub's refusal is what is under test
        remote = client.get_remote(memory, "origin")
        with pytest.raises(client.HubRefused) as refused:
            client.push(memory, remote, client.HubClient.for_remote(remote))
        cursor = int(memory.log.state("push:origin"))
        seqs = [memory.log.get(e.id).seq for e in events]
    assert refused.value.problem.type.endswith("/secret-detected")
    assert cursor == seqs[5]
    hub = open_storage(str(team.db))
    try:
        assert [e.id for e in hub.pull(0, ["insights"], 100)] == [e.id for e in events[:6]]
    finally:
        hub.close()


@pytest.mark.parametrize("digest_too", [True, False])
def test_push_refuses_an_event_the_log_no_longer_vouches_for(team, digest_too):
    """Regression (nc10c M0): an unsent entry's body changed in the log and its digest made anew (the digest function
    is public) was pushed, taken by the hub and pulled by the others, though `mem verify` flags the chain there. The
    push checks the chain of the rows after its cursor (and each sent event's digest) first: one line naming the seq,
    pointing at `mem verify`, nothing sent."""
    import hashlib
    import sqlite3

    from eventstore.envelope import compute_digest
    from eventstore.recorder import id_text

    team.mem("writer", "entry", "add", "insights", "[FACT] 2026-11-01: first fact", check=True)
    team.mem("writer", "push", check=True)
    team.mem("writer", "always", "add", "Cite seqs.", check=True)
    team.mem("writer", "entry", "add", "insights", "[FACT] 2026-11-01: two fact", check=True)
    with sqlite3.connect(team.root / "writer" / ".mem" / "log.db") as db:
        seq, id, ts, agent, layer, kind, body = db.execute(
            "SELECT seq, id, ts, agent, layer, kind, body FROM events WHERE layer = 'insights' "
            "ORDER BY seq DESC LIMIT 1").fetchone()
        body = bytes(body).replace(b"two fact", b"TWO fact")
        digest = compute_digest(id_text(bytes(id)), ts, agent, layer, kind, hashlib.sha256(body).digest())
        db.execute("UPDATE events SET body = ? WHERE seq = ?", (body, seq))
        if digest_too:
            db.execute("UPDATE events SET digest = ? WHERE seq = ?", (bytes.fromhex(digest), seq))
    assert team.mem("writer", "verify").returncode == 1
    pushed = team.mem("writer", "push")
    err = pushed.stderr.decode()
    assert pushed.returncode == 1 and err.count("\n") == 1, err
    assert err.startswith("error: nothing") and f"seq {seq}" in err and "`mem verify`" in err, err
    assert json.loads(team.mem("reviewer", "pull", "--json", check=True).stdout)["pulled"] == 1


def test_what_a_pull_brought_in_this_agents_name_is_pushed_to_no_other_remote(team, tmp_path):
    """Regression (nc19a): a hub handed over an event in this agent's name (it forged it, or another workspace of the
    agent wrote it), and `mem push` to another remote sent it on under this agent's token. A push sends only what
    this workspace wrote, to every remote; what a pull brought counts as nothing to push."""
    from eventstore.envelope import new_event
    from eventstore.kinds import EntryAppend
    from sync.storage import open_storage

    (tmp_path / "other").mkdir()
    other = Team(tmp_path / "other", agents=("writer",))
    try:
        forged = new_event(EntryAppend(type="FACT", date="2026-11-29", content="the first hub wrote this"),
                           agent="writer", layer="insights")
        hub = open_storage(str(team.db))
        hub.push([forged])
        hub.close()
        team.mem("writer", "pull", check=True)
        team.mem("writer", "remote", "add", "second", other.url, "--token-file", other.root / "writer.token",
                 check=True)
        team.mem("writer", "entry", "add", "insights", "[FACT] 2026-11-30: written here", check=True)
        status = json.loads(team.mem("writer", "status", "--json", check=True).stdout)
        assert {r["name"]: r["unpushed"] for r in status["remotes"]} == {"origin": 1, "second": 1}
        pushed = team.mem("writer", "push", "second", check=True)
        assert pushed.stdout.startswith(b"pushed 1 event to second"), pushed.stdout
        hub = open_storage(str(other.db))
        try:
            assert [e.body.content for e in hub.pull(0, ["insights"], 100)] == ["written here"]
        finally:
            hub.close()
    finally:
        other.stop()


def test_a_consumer_that_edited_a_shared_page_by_hand_is_told_how_to_put_it_back_not_to_adopt_it(tmp_path):
    """Regression (nc28b): a consumer that edited a shared page by hand was told "`mem adopt` keeps the edit", which
    refuses it (this agent does not produce the layer), and nothing named the way back."""
    team = Team(tmp_path, agents=("writer", "reader"))
    try:
        team.mem("writer", "page", "write", "plan", "--layer", "drafts", "--file", team.page("p", "Plan", "v1"),
                 check=True)
        team.mem("writer", "push", check=True)
        team.mem("reader", "pull", check=True)
        plan = tmp_path / "reader/content/drafts/plan.md"
        plan.write_text(plan.read_text() + "reader's hand edit\n")
        team.mem("writer", "page", "write", "plan", "--layer", "drafts", "--file", team.page("p2", "Plan", "v2"),
                 check=True)
        team.mem("writer", "push", check=True)
        why = ("this agent does not produce layer drafts, so `mem adopt` cannot keep the edit: "
               "`mem show content/drafts/plan.md > content/drafts/plan.md` puts the file back")
        pulled = team.mem("reader", "pull", check=True)
        assert f"not written: content/drafts/plan.md was edited by hand, but {why}\n" in pulled.stderr.decode()
        assert f"(edited by hand, but {why})" in team.mem("reader", "status", check=True).stdout.decode()
        shown = team.mem("reader", "show", "content/drafts/plan.md", check=True).stdout
        plan.write_bytes(shown)
        team.mem("reader", "pull", check=True)
        assert "v2" in plan.read_text() and "hand edit" not in plan.read_text()
        assert "clean: every file is what the log says" in team.mem("reader", "status", check=True).stdout.decode()
    finally:
        team.stop()
