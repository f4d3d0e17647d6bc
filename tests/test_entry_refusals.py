"""The write side refuses through the CLI what the hub and every consumer refuse (one validator)."""

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
])
def test_bad_entries_are_refused(shared, text, says):
    before = log_rows(shared)
    result = run_mem("entry", "add", "insights", text, "-w", shared)
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 1 and len(lines) == 1 and says in lines[0], lines
    assert log_rows(shared) == before


def test_a_reversal_must_name_an_entry_of_the_layer(shared):
    result = run_mem("entry", "add", "insights", "[FACT] x", "--reverses", "01a2272d-fa7b-77c9-a579-6130dd2bf05d",
                     "-w", shared)
    assert result.returncode == 1 and b"no entry" in result.stderr
    assert log_rows(shared) == []


def test_a_long_slug_in_a_shared_layer_is_refused(shared, tmp_path):
    (tmp_path / "p.md").write_bytes(PAGE)
    result = run_mem("page", "write", "a" * 300, "--layer", "drafts", "--file", tmp_path / "p.md", "-w", shared)
    assert result.returncode == 1 and b"longer than 120 characters" in result.stderr
    assert log_rows(shared) == []
