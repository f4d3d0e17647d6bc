"""`mem lint`: each named check finds what it names, and nothing on a clean wiki; --at, --record, --judge."""

import json
import sys

from conftest import log_rows, run_mem
from teamhub import Team, layer

from projections import lint
from projections.memory import Memory

TODAY = "2026-11-30"


def page(title: str, body: str = "Text.", type: str = "procedure", sources=("https://example.com",), **fields) -> bytes:
    extra = "".join(f"{k}: {json.dumps(v)}\n" for k, v in fields.items())
    src = "sources:\n" + "".join(f"  - {s}\n" for s in sources) if sources else ""
    return f"---\ntype: {type}\n{extra}{src}---\n# {title}\n\n{body}\n".encode()


def findings(memory, *names, as_of=None, day=TODAY):
    report = lint.lint(memory, list(names) or None, memory.views.checkpoint() if as_of is None else as_of, day)
    return [(f.check, f.path, f.citation) for f in report.findings]


def test_a_clean_wiki_has_no_findings(memory):
    memory.write_page("deploy", page("Deploy", "Staging first."))
    memory.write_page("rollback", page("Rollback", "Use the script. See adf-file://mind/deploy.md"))
    assert findings(memory) == []


def test_contradictions(memory):
    memory.write_page("runbook", page("Runbook"))
    memory.write_page("old", page("Old", status="superseded-by: runbook"))
    linking = memory.write_page("guide", page("Guide", "Follow adf-file://mind/old.md")).seq
    assert findings(memory, "contradictions") == [("contradictions", "mind/guide.md", "adf-file://mind/old.md")]
    assert findings(memory, "contradictions", as_of=linking - 1) == []  # guide did not exist yet
    memory.write_page("runbook", page("Runbook", status="superseded-by: old"))
    found = findings(memory, "contradictions")
    assert ("contradictions", "mind/old.md", "") in found  # the two supersede each other
    memory.always_add("Deploys follow adf-file://mind/old.md")
    assert ("contradictions", "mind.md", "adf-file://mind/old.md") in findings(memory, "contradictions")


def test_a_page_superseded_by_a_page_that_no_longer_exists_is_a_finding(memory):
    """Regression: a delete or rename of the page another names as its successor (`superseded-by: deploy`) left the
    older page withheld from search and believed in favour of nothing, and lint said nothing."""
    memory.write_page("deploy", page("Deploy"))
    memory.write_page("manual", page("Manual deploy", status="superseded-by: deploy"))
    assert findings(memory, "contradictions") == []
    renamed = memory.rename_page("deploy", "deploy-v2").seq
    assert findings(memory, "contradictions") == [("contradictions", "mind/manual.md", "adf-file://mind/deploy.md")]
    assert findings(memory, "contradictions", as_of=renamed - 1) == []
    memory.write_page("manual", page("Manual deploy", status="superseded-by: deploy-v2"))
    memory.delete_page("deploy-v2")
    assert findings(memory, "contradictions") == [("contradictions", "mind/manual.md", "adf-file://mind/deploy-v2.md")]


def test_contradictions_with_reversed_entries_and_index_drift(memory):
    memory.declare_layer("decisions", "memory/decisions.md")
    first = memory.entry_add("decisions", "[DECISION] 2026-11-01: SQLite").id
    memory.entry_add("decisions", "[DECISION] 2026-11-02: PostgreSQL", reverses=first)
    memory.write_page("hub", page("Hub", f"We chose SQLite ({first})."))
    assert findings(memory, "contradictions") == [("contradictions", "mind/hub.md", first)]
    mind = memory.root / "mind.md"
    mind.write_text(mind.read_text().replace("- [Hub](adf-file://mind/hub.md)", "- [Hub](adf-file://mind/hub.md) — "
                                             "we use PostgreSQL"))
    assert ("contradictions", "mind.md", "adf-file://mind/hub.md") in findings(memory, "contradictions")


def test_an_entry_reversed_by_two_entries_is_a_contradiction(memory):
    """Regression: two agents reversing one entry at once (as after a sync) left both reversals current, the file
    naming the newest only, and `lint --check contradictions` said nothing."""
    from eventstore.envelope import new_event
    from eventstore.kinds import EntryAppend

    memory.declare_layer("decisions", "memory/decisions.md")
    first = memory.entry_add("decisions", "[DECISION] 2026-11-01: SQLite").id
    mine = memory.entry_add("decisions", "[DECISION] 2026-11-02: PostgreSQL", reverses=first)
    assert findings(memory, "contradictions") == []
    theirs = new_event(EntryAppend(type="DECISION", date="2026-11-02", content="DuckDB", reverses=first),
                       agent="reviewer", layer="decisions")
    memory.append(theirs, touches=["memory/decisions.md"])
    report = lint.lint(memory, ["contradictions"], memory.views.checkpoint(), TODAY)
    assert [(f.check, f.path) for f in report.findings] == [("contradictions", f"decisions#{first}")]
    assert report.findings[0].problem == (f"reversed by {mine.id[:18]} ({memory.config.agent}) and {theirs.id[:18]} "
                                          "(reviewer): "
                                          "both stand; reverse the one that does not hold")


