"""Contract files (sync.contracts), in-process: what parses, what is refused and why, and that a
contract written back as TOML reads as the same contract. Reserved names and paths: test_reserved_layers."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventstore.errors import InvalidInput
from eventstore.layers import Contract, ContractLayer, consumed_layers, produced_layers
from sync.contracts import parse_contract, to_toml
from conftest import run_mem

TEAM = """
[layers.insights]
path = "memory/insights.md"
format = "entries"
producers = ["*"]
consumers = ["*"]

[layers.drafts]
path = "content/drafts/"
format = "pages"
producers = ["writer"]
consumers = ["main", "writer"]
scan_secrets = false
"""


def test_a_contract_file_parses_into_its_layers():
    contract = parse_contract(TEAM)
    assert contract.layers == {
        "insights": ContractLayer(path="memory/insights.md", format="entries", producers=["*"], consumers=["*"]),
        "drafts": ContractLayer(path="content/drafts/", format="pages", producers=["writer"],
                                consumers=["main", "writer"], scan_secrets=False)}
    assert produced_layers(contract, "main") == ["insights"]
    assert consumed_layers(contract, "main") == ["drafts", "insights"]
    assert parse_contract("") == Contract()


@pytest.mark.parametrize("text, says", [
    ("[layers.a\n", "not valid TOML"),
    ('[layers._contract]\npath = "a.md"\nformat = "entries"\nproducers = ["*"]\nconsumers = ["*"]\n',
     "layer name '_contract' is reserved: the hub keeps its contract's history there"),
    ('[layers.Bad]\npath = "a.md"\nformat = "entries"\nproducers = ["*"]\nconsumers = ["*"]\n', "lowercase"),
    ('[layers.a]\npath = "a.md"\nformat = "wiki"\nproducers = ["*"]\nconsumers = ["*"]\n', "not valid"),
    ('[layers.a]\npath = "a.md"\nformat = "entries"\nproducers = []\nconsumers = ["*"]\n', "not valid"),
    ('[layers.a]\npath = "a.md"\nformat = "entries"\nconsumers = ["*"]\n', "producers"),
    ('[layers.a]\npath = "a.md"\nformat = "entries"\nproducers = ["bad name"]\nconsumers = ["*"]\n', "not valid"),
    ('[layers.a]\npath = "a.md"\nformat = "entries"\nproducers = ["*"]\nconsumers = ["*"]\nextra = 1\n', "extra"),
    ('[layers.a]\npath = "dir/"\nformat = "entries"\nproducers = ["*"]\nconsumers = ["*"]\n', ".md file"),
    ('[layers.a]\npath = "a.md"\nformat = "pages"\nproducers = ["*"]\nconsumers = ["*"]\n', "directory"),
    ('[layers.a]\npath = "x.md"\nformat = "entries"\nproducers = ["*"]\nconsumers = ["*"]\n'
     '[layers.b]\npath = "x.md"\nformat = "entries"\nproducers = ["*"]\nconsumers = ["*"]\n',
     "layers a (x.md) and b (x.md) overlap"),
    ('[layers.a]\npath = "d/"\nformat = "pages"\nproducers = ["*"]\nconsumers = ["*"]\n'  # a page would be b's file
     '[layers.b]\npath = "d/x.md"\nformat = "entries"\nproducers = ["*"]\nconsumers = ["*"]\n',
     "layers a (d/) and b (d/x.md) overlap: a file would belong to both"),
    ('[layers.a]\npath = "d/"\nformat = "pages"\nproducers = ["*"]\nconsumers = ["*"]\n'
     '[layers.b]\npath = "d/e/"\nformat = "pages"\nproducers = ["*"]\nconsumers = ["*"]\n', "overlap"),
    ('[layers.a]\npath = "d.md"\nformat = "entries"\nproducers = ["*"]\nconsumers = ["*"]\n'  # a file under a file
     '[layers.b]\npath = "d.md/x.md"\nformat = "entries"\nproducers = ["*"]\nconsumers = ["*"]\n', "overlap"),
    ('[layers.a]\npath = "memory/caf\\u00e9.md"\nformat = "entries"\nproducers = ["*"]\nconsumers = ["*"]\n'
     '[layers.b]\npath = "memory/cafe\\u0301.md"\nformat = "entries"\nproducers = ["*"]\nconsumers = ["*"]\n',
     "overlap"),  # regression (nc13b): one name in NFC and in NFD, one file on macOS
    ('[layers.a]\npath = "d.md"\nformat = "entries"\nproducers = ["*"]\nconsumers = ["*"]\n'  # a file and a folder
     '[layers.b]\npath = "d.md/"\nformat = "pages"\nproducers = ["*"]\nconsumers = ["*"]\n', "overlap"),
])
def test_contract_refusals_say_why(text, says):
    with pytest.raises(InvalidInput, match=re.escape(says)):
        parse_contract(text)


def test_layers_whose_paths_differ_only_in_letter_case_are_refused(tmp_path):
    """On macOS and Windows `Content/Drafts/insights.md` is a file in `content/drafts/`: the two layers overlap
    (the contract accepted them; found by a newcomer run)."""
    contract = tmp_path / "contract.toml"
    contract.write_text('[layers.drafts]\npath = "content/drafts/"\nformat = "pages"\nproducers = ["*"]\n'
                        'consumers = ["*"]\n[layers.insights]\npath = "Content/Drafts/insights.md"\n'
                        'format = "entries"\nproducers = ["*"]\nconsumers = ["*"]\n')
    hub = ("--db", tmp_path / "hub.db")
    run_mem("hub", "init", *hub, check=True)
    refused = run_mem("hub", "contract", "apply", contract, *hub)
    assert refused.returncode == 1 and refused.stderr.decode() == (
        "error: layers drafts (content/drafts/) and insights (Content/Drafts/insights.md) overlap: a file would "
        "belong to both on a filesystem that ignores letter case (macOS, Windows)\n"), refused.stderr
    assert run_mem("hub", "contract", "show", *hub, check=True).stdout.decode() == "# hub position 0\n"


_names = st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True).filter(lambda n: n not in ("mind", "loop", "agent"))
_agents = st.lists(st.sampled_from(["*", "main", "writer", "a-1", "R2_d2"]), min_size=1, max_size=3, unique=True)


@given(st.dictionaries(_names, st.tuples(st.booleans(), _agents, _agents, st.booleans()), max_size=4))
def test_a_contract_written_as_toml_parses_back_the_same(layers):
    contract = Contract(layers={
        name: ContractLayer(path=f"shared/{name}/" if pages else f"shared/{name}.md",
                            format="pages" if pages else "entries", producers=producers, consumers=consumers,
                            scan_secrets=scan)
        for name, (pages, producers, consumers, scan) in layers.items()})
    assert parse_contract(to_toml(contract)) == contract


def test_a_contract_that_drops_a_layer_holding_events_or_names_an_unknown_agent_says_so(tmp_path):
    """Regression (nc13a): `[layers.insight]` for `[layers.insights]` was applied without a word, and at their next
    pull every consumer's file of the layer was gone; an agent named `Alice` for `alice` was cut off silently."""
    from eventstore.envelope import new_event
    from eventstore.kinds import EntryAppend
    from sync.storage import open_storage

    hub = ("--db", tmp_path / "hub.db")
    run_mem("hub", "init", *hub, check=True)
    run_mem("hub", "agent", "add", "alice", *hub, check=True)
    layer = '[layers.{}]\npath = "memory/{}.md"\nformat = "entries"\nproducers = [{}]\nconsumers = ["*"]\n'
    (tmp_path / "c.toml").write_text(layer.format("insights", "insights", '"alice"'))
    assert run_mem("hub", "contract", "apply", tmp_path / "c.toml", *hub, check=True).stderr == b""
    storage = open_storage(str(tmp_path / "hub.db"))
    storage.push([new_event(EntryAppend(type="FACT", date="2026-11-01", content="x"), agent="alice", layer="insights")])
    storage.close()
    (tmp_path / "c.toml").write_text(layer.format("insight", "insights", '"Alice", "bob"'))
    applied = run_mem("hub", "contract", "apply", tmp_path / "c.toml", *hub, check=True)
    assert applied.stdout.decode().startswith("contract applied at hub position 3: insight")
    assert applied.stderr.decode().splitlines() == [
        "warning: layer insights was dropped: the hub keeps its events, but no agent receives it any more and its "
        "consumers' file of it goes at their next pull (a contract naming it again brings it back)",
        "warning: 'Alice' is no agent of this hub ('alice' is: names are compared as written)",
        "warning: 'bob' is no agent of this hub yet (`mem hub agent add bob`)"]
    run_mem("hub", "agent", "revoke", "alice", *hub, check=True)  # regression (nc26b): "no agent of this hub yet"
    (tmp_path / "c.toml").write_text(layer.format("insight", "insights", '"alice"'))
    warned = run_mem("hub", "contract", "apply", tmp_path / "c.toml", *hub, check=True).stderr.decode()
    assert warned.startswith("warning: 'alice' was revoked at 20") and warned.endswith(
        ": it cannot sync until `mem hub agent add alice` gives it a new token\n")
