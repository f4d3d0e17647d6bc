"""A hub restored from a backup lost events it had acknowledged and handed out, and hands their positions out again,
to other events. Each agent notices by asking the hub whether it still holds, at its position, the last event it
pushed and the last it pulled: a push then sends this agent's events again, a pull begins from the hub's start, each
said in one line, and the team converges by itself (regression: every agent said it was in step, diverged for good)."""

import json
import shutil
import sqlite3

import httpx
import pytest
from hypothesis import given, strategies as st

from conftest import run_mem
from projections.memory import Memory
from sync.client import HubClient, get_remote, push
from sync.marks import KEPT, Mark, with_mark
from teamhub import Team

INSIGHTS = """
[layers.insights]
path = "memory/insights.md"
format = "entries"
producers = ["*"]
consumers = ["*"]
"""


@pytest.fixture
def team(tmp_path):
    team = Team(tmp_path, agents=("alice", "bob", "carol"), contract=INSIGHTS)
    yield team
    team.stop()


def entry(team: Team, agent: str, text: str) -> None:
    team.mem(agent, "entry", "add", "insights", f"[FACT] 2026-11-30: {text}", check=True)


def backup(team: Team) -> None:
    live, copy = sqlite3.connect(team.db), sqlite3.connect(team.root / "backup.db")
    live.backup(copy)
    live.close()
    copy.close()


def restore(team: Team) -> None:
    """The hub stopped, its database replaced by the backup, served again on the same port."""
    team.server.stop()
    shutil.copy(team.root / "backup.db", team.db)
    for suffix in ("-wal", "-shm"):
        (team.root / f"hub.db{suffix}").unlink(missing_ok=True)
    team.server.start()


def insights(team: Team, agent: str) -> str:
    return (team.root / agent / "memory/insights.md").read_text()


def warning(result) -> str:
    """The one line a command said on stderr (it succeeded)."""
    err = result.stderr.decode()
    assert result.returncode == 0 and len(err.splitlines()) == 1 and err.startswith("warning: "), err
    return err


def pulled_then_lost(team: Team) -> None:
    """alice pushes E1, the hub is backed up, alice pushes E2, bob pulls both (hub positions 2 and 3), and the hub is
    restored from the backup: it lost E2."""
    entry(team, "alice", "E1 before the backup")
    team.mem("alice", "push", check=True)
    backup(team)
    entry(team, "alice", "E2 after the backup")
    team.mem("alice", "push", check=True)
    team.mem("bob", "pull", check=True)
    restore(team)


def test_a_restored_hub_gets_back_what_it_lost_and_every_agent_converges(team):
    pulled_then_lost(team)
    entry(team, "carol", "E3 after the restore")
    team.mem("carol", "push", check=True)  # the hub hands position 3 out again, to E3

    status = team.mem("bob", "status", "--fetch", check=True).stdout.decode()
    assert "lost events this workspace pulled from it" in status and "behind the hub: 0" not in status, status
    err = warning(pulled := team.mem("bob", "pull"))
    assert "lost events this workspace pulled from it" in err and "pulling again from its start" in err
    assert "pulled 1 event from origin (1 already here)" in pulled.stdout.decode()
    assert "E3 after the restore" in insights(team, "bob")

    status = team.mem("alice", "status", "--fetch", check=True).stdout.decode()
    assert "lost events this workspace pushed to it" in status and "the next `mem push` sends" in status, status
    err = warning(pushed := team.mem("alice", "push"))
    assert "lost events this workspace pushed to it" in err and "sending this agent's events again" in err
    assert pushed.stdout.decode() == "pushed 1 event to origin\n"  # E2 alone: E1's push is where it starts again
    assert team.mem("alice", "push", check=True).stdout.decode() == "pushed 0 events to origin\n"

    for agent in ("alice", "bob", "carol"):
        assert team.mem(agent, "pull", check=True).stderr == b""
    assert insights(team, "alice") == insights(team, "bob") == insights(team, "carol")
    assert all(f"E{n} " in insights(team, "carol") for n in (1, 2, 3))
    for agent in ("alice", "bob", "carol"):
        status = team.mem(agent, "status", "--fetch", check=True).stdout.decode()
        assert "0 to push; behind the hub: 0 events" in status, status


