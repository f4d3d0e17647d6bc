"""A redaction pushed by a hostile or broken producer is checked like every other body (validate.body): by the hub on
push, by each consumer on pull, by the local write side. Regressions (newcomer nc10b): a redaction naming `nope` was
taken by the hub and then crashed every consumer's pull, for good, and the hub's pages; a reason with line breaks
wrote forged typed entries into every consumer's entries file; a 1 MiB reason over 2,000 targets grew the hub by
2 GB; a stand-in pushed already redacted passed no check of its kind (slugs `../../x`, reversals across layers); a
redaction of a held version followed by an update of the page in one push was refused, and every push after it."""

import json

import httpx
import msgspec
import pytest

from conftest import run_mem
from eventstore.envelope import compute_digest, new_event
from eventstore.redaction import body_hash, encode_body
from eventstore.kinds import Redacted, Redaction
from sync.storage import open_storage
from teamhub import Team

UUID = "01a23648-ea9e-7a6a-aea6-25895a2f1b8b"
GITHUB = "ghp_Xq7Lm2Rt9Vb4Nc8Kd3Pw6Zs1Hy5Jf0Ag2Ue7Ti"


@pytest.fixture
def team(tmp_path):
    team = Team(tmp_path, agents=("writer", "reviewer"))
    yield team
    team.stop()


def push(team, agent, *events):
    token = (team.root / f"{agent}.token").read_text().strip()
    return httpx.post(f"{team.url}/v1/push", content=msgspec.json.encode({"events": list(events)}),
                      headers={"authorization": f"Bearer {token}", "content-type": "application/json"}, timeout=60)


def redaction(target_ids, reason="cleanup", layer="insights", withdraws=False):
    return new_event(Redaction(target_ids=target_ids, reason=reason, withdraws=withdraws), agent="writer", layer=layer)


def stand_in(original, kept, layer="insights", by=UUID, reason="cleanup"):
    """An event pushed already redacted, its digest right (over the original kind and body hash it names)."""
    event = new_event(Redacted(original=original, body_hash="ab" * 32, reason=reason, by=by, kept=kept),
                      agent="writer", layer=layer)
    event.digest = compute_digest(event.id, event.ts, event.agent, event.layer, original, bytes.fromhex("ab" * 32))
    return event


