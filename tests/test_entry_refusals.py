"""The write side refuses through the CLI what the hub and every consumer refuse (one validator)."""

import json
import os

import pytest

from conftest import PAGE, log_rows, run_mem
from eventstore.layers import Contract, ContractLayer
from projections.memory import Memory

CONTRACT = Contract(layers={
    "insights": ContractLayer(path="memory/insights.md", format="entries", producers=["*"], consumers=["*"]),
    "drafts": ContractLayer(path="content/drafts/", format="pages", producers=["*"], consumers=["*"]),
})


@pytest.fixture
def shared(workspace):
    with Memory.open(workspace) as mem:
        mem.set_contract(CONTRACT)
    return workspace


@pytest.mark.parametrize("text, says", [
    ("[FACT] 2026-02-30: no such day", "date '2026-02-30' is not a calendar date"),
    ("[FACT] 2026-11: a month", "date '2026-11' is not written YYYY-MM-DD"),
    ("[EVIL] 2026-11-29: x", "entry type 'EVIL' is not one of"),
    # regressions: a date with nothing after it was taken as the content `2026-11-01:`, dated today
    ("[FACT] 2026-11-01:", "the entry has no content after its date: write `[FACT] 2026-11-01: content`"),
    ("[LESSON] 2026-11-01:   ", "the entry has no content after its date"),
    ("[FACT]", "the entry has no content after its type: write `[FACT] YYYY-MM-DD: content`"),
    # regressions: the lines were joined into one, silently
    ("[FACT] 2026-11-01: line one\nline two", "the entry holds a line break or a control character (a tab, say), "
                                              "and an entry is one line of text: join its lines"),
    ("[FACT] line one\u2028line two", "the entry holds a line break"),
    ("[FACT] a\tb", "the entry holds a line break or a control character (a tab, say)"),  # it became a space
    # regressions (nc13b): taken, and written into the layer's file
    ("[FACT] 2026-11-01: \u200b", "an entry's content cannot be empty (or only invisible characters)"),
    ("[FACT] 2026-11-01: rtl \u202egnp.exe", "an entry's content holds the direction control U+202E"),
])
def test_bad_entries_are_refused(shared, text, says):
    before = log_rows(shared)
    result = run_mem("entry", "add", "insights", text, "-w", shared)
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 1 and len(lines) == 1 and says in lines[0], lines
    assert log_rows(shared) == before


def test_a_date_spaced_from_its_colon_is_still_the_entrys_date_and_the_content_kept_as_written(shared):
    run_mem("entry", "add", "insights", "[FACT] 2026-11-01 : staging  first", "-w", shared, check=True)
    body = json.loads(run_mem("log", "--json", "-w", shared, check=True).stdout)[-1]["body"]
    assert (body["date"], body["content"]) == ("2026-11-01", "staging  first")


def test_a_reversal_must_name_an_entry_of_the_layer(shared):
    result = run_mem("entry", "add", "insights", "[FACT] x", "--reverses", "01a2272d-fa7b-77c9-a579-6130dd2bf05d",
                     "-w", shared)
    assert result.returncode == 1 and b"no entry" in result.stderr
    assert log_rows(shared) == []


def test_an_empty_reference_names_no_entry_to_reverse_or_redact(shared):
    """Regression (nc13b): `--reverses ""` (every id starts with "") reversed the layer's only entry, and was pushed;
    `mem redact ""` redacted it."""
    run_mem("entry", "add", "insights", "[FACT] 2026-11-01: only one", "-w", shared, check=True)
    before = log_rows(shared)
    for command, says in ((("entry", "add", "insights", "[FACT] x", "--reverses", ""),
                           "give the id of the entry to reverse (or its start, as the layer's file shows it)"),
                          (("redact", "", "--reason", "r", "--yes"), "an empty text names no event")):
        result = run_mem(*command, "-w", shared)
        assert result.returncode == 1 and says in result.stderr.decode(), result.stderr
    assert log_rows(shared) == before


def test_a_long_slug_in_a_shared_layer_is_refused(shared, tmp_path):
    (tmp_path / "p.md").write_bytes(PAGE)
    result = run_mem("page", "write", "a" * 300, "--layer", "drafts", "--file", tmp_path / "p.md", "-w", shared)
    assert result.returncode == 1 and b"longer than 120 characters" in result.stderr
    assert log_rows(shared) == []


def entry_ids(workspace) -> list[str]:
    listed = run_mem("entry", "list", "insights", "--json", "-w", workspace)
    return [entry["id"] for entry in json.loads(listed.stdout)]


def test_a_reserved_slug_in_a_pages_layer_says_why_for_every_layer(shared, tmp_path):
    """Regression: `page write log --layer drafts` said `(mind/log.md is not a page)`, of a page in content/drafts/."""
    (tmp_path / "p.md").write_bytes(PAGE)
    for slug, why in (("log", "mind/log.md is the wiki's change log and mind.md its index, so no page, in the wiki or "
                               "a pages layer, takes the names log, index or mind"),
                      ("nul.x", "'nul' is a name Windows keeps for a device")):
        result = run_mem("page", "write", slug, "--layer", "drafts", "--file", tmp_path / "p.md", "-w", shared)
        assert result.returncode == 1 and result.stderr.decode() == f"error: slug {slug!r} is reserved: {why}\n"
    assert log_rows(shared) == []


def test_the_18_characters_an_entries_file_shows_name_the_entry_to_reverse_and_to_redact(shared):
    """The file cuts ids to 18 characters; what it shows must be enough to reverse or redact that entry."""
    assert run_mem("entry", "add", "insights", "[DECISION] ship on friday", "-w", shared).returncode == 0
    first = entry_ids(shared)[0]
    reversed_ = run_mem("entry", "add", "insights", "[DECISION] ship on monday", "--reverses", first[:18],
                        "-w", shared)
    assert reversed_.returncode == 0, reversed_.stderr
    file = (shared / "memory/insights.md").read_text()
    assert f"[reversed by {entry_ids(shared)[1][:18]}]" in file and f"(reverses {first[:18]})" in file
    redacted = run_mem("redact", first[:18], "--reason", "wrong day", "-w", shared)
    assert redacted.returncode == 0, redacted.stderr
    assert "ship on friday" not in (shared / "memory/insights.md").read_text()
    assert "ship on monday" in (shared / "memory/insights.md").read_text()


def test_a_start_of_an_id_that_two_entries_share_is_refused_with_the_way_out(shared):
    for text in ("[FACT] one", "[FACT] two"):
        assert run_mem("entry", "add", "insights", text, "-w", shared).returncode == 0
    common = os.path.commonprefix(entry_ids(shared))
    before = log_rows(shared)
    for args in (("entry", "add", "insights", "[FACT] three", "--reverses", common), ("redact", common)):
        result = run_mem(*args, "--reason", "r", "-w", shared) if args[0] == "redact" else run_mem(*args, "-w", shared)
        lines = result.stderr.decode().splitlines()
        assert result.returncode == 1 and len(lines) == 1, lines
        assert f"has an id starting {common}: give more of it" in lines[0] and "mem entry list" in lines[0]
    assert log_rows(shared) == before