def test_a_push_after_a_restore_sends_again_only_what_the_hub_lost(team):
    """Regression: it sent every event this agent had ever pushed (a long-lived agent's whole history)."""
    for n in range(8):
        entry(team, "alice", f"before the backup {n}")
        team.mem("alice", "push", check=True)
    backup(team)
    for n in range(2):
        entry(team, "alice", f"after the backup {n}")
        team.mem("alice", "push", check=True)
    restore(team)
    err = warning(pushed := team.mem("alice", "push"))
    assert "sending this agent's events again after seq 8, the last push it holds" in err, err
    assert pushed.stdout.decode() == "pushed 2 events to origin\n"
    team.mem("bob", "pull", check=True)
    assert insights(team, "bob") == insights(team, "alice")
    assert "after the backup 1" in insights(team, "bob")


def test_a_push_after_a_restore_older_than_every_mark_sends_everything_again(team):
    entry(team, "alice", "E1")
    backup(team)  # before any push: the hub holds none of alice's events
    team.mem("alice", "push", check=True)
    restore(team)
    err = warning(pushed := team.mem("alice", "push"))
    assert "sending this agent's events again from the first" in err, err
    assert pushed.stdout.decode() == "pushed 1 event to origin\n"


@pytest.mark.parametrize("backed_up", ["after E1", "before any push"])
def test_a_sync_that_brought_this_agents_own_events_back_still_sends_them_again_after_a_restore(team, backed_up):
    """Regression (nc28b): `mem sync` pulls an agent's own events back, and the pull marked them as brought by a
    hub, so never to be pushed; after a restore the push said it sent them again, sent none, and the team diverged
    for good (`mem status` clean, a newcomer without E2)."""
    if backed_up != "after E1":
        backup(team)
    entry(team, "alice", "E1")
    team.mem("alice", "sync", check=True)
    if backed_up == "after E1":
        backup(team)
    entry(team, "alice", "E2")
    assert "1 of this agent's own came back" in team.mem("alice", "sync", check=True).stdout.decode()
    team.mem("bob", "sync", check=True)
    restore(team)
    synced = team.mem("alice", "sync", check=True)
    assert "sending this agent's events again" in synced.stderr.decode()
    assert synced.stdout.decode().startswith("pushed 1," if backed_up == "after E1" else "pushed 2,"), synced.stdout
    team.mem("carol", "pull", check=True)
    assert insights(team, "carol") == insights(team, "alice") == insights(team, "bob")
    assert "E2" in insights(team, "carol")


def test_a_pull_after_a_restore_begins_again_at_the_last_pull_the_hub_still_holds(team):
    """Regression: it began from the hub's start (a consumer of a long-lived hub received everything again)."""
    entry(team, "alice", "E1 before the backup")
    team.mem("alice", "push", check=True)
    team.mem("bob", "pull", check=True)  # hub positions 1 (the contract) and 2
    backup(team)
    entry(team, "alice", "E2 after the backup")
    team.mem("alice", "push", check=True)
    team.mem("bob", "pull", check=True)  # position 3, lost with the restore
    restore(team)
    entry(team, "carol", "E3 after the restore")
    team.mem("carol", "push", check=True)
    err = warning(pulled := team.mem("bob", "pull"))
    assert "pulling again after hub position 2, the last pull it still holds" in err, err
    assert pulled.stdout.decode() == "pulled 1 event from origin\n"  # E3 alone: nothing before it again
    team.mem("alice", "push", check=True)
    for agent in ("alice", "bob", "carol"):
        team.mem(agent, "pull", check=True)
    assert insights(team, "alice") == insights(team, "bob") == insights(team, "carol")
    assert all(f"E{n} " in insights(team, "bob") for n in (1, 2, 3))