def test_stale_sources_one_off_types(memory):
    memory.write_page("a", page("A", stale_after="2026-10-01"))
    memory.write_page("b", page("B", sources=()))
    memory.write_page("c", page("C", type="oddity"))
    assert findings(memory, "stale") == [("stale", "mind/a.md", "")]
    assert findings(memory, "stale", day="2026-09-01") == []
    assert findings(memory, "sources") == [("sources", "mind/b.md", "")]
    assert findings(memory, "one-off-types") == [("one-off-types", "mind/c.md", "")]


def test_dead_links_citations_orphans_budget(memory):
    memory.write_page("a", page("A", "From [S99] and adf-file://mind/gone.md"))
    memory.always_add("Read adf-file://mind/nowhere.md first")
    assert findings(memory, "dead-links") == [("dead-links", "mind/a.md", "adf-file://mind/gone.md"),
                                             ("dead-links", "mind.md (## Always)", "adf-file://mind/nowhere.md")]
    assert findings(memory, "citations") == [("citations", "mind/a.md", "[S99]")]
    (memory.root / "mind/stray.md").write_text("not a page of the log")
    assert findings(memory, "orphans") == [("orphans", "mind/stray.md", "")]
    assert findings(memory, "budget") == []
    memory.config_set("lint", {"mind_max_lines": 3, "mind_max_bytes": 40})
    assert [f[0] for f in findings(memory, "budget")] == ["budget", "budget"]


def test_a_link_at_the_end_of_a_sentence_is_not_dead_for_its_full_stop(memory):
    """Regression (nc30b): `adf-file://mind/bb.md.` and `..., adf-file://mind/bb.md, then` were dead links (the
    full stop and the comma read as part of the path); lint exited 1 on every page that ends a sentence with one."""
    memory.write_page("bb", page("BB"))
    memory.write_page("p", page("P", "See adf-file://mind/bb.md. Also adf-file://mind/bb.md, then "
                                     "(adf-file://mind/bb.md); or adf-file://mind/bb.md! Not adf-file://mind/gone.md."))
    assert findings(memory, "dead-links") == [("dead-links", "mind/p.md", "adf-file://mind/gone.md")]