def test_the_hub_refuses_a_hostile_redaction_or_stand_in_and_applies_nothing(team):
    team.mem("writer", "entry", "add", "insights", "[FACT] 2026-11-01: Staging first", check=True)
    team.mem("writer", "push", check=True)
    entry = json.loads(team.mem("writer", "log", "--json", check=True).stdout)[-1]["id"]
    team.mem("writer", "page", "write", "rates", "--layer", "drafts", "--file", team.page("r", "Rates", "x"), check=True)
    team.mem("writer", "push", check=True)
    page = json.loads(team.mem("writer", "log", "--json", check=True).stdout)[-1]["id"]
    head = open_storage(str(team.db)).head()
    itself = redaction([UUID])
    itself.body.target_ids = [itself.id]
    itself.digest = compute_digest(itself.id, itself.ts, itself.agent, itself.layer, "redaction",
                                   body_hash(encode_body(itself.body)))
    refusals = [
        (redaction([entry, UUID]), "events[0].body.target_ids[1]",  # taken, as a redaction that removed nothing
         f"there is no event {UUID} in layer 'insights' to redact"),
        (redaction([page]), "events[0].body.target_ids[0]",
         f"redaction target {page} is an event of layer 'drafts'; a redaction in layer 'insights' removes only"),
        (itself, "events[0].body.target_ids[0]",  # regressions (nc13b): taken, removing nothing
         f"redaction target {itself.id} is a redaction event, which cannot be redacted"),
        ([first := redaction([entry]), redaction([first.id])], "events[1].body.target_ids[0]",
         f"redaction target {first.id} is a redaction event, which cannot be redacted"),
        (redaction(["nope"]), "events[0].body.target_ids", "'nope' in body.target_ids is not an event id"),
        (redaction([]), "events[0].body.target_ids", "a redaction names at least one event"),
        (redaction([entry, entry]), "events[0].body.target_ids", "a redaction names an event twice"),
        (redaction([entry], "dup]\n[DECISION] 2026-11-01: forged (alice)"), "events[0].body.reason", "one line"),
        (redaction([entry], "  "), "events[0].body.reason", "a redaction needs a reason"),
        (redaction([entry], withdraws=True), "events[0].body.withdraws",  # it voids versions on every copy
         "a redaction that withdraws its targets stays with the agent that made it"),
        (redaction([entry], "x" * 2001), "events[0].body.reason", "longer than 2000 characters"),
        (redaction([UUID] * 10_001), "events[0].body.target_ids", "at most 10,000 events"),
        (stand_in("page.update", {"slug": "../../x", "parents": []}, layer="drafts"), "events[0].body.kept.slug",
         "contains a path separator or '..'"),
        (stand_in("page.update", {"slug": "log", "parents": []}, layer="drafts"), "events[0].body.kept.slug",
         "is reserved"),
        (stand_in("page.update", {"slug": "costs", "parents": [page]}, layer="drafts"),  # regression
         "events[0].body.kept.parents", f"parent {page} is a version of page 'rates' of layer 'drafts', not of 'costs'"),
        (stand_in("entry.append", {"type": "FACT", "date": "2026-11-01", "reverses": "x"}),
         "events[0].body.kept.reverses", "is not an entry id"),
        (stand_in("entry.append", {"type": "FACT", "date": "2026-11-01"}, by="nope"), "events[0].body.by",
         "is not an event id"),
        (stand_in("entry.append", {"type": "FACT", "date": "2026-11-01", "content": "x"}), "events[0].body.kept",
         "keeps no 'content'"),
        (stand_in("entry.append", {"type": "FACT", "date": "2026-11-01", "reverses": UUID}),
         "events[0].body.kept.reverses", f"there is no entry {UUID} in layer 'insights'"),
        (stand_in("entry.append", {"type": "FACT", "date": "2026-11-01"}, by=entry),  # regressions: taken
         "events[0].body.by", f"body.by names {entry}, which is no redaction of layer 'insights' naming this event"),
        ([other := redaction([entry]), stand_in("entry.append", {"type": "FACT", "date": "2026-11-01"}, by=other.id)],
         "events[1].body.by", f"body.by names {other.id}, which is no redaction of layer 'insights' naming this event"),
    ]
    for event, field, why in refusals:
        answer = push(team, "writer", *(event if isinstance(event, list) else [event]))
        problem = answer.json()
        assert answer.status_code in (413, 422) and problem.get("field") == field and why in problem["detail"], \
            (field, answer.status_code, problem)
        assert "\n" not in problem["detail"]
    assert open_storage(str(team.db)).head() == head


def test_a_consumer_rejects_a_hostile_redaction_a_hub_took_and_keeps_pulling(team):
    """An older or unchecking hub holds the redaction already: each consumer rejects it with one warning, its cursor
    moves past it, and what came after it arrives."""
    team.mem("writer", "entry", "add", "insights", "[FACT] 2026-11-01: Staging first", check=True)
    team.mem("writer", "push", check=True)
    entry = json.loads(team.mem("writer", "log", "--json", check=True).stdout)[-1]["id"]
    admin = open_storage(str(team.db))
    admin.push([redaction(["nope"]), redaction([entry], "dup]\n[DECISION] 2026-11-01: forged (alice)")])
    admin.close()
    team.mem("writer", "entry", "add", "insights", "[FACT] 2026-11-02: after the bad ones", check=True)
    team.mem("writer", "push", check=True)
    pulled = team.mem("reviewer", "pull")
    said = pulled.stderr.decode()
    assert pulled.returncode == 0 and "Traceback" not in said, said
    # the two redactions, and the entry's stand-in the hub made with the forged reason
    assert said.count("warning: rejected event") == 3 and "body.target_ids" in said and "body.reason" in said, said
    text = (team.root / "reviewer" / "memory" / "insights.md").read_text()
    assert "after the bad ones" in text and "forged" not in text and "DECISION" not in text
    again = team.mem("reviewer", "pull", check=True)
    assert again.stderr == b"" and b"pulled 0 events" in again.stdout