def test_a_pull_that_begins_again_says_so_in_its_json(team):
    pulled_then_lost(team)
    report = json.loads(team.mem("bob", "pull", "--json", check=True).stdout)
    assert report["restarted"] is True and report["already_held"] == 1, report


def test_the_hub_refuses_a_cursor_past_its_head_and_never_believes_it(team):
    """A pull whose cursor names a position past the head (handed out before the restore) is refused, not recorded
    as received: `mem hub believed` claims nothing the agent may not hold."""
    pulled_then_lost(team)
    with Memory.open(team.root / "bob") as memory:
        cursor = memory.log.state("pull:origin")
        token = open(get_remote(memory, "origin").token_file).read().strip()
    answer = httpx.get(f"{team.url}/v1/pull", params={"cursor": cursor},
                       headers={"authorization": f"Bearer {token}"})
    assert answer.status_code == 409 and answer.json()["type"].endswith("/cursor-ahead"), answer.text
    assert "past this hub's last position 2" in answer.json()["detail"]
    believed = run_mem("hub", "believed", "bob", *team.hub, check=True).stdout.decode()
    assert believed.startswith("bob had received hub events up to position 0"), believed


def test_believed_calls_a_recorded_cursor_past_the_head_unknown(team):
    """Records an older hub kept of cursors past its head (restored from a backup, then pulled from with them)."""
    entry(team, "alice", "E1")
    team.mem("alice", "push", check=True)
    db = sqlite3.connect(team.db)
    db.execute("INSERT INTO hub_pulls (agent, cursor, at) VALUES ('bob', 9, 0)")
    db.commit()
    db.close()
    said = run_mem("hub", "believed", "bob", *team.hub, check=True).stdout.decode()
    assert said.splitlines() == ["bob's pull cursor recorded by this hub (hub position 9) is past its last position "
                                 "(2): the hub lost events (restored from a backup?), so what bob received is unknown "
                                 "until bob pulls again"]