def test_cli_check_json_record_judge_and_exit_codes(workspace, tmp_path):
    w = ("-w", workspace)
    for slug, body in (("a", "Deploy staging canary rollback owner"), ("b", "Deploy staging canary rollback never")):
        (tmp_path / f"{slug}.md").write_bytes(page(slug.upper(), body))
        run_mem(*w, "page", "write", slug, "--file", tmp_path / f"{slug}.md", check=True)
    assert run_mem(*w, "lint", check=True).stdout.decode().strip().endswith("no findings.")
    (tmp_path / "c.md").write_bytes(page("C", stale_after="2000-01-01"))
    run_mem(*w, "page", "write", "c", "--file", tmp_path / "c.md", check=True)
    result = run_mem(*w, "lint", "--check", "stale", "--json")
    assert result.returncode == 1 and [f["check"] for f in json.loads(result.stdout)["findings"]] == ["stale"]
    assert run_mem(*w, "lint", "--check", "stale", "--seq", "2").returncode == 0
    bad = run_mem(*w, "lint", "--check", "nonsense")
    assert bad.returncode == 1 and bad.stderr.startswith(b"error: unknown lint check")
    judge = tmp_path / "judge.py"
    judge.write_text("import json, sys\npair = json.load(sys.stdin)\n"
                     "print('contradiction: owner vs never' if 'never' in pair['b_text'] + pair['a_text'] "
                     "else 'consistent')\n")
    result = run_mem(*w, "lint", "--check", "sources", "--judge", f"{sys.executable} {judge}", "--record")
    assert result.returncode == 1 and result.stdout.decode().splitlines() == [
        "[judge] mind/a.md: contradicts mind/b.md (judge: contradiction: owner vs never)",  # once (it was twice)
        "Lint: 1 finding(s): judge 1. The judge ruled on 1 of 1 candidate pairs.",
        "recorded in mind/log.md (seq 4)"]
    log = (workspace / "mind/log.md").read_text()
    assert "lint | Lint pass\n\nLint: 1 finding(s): judge 1." in log and log.count("owner vs never") == 1
    # --json carries the verdicts the text prints, every path as the other checks name it
    result = run_mem(*w, "lint", "--check", "stale", "--judge", f"{sys.executable} {judge}", "--record", "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["seq"] == 4 and report["recorded"] == 5
    assert report["checks"] == ["stale", "judge"]
    assert [(f["check"], f["path"]) for f in report["findings"]] == [("stale", "mind/c.md"), ("judge", "mind/a.md")]
    assert report["verdicts"] == [{"a": "mind/a.md", "b": "mind/b.md", "verdict": "contradiction: owner vs never"}]


def test_a_judge_that_never_answers_is_one_error_line_and_records_nothing(workspace, tmp_path):
    w = ("-w", workspace)
    for slug, body in (("a", "Deploy staging canary rollback owner"), ("b", "Deploy staging canary rollback never")):
        (tmp_path / f"{slug}.md").write_bytes(page(slug.upper(), body))
        run_mem(*w, "page", "write", slug, "--file", tmp_path / f"{slug}.md", check=True)
    before = log_rows(workspace)
    result = run_mem(*w, "lint", "--judge", "sleep 30", "--judge-timeout", "1", "--record")
    err = result.stderr.decode()
    assert result.returncode == 1 and "Traceback" not in err, err
    assert err.strip() == ("error: the judge command gave no verdict within 1 s (on adf-file://mind/a.md and "
                           "adf-file://mind/b.md); nothing was recorded")
    assert log_rows(workspace) == before


def test_a_judge_given_no_time_no_command_or_failing_silently_is_one_clear_line(workspace, tmp_path):
    """Regression: `--judge-timeout 0` (or -1) ran the judge and refused it as `no verdict within -1 s`, a blank
    `--judge ""` linted with no judge, and a judge failing silently was `the judge command failed (1): `."""
    w = ("-w", workspace)
    for slug, body in (("a", "Deploy staging canary rollback owner"), ("b", "Deploy staging canary rollback never")):
        (tmp_path / f"{slug}.md").write_bytes(page(slug.upper(), body))
        run_mem(*w, "page", "write", slug, "--file", tmp_path / f"{slug}.md", check=True)
    before = log_rows(workspace)
    for args, said in ((["--judge", "cat", "--judge-timeout", "0"], "--judge-timeout must be a number of seconds "
                        "above 0, not 0"),
                       (["--judge", "cat", "--judge-timeout", "-1"], "--judge-timeout must be a number of seconds "
                        "above 0, not -1"),
                       (["--judge", " "], "--judge needs a command: a shell command line that reads a pair (JSON) on "
                        "stdin"),
                       (["--judge", "exit 3"], "the judge command failed (exit 3) on adf-file://mind/a.md and "
                        "adf-file://mind/b.md, saying nothing on stderr; nothing was recorded"),
                       (["--judge", "echo broken >&2; exit 1"], "the judge command failed (exit 1) on "
                        "adf-file://mind/a.md and adf-file://mind/b.md: broken; nothing was recorded")):
        result = run_mem(*w, "lint", *args, "--record", "--json")
        assert (result.returncode, result.stdout, result.stderr.decode()) == (1, b"", f"error: {said}\n"), args
    assert log_rows(workspace) == before


def test_a_budget_that_is_no_number_is_refused_when_set_and_named_when_read(workspace):
    before = log_rows(workspace)
    for key, value in (("lint.mind_max_lines", "abc"), ("lint.mind_max_lines", "0"), ("lint.mind_max_bytes", "true"),
                       ("lint", '{"mind_max_bytes": "x"}')):
        refused = run_mem("-w", workspace, "config", "set", key, value)
        assert refused.returncode == 1 and b"is a budget: give a whole number above 0" in refused.stderr, refused
    assert log_rows(workspace) == before
    from eventstore.envelope import new_event
    from eventstore.kinds import ConfigSet
    from projections.memory import Memory

    with Memory.open(workspace) as memory:  # as an imported ADF file's config could hold it
        memory.append(new_event(ConfigSet(key="lint.mind_max_lines", value="abc"), agent="alice", layer="agent"))
    result = run_mem("-w", workspace, "lint", "--check", "budget")
    err = result.stderr.decode()
    assert result.returncode == 1 and "Traceback" not in err and err.strip() == (
        "error: the config's lint.mind_max_lines is 'abc', not a whole number above 0: "
        "`mem config set lint.mind_max_lines 200`")


def test_a_lint_of_the_past_is_not_recorded_as_todays(workspace):
    """Regression: `lint --seq N --record` appended today's `Lint pass` listing the findings as of seq N (pages
    deleted since among them), with nothing saying which moment was linted."""
    run_mem("-w", workspace, "always", "add", "a rule", check=True)
    before = log_rows(workspace)
    for moment in (("--seq", "1"), ("--at", "now")):
        result = run_mem("-w", workspace, "lint", *moment, "--record")
        lines = result.stderr.decode().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and "a lint as of another moment is not recorded" in lines[0]
    assert log_rows(workspace) == before


def test_the_judge_says_how_many_pairs_it_ruled_on_and_a_long_verdict_is_recorded_cut(workspace, tmp_path):
    """Regressions: a word held by more than 50 items paired none, so among 62 entries about deploys no pair was
    sent and the lint said "no findings." alone; a verdict of 300,000 characters made `--record` fail at the end
    ("a finding is longer than 2000 characters") after every pair was judged."""
    w = ("-w", workspace)
    run_mem(*w, "layer", "add", "dec", "memory/dec.md", check=True)
    common = "deploys happen on Fridays after canary staging checks pass with owner approval"
    with Memory.open(workspace) as mem:
        mem.entry_add("dec", f"[DECISION] 2026-11-01: Production {common}")
        mem.entry_add("dec", f"[DECISION] 2026-11-02: Production never {common}")
        for i in range(60):
            mem.entry_add("dec", f"[DECISION] 2026-11-01: Production {common} number {i}")
    judge = tmp_path / "judge.sh"
    judge.write_text("cat > /dev/null\nprintf 'contradiction: '\nhead -c 300000 /dev/zero | tr '\\0' b\n")
    command = ("lint", "--check", "sources", "--judge", f"sh {judge}")
    capped = run_mem(*w, *command)
    said = capped.stdout.decode().splitlines()[-1]
    assert said.endswith("The judge ruled on 50 of 1891 candidate pairs (those sharing the most terms; "
                         "--judge-pairs N sends more)."), said
    result = run_mem(*w, *command, "--judge-pairs", "3", "--record", "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["recorded"] is not None, result.stderr
    assert report["candidates"] == 1891 and len(report["verdicts"]) == 3
    assert all(len(v["verdict"]) == 500 and v["verdict"].startswith("contradiction: bbb") for v in report["verdicts"])
    refused = run_mem(*w, *command, "--judge-pairs", "0")
    assert refused.returncode == 1 and b"--judge-pairs must be 1 or more, not 0" in refused.stderr


def test_a_redacted_page_is_no_one_off_type(workspace, tmp_path):
    """Regression: a page redacted reads as `type: redacted`, which one-off-types reported as the author's choice."""
    for slug in ("a", "b"):
        (tmp_path / f"{slug}.md").write_bytes(page(slug.upper(), "some text"))
        run_mem("-w", workspace, "page", "write", slug, "--file", tmp_path / f"{slug}.md", check=True)
    run_mem("-w", workspace, "redact", "2", "--reason", "leak", check=True)
    result = run_mem("-w", workspace, "lint", "--check", "one-off-types")
    assert result.returncode == 0 and "'redacted'" not in result.stdout.decode(), result.stdout


def test_lint_checks_shared_pages_too(tmp_path):
    """Regression: lint looked at wiki pages only. A shared page superseded by a page deleted since (withheld from
    search in favour of nothing), one without `sources`, its dead link and a hand-made file in its folder were all
    'no findings'. Each is named by its shared path; a teammate's seq citations are not checked (its own log's)."""
    team = Team(tmp_path, agents=("writer", "reviewer"))
    try:
        for slug, text in (("launch", page("Launch", "Go on Monday.")),
                           ("old-launch", page("Old launch", "Go on Friday.", status="superseded-by: launch")),
                           ("plan", page("Plan", "See adf-file://content/drafts/gone.md [S412]", sources=(),
                                         stale_after="2020-01-01"))):
            (tmp_path / f"{slug}.md").write_bytes(text)
            team.mem("writer", "page", "write", slug, "--layer", "drafts", "--file", tmp_path / f"{slug}.md",
                     check=True)
        team.mem("writer", "sync", check=True)
        team.mem("reviewer", "sync", check=True)
        team.mem("reviewer", "page", "delete", "launch", "--layer", "drafts", check=True)
        (tmp_path / "reviewer/content/drafts/scratch.md").write_text("# by hand\n")
        linted = team.mem("reviewer", "lint")
        assert linted.returncode == 1
        assert linted.stdout.decode().splitlines() == [
            "[contradictions] content/drafts/old-launch.md: adf-file://content/drafts/launch.md (its successor: "
            "superseded-by) does not exist: the page is withheld from search and believed in favour of no page",
            "[stale] content/drafts/plan.md: past stale_after (2020-01-01): re-verify it, then update the date or the "
            "content",
            "[sources] content/drafts/plan.md: has no `sources`: it cannot be re-verified",
            "[dead-links] content/drafts/plan.md: adf-file://content/drafts/gone.md names a file that does not exist",
            "[orphans] content/drafts/scratch.md: is in content/drafts/ but is no page of the log: `mem adopt` it or "
            "delete it",
            "Lint: 5 finding(s): contradictions 1, stale 1, sources 1, dead-links 1, orphans 1."]
        as_json = json.loads(team.mem("reviewer", "lint", "--check", "sources", "--json").stdout)
        assert [(f["check"], f["path"]) for f in as_json["findings"]] == [("sources", "content/drafts/plan.md")]
    finally:
        team.stop()


def test_the_judge_rules_on_shared_pages_too(tmp_path):
    """Regression: `--judge` sent the wiki's pages and the entries only, so on a team's shared pages (which every
    other check reads) it ruled on '0 of 0 candidate pairs'. A shared page is named by its path, as findings name
    it; a withheld one is not sent."""
    team = Team(tmp_path, agents=("writer",))
    try:
        for slug, text in (("a", page("A", "Deploy staging canary rollback owner")),
                           ("b", page("B", "Deploy staging canary rollback never")),
                           ("c", page("C", "Deploy staging canary rollback never", status="archived"))):
            (tmp_path / f"{slug}.md").write_bytes(text)
            team.mem("writer", "page", "write", slug, "--layer", "drafts", "--file", tmp_path / f"{slug}.md",
                     check=True)
        judge = tmp_path / "judge.py"
        judge.write_text("import json, sys\npair = json.load(sys.stdin)\nassert pair['a_text'].startswith('---')\n"
                         "print(f\"contradiction: {pair['a']} vs {pair['b']}\" if 'never' in pair['b_text'] "
                         "else 'consistent')\n")
        linted = team.mem("writer", "lint", "--check", "sources", "--judge", f"{sys.executable} {judge}")
        assert linted.returncode == 1 and linted.stdout.decode().splitlines() == [
            "[judge] content/drafts/a.md: contradicts content/drafts/b.md (judge: contradiction: "
            "adf-file://content/drafts/a.md vs adf-file://content/drafts/b.md)",
            "Lint: 1 finding(s): judge 1. The judge ruled on 1 of 1 candidate pairs."], linted.stdout.decode()
    finally:
        team.stop()


def test_a_consumer_is_told_who_can_mend_a_shared_page_and_lint_exits_0_for_those_alone(tmp_path):
    """Regression: an agent that only consumes a pages layer got `[sources] ...: has no sources` and exit 1 for a
    teammate's page the contract forbids it to change. Such a finding now names the layer whose producers can mend
    it (`read_only` in JSON) and alone does not fail the lint; the producer's lint of the same page still fails."""
    team = Team(tmp_path, agents=("writer", "reader"), contract=layer("drafts", "content/drafts/", "pages",
                                                                      producers=("writer",)))
    try:
        (tmp_path / "plan.md").write_bytes(page("Plan", "Ship it.", sources=()))
        team.mem("writer", "page", "write", "plan", "--layer", "drafts", "--file", tmp_path / "plan.md", check=True)
        team.mem("writer", "sync", check=True)
        team.mem("reader", "sync", check=True)
        linted = team.mem("reader", "lint", "--check", "sources")
        assert linted.returncode == 0, linted.stdout.decode()
        assert linted.stdout.decode().splitlines() == [
            "[sources] content/drafts/plan.md: has no `sources`: it cannot be re-verified (only a producer of layer "
            "drafts can change it)",
            "Lint: 1 finding(s): sources 1. 1 in layers only their producers can change."]
        as_json = json.loads(team.mem("reader", "lint", "--check", "sources", "--json").stdout)
        assert [(f["path"], f["read_only"]) for f in as_json["findings"]] == [("content/drafts/plan.md", "drafts")]
        (tmp_path / "mine.md").write_bytes(page("Mine", "Local.", sources=()))
        team.mem("reader", "page", "write", "mine", "--file", tmp_path / "mine.md", check=True)
        assert team.mem("reader", "lint", "--check", "sources").returncode == 1
        written = team.mem("writer", "lint", "--check", "sources")
        assert written.returncode == 1 and "only a producer" not in written.stdout.decode()
    finally:
        team.stop()