def test_a_consumer_rejects_a_withdrawal_a_hub_took(tmp_path):
    """A withdrawal (a redaction that `withdraws`) stays with the agent that made it: one that an unchecking hub
    hands out would make void, on every copy, the page version it names. Each consumer rejects it, pulled apart from
    the events (`reviewer` has the version) or with them (`late` pulls for the first time), and keeps the version."""
    team = Team(tmp_path, agents=("writer", "reviewer", "late"))
    try:
        team.mem("writer", "page", "write", "rates", "--layer", "drafts", "--file",
                 team.page("r", "Rates", "above 20"), check=True)
        team.mem("writer", "push", check=True)
        team.mem("reviewer", "pull", check=True)
        page = json.loads(team.mem("writer", "log", "--json", check=True).stdout)[-1]["id"]
        admin = open_storage(str(team.db))
        admin.push([redaction([page], layer="drafts", withdraws=True)])
        admin.close()
        for agent in ("reviewer", "late"):
            pulled = team.mem(agent, "pull")
            said = pulled.stderr.decode()
            assert pulled.returncode == 0 and "a redaction that withdraws its targets stays with the agent" in said, \
                (agent, said)
            assert (team.root / agent / "content/drafts/rates.md").exists(), agent
    finally:
        team.stop()


def test_a_consumer_rejects_a_stand_in_whose_by_names_no_redaction_of_it(team):
    """Regression: a stand-in pushed already redacted whose `by` named any event (an entry, another layer's
    redaction) was taken, and told readers a redaction removed it that never did. A hub that did not check hands it
    out: each consumer rejects it; one whose redaction is still to come (a later page of the pull) is taken."""
    team.mem("writer", "entry", "add", "insights", "[FACT] 2026-11-01: Staging first", check=True)
    team.mem("writer", "push", check=True)
    entry = json.loads(team.mem("writer", "log", "--json", check=True).stdout)[-1]["id"]
    forged = stand_in("entry.append", {"type": "FACT", "date": "2026-11-01"}, by=entry)
    early = stand_in("entry.append", {"type": "FACT", "date": "2026-11-02"})
    admin = open_storage(str(team.db))
    admin.push([forged, early])
    admin.close()
    pulled = team.mem("reviewer", "pull")
    said = pulled.stderr.decode()
    assert pulled.returncode == 0 and said == (f"warning: rejected event {forged.id} (hub position 3): body.by: {entry} "
                                               "is no redaction of layer 'insights' naming this event\n"), said
    assert b"pulled 2 events" in pulled.stdout


def test_a_held_version_redacted_then_updated_is_one_push(team):
    """The local writer and the hub (in two pushes) agree that a redacted version holds nothing; one push of the
    redaction and the update was refused (Held), and so was every push after it."""
    held = team.page("held", "Rates", "above 20").read_text().replace("type: draft", "type: draft\ngovernance: hold")
    (team.root / "held.md").write_text(held)
    team.mem("writer", "page", "write", "rates", "--layer", "drafts", "--file", team.root / "held.md", check=True)
    team.mem("writer", "push", check=True)
    team.mem("reviewer", "pull", check=True)
    team.mem("reviewer", "redact", "--match", "above 20", "--reason", "wrong figure", "--yes", check=True)
    team.mem("reviewer", "page", "write", "rates", "--layer", "drafts", "--file",
             team.page("new", "Rates", "below 20"), check=True)
    pushed = team.mem("reviewer", "push")
    assert pushed.returncode == 0, pushed.stderr
    team.mem("writer", "pull", check=True)
    assert "below 20" in (team.root / "writer" / "content" / "drafts" / "rates.md").read_text()


def test_redaction_reasons_are_bounded_and_scanned_everywhere(team):
    team.mem("writer", "entry", "add", "insights", "[FACT] 2026-11-01: Staging first", check=True)
    team.mem("writer", "push", check=True)
    entry = json.loads(team.mem("writer", "log", "--json", check=True).stdout)[-1]["id"]
    head = open_storage(str(team.db)).head()
    for command, why in ((("hub", "redact", entry, "--reason", f"token {GITHUB}", *team.hub),
                          "GitHub Token in `reason`"),
                         (("hub", "redact", entry, "--reason", "x" * 2001, *team.hub), "longer than 2000 characters"),
                         (("-w", team.root / "writer", "redact", entry, "--reason", "x" * 2001, "--yes"),
                          "longer than 2000 characters"),
                         (("-w", team.root / "writer", "redact", entry, "--reason", f"token {GITHUB}"),  # regression
                          "GitHub Token in `reason`, line 1; nothing was written: a redaction's reason is copied into "
                          "every target's place and can never be redacted, so it may hold no secret")):
        refused = run_mem(*command)
        err = refused.stderr.decode()
        assert refused.returncode == 1 and err.startswith("error: ") and why in err and GITHUB not in err, err
        assert "--allow-secret" not in err, err  # (nc14b) `mem redact` has no such option
        assert len(err.splitlines()) == 1
    assert open_storage(str(team.db)).head() == head