@given(st.lists(st.integers(1, 1000), min_size=40, max_size=300))
def test_marks_keep_the_oldest_and_newest_and_one_near_any_point_in_between(steps):
    """Whatever a backup missed, the newest mark before it lies at most a few times as far back from the newest as
    the backup (what a push or pull sends again), with at most KEPT marks kept."""
    marks, at = [], 0
    for n, step in enumerate(steps):
        at += step
        marks = with_mark(marks, Mark(at=at, id=str(n), state={}))
        kept = [mark.at for mark in marks]
        assert len(kept) <= KEPT and kept == sorted(set(kept)) and kept[0] == steps[0] and kept[-1] == at
    for backup in range(kept[0], at + 1, max(1, at // 500)):
        start = max(k for k in kept if k <= backup)
        assert at - start <= 6 * (at - backup) + 2 * max(steps), (backup, kept)


def test_a_push_that_another_push_of_the_same_workspace_overtook_does_not_say_the_hub_lost_events(team):
    """Regression (nc28b): a push asked the hub whether it still held the last event pushed, then read that mark
    again to judge the answer; a concurrent push of the same workspace had moved it to an event the hub was not
    asked about, and the push warned of a restore that never happened and sent everything again."""
    entry(team, "alice", "E1")
    team.mem("alice", "push", check=True)

    class Overtaken(HubClient):
        def contract(self, holds=()):
            answer = super().contract(holds)
            entry(team, "alice", "E2 pushed by another process meanwhile")
            team.mem("alice", "push", check=True)
            return answer

    entry(team, "alice", "E3")
    said = []
    with Memory.open(team.root / "alice") as memory:
        remote = get_remote(memory, "origin")
        client = Overtaken.for_remote(remote)
        try:
            report = push(memory, remote, client, say=said.append)
        finally:
            client.close()
    assert said == [] and not report.resent
    team.mem("bob", "pull", check=True)
    assert [insights(team, "bob").count(f": {e}") for e in ("E1", "E2", "E3")] == [1, 1, 1]


def test_a_pull_cut_off_after_it_recorded_events_says_how_many_it_kept(team):
    """Regression (nc29b): a pull whose hub went away after its pages were recorded said only `cannot reach remote
    ...` (exit 1), and the next pull `pulled 0 events`: nobody was told that the events had landed."""
    from sync.client import HubUnreachable, pull

    for text in ("E1", "E2"):
        entry(team, "alice", text)
    team.mem("alice", "push", check=True)

    class CutOff(HubClient):
        def redactions_page(self, cursor="", limit=1000):
            raise HubUnreachable(f"cannot reach remote origin at {team.url}: Connection refused")

    with Memory.open(team.root / "bob") as memory:
        remote = get_remote(memory, "origin")
        client = CutOff.for_remote(remote)
        try:
            with pytest.raises(HubUnreachable) as raised:
                pull(memory, remote, client)
        finally:
            client.close()
    assert str(raised.value) == (f"cannot reach remote origin at {team.url}: Connection refused; the pull stopped "
                                 "after 2 events, which are recorded (the next pull goes on from there)")
    assert "E2" in insights(team, "bob")


def test_an_event_made_while_the_clock_was_a_day_ahead_is_held_back_and_the_rest_goes(team):
    """Regression (nc30a): the hub refuses an event id made more than a day after its clock, and refused the whole push
    for it: one write made while the clock was ahead stopped every push of the agent until the hub's clock caught up,
    `mem status` saying only "to push". It is held back saying until when; the rest goes."""
    import time as clock

    from eventstore.envelope import new_event
    from eventstore.ids import uuid7_layout, uuid_text
    from eventstore.kinds import EntryAppend

    ahead = int(clock.time() * 1000) + 2 * 86_400_000
    with Memory.open(team.root / "alice") as memory:  # an id made by a clock two days fast, not through uuid7()
        memory.log.append([new_event(EntryAppend(type="FACT", date="2026-11-30", content="from a fast clock"),
                                     agent="alice", layer="insights", id=uuid_text(uuid7_layout(ahead, 0, 7)))])
    entry(team, "alice", "E1 with the clock right")
    pushed = team.mem("alice", "push")
    err = pushed.stderr.decode()
    assert pushed.returncode == 1 and pushed.stdout == b"pushed 1 event to origin\n", pushed
    assert err.startswith("error: 1 event in layer insights cannot be pushed: it was made at ") and \
        "more than a day ahead of the hub's clock" in err and len(err.splitlines()) == 1, err
    assert "held back: 1 in insights: it was made at" in team.mem("alice", "status", check=True).stdout.decode()
    team.mem("bob", "pull", check=True)
    assert "E1 with the clock right" in insights(team, "bob") and "fast clock" not in insights(team, "bob")


DAYS_2 = 2 * 86_400_000


def pushed_with_a_clock(team: Team, agent: str, monkeypatch, skew: int):
    """A push by `agent` on a machine whose clock is `skew` ms off (the hub's is right)."""
    import sync.client

    right = sync.client.now_ms
    monkeypatch.setattr(sync.client, "now_ms", lambda: right() + skew)
    with Memory.open(team.root / agent) as memory:
        report = push(memory, get_remote(memory, "origin"))
    monkeypatch.setattr(sync.client, "now_ms", right)
    return report


def test_a_push_from_a_machine_whose_clock_is_behind_sends_the_events_made_with_a_right_clock(team, monkeypatch):
    """Regression (nc31a): checked against this machine's clock two days behind, an event made with a right clock was
    held back as made "more than a day ahead", though the hub, whose clock decides, takes it. A push goes by the hub's
    clock, which the contract it asks first tells it."""
    entry(team, "alice", "E1 made with a right clock")
    report = pushed_with_a_clock(team, "alice", monkeypatch, -DAYS_2)
    assert (report.pushed, report.held) == (1, [])
    team.mem("bob", "pull", check=True)
    assert "E1 made with a right clock" in insights(team, "bob")


def test_a_push_from_a_machine_whose_clock_is_ahead_holds_back_what_it_made_and_sends_the_rest(team, monkeypatch):
    """Regression (nc31a): a machine whose clock is still two days fast cannot tell by its own clock that what it makes
    is ahead; the hub refused the whole push for those events, the ones made with a right clock too, at every push
    until the clock was put right. Going by the hub's clock, the push holds them back, says until when, and sends the
    rest."""
    import time as clock

    from eventstore.envelope import new_event
    from eventstore.ids import uuid7_layout, uuid_text
    from eventstore.kinds import EntryAppend

    entry(team, "alice", "E1 made with a right clock")
    fast = int(clock.time() * 1000) + DAYS_2
    with Memory.open(team.root / "alice") as memory:  # as `mem entry add` makes it on the fast machine
        memory.log.append([new_event(EntryAppend(type="FACT", date="2026-12-02", content="made while fast"),
                                     agent="alice", layer="insights", id=uuid_text(uuid7_layout(fast, 0, 7)))])
    report = pushed_with_a_clock(team, "alice", monkeypatch, DAYS_2)
    [held] = report.held
    assert report.pushed == 1 and held.count == 1 and held.layer == "insights", report
    assert "more than a day ahead of the hub's clock (this machine's clock was ahead when it was made)" in held.why
    team.mem("bob", "pull", check=True)
    assert "E1 made with a right clock" in insights(team, "bob") and "made while fast" not in insights(team, "bob")


def test_a_reversal_of_an_entry_made_ahead_of_the_hubs_clock_is_held_back_with_it_and_the_rest_goes(team):
    """Regression (nc35a): an entry made while the clock was two days fast is held back, but a reversal of it made
    with a right clock was sent, and the hub refused the whole push for it (no such entry to reverse) until its clock
    passed the fast one: nothing else of the agent went meanwhile. It is held back with what it names."""
    import time as clock

    from eventstore.envelope import new_event
    from eventstore.ids import uuid7_layout, uuid_text
    from eventstore.kinds import EntryAppend
    from sync.client import outgoing

    fast = new_event(EntryAppend(type="FACT", date="2026-12-04", content="made fast"), agent="alice",
                     layer="insights", id=uuid_text(uuid7_layout(int(clock.time() * 1000) + DAYS_2, 0, 7)))
    with Memory.open(team.root / "alice") as memory:
        memory.log.append([fast])
    team.mem("alice", "entry", "add", "insights", "[FACT] 2026-12-04: made fast was wrong", "--reverses", fast.id,
             check=True)
    entry(team, "alice", "unrelated")
    with Memory.open(team.root / "alice") as memory:  # nc36a: status counted the reversal to push, as a push did not
        to_push, held = outgoing(memory, get_remote(memory, "origin"))
    assert to_push == 1 and sum(h.count for h in held) == 2, held
    pushed = team.mem("alice", "push")
    assert pushed.returncode == 1 and pushed.stdout == b"pushed 1 event to origin\n", pushed
    said = pushed.stderr.decode()
    assert "which is held back too: it goes once that one does" in said, said
    team.mem("bob", "pull", check=True)
    assert "unrelated" in insights(team, "bob") and "made fast" not in insights(team, "bob")


def test_status_judges_made_ahead_by_the_hubs_clock_as_the_last_push_found_it(team, monkeypatch):
    """Regression (nc35a): `mem status` judged "made more than a day ahead" by this machine's clock while a push went
    by the hub's: on a slow machine it said held back what a push sends, on a fast one "to push" what a push holds."""
    import sync.client
    from sync.client import outgoing

    entry(team, "alice", "E1 made with a right clock")
    right = sync.client.now_ms
    monkeypatch.setattr(sync.client, "now_ms", lambda: right() - DAYS_2)  # this machine two days slow from now on
    with Memory.open(team.root / "alice") as memory:
        remote = get_remote(memory, "origin")
        assert outgoing(memory, remote)[1] != []  # by its own clock, before any push told it the hub's
        push(memory, remote)
        entry(team, "alice", "E2 made with a right clock")
        assert outgoing(memory, remote) == (1, [])  # by the hub's clock, as the push found it
