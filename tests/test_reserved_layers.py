"""Private layers (mind, loop, agent) and mindlog's own names never become shared: refused by the
contract type, by `mem hub contract apply`, by the hub's push and pull, and by the client's push."""

import msgspec
import pytest

from conftest import PAGE, log_rows, run_mem
from eventstore.envelope import new_event
from eventstore.errors import InvalidInput
from eventstore.kinds import AlwaysAdd, ContractChange, EntryAppend, PageIngest
from eventstore.layers import (PRIVATE_LAYERS, RESERVED_LAYERS, Contract, ContractLayer, consumed_layers,
                               lenient_contract, produced_layers)
from projections.memory import Memory
from sync.client import HubClient, HubRefused
from sync.contracts import parse_contract
from sync.hub import HubError, check_batch
from sync.storage import HUB_AGENT, open_storage
from sync.wire import ContractResponse

from hubserver import HubServer

MIND_CONTRACT = '[layers.mind]\npath = "team/notes/"\nformat = "pages"\nproducers = ["*"]\nconsumers = ["*"]\n'
OPEN = ContractLayer(path="team/notes/", format="pages", producers=["*"], consumers=["*"])


@pytest.mark.parametrize("name", sorted(RESERVED_LAYERS))
def test_the_contract_type_refuses_reserved_names(name):
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"layers": {name: msgspec.to_builtins(OPEN)}}, Contract)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(msgspec.json.encode({"contract": {"layers": {name: OPEN}}, "position": 1, "agent": "a"}),
                            type=ContractResponse)


def test_parse_contract_refuses_the_issues_contract():
    with pytest.raises(InvalidInput, match="'mind' is reserved"):
        parse_contract(MIND_CONTRACT)
    assert parse_contract(MIND_CONTRACT.replace("layers.mind", "layers.notes")).layers["notes"] == OPEN


def test_mem_hub_contract_apply_refuses_it(tmp_path):
    (tmp_path / "c.toml").write_text(MIND_CONTRACT)
    result = run_mem("hub", "contract", "apply", tmp_path / "c.toml", "--db", tmp_path / "hub.db")
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        "error: layer name 'mind' is reserved: agent, loop, mind are each agent's own and are never shared"]
    assert open_storage(str(tmp_path / "hub.db")).head() == 0


def test_code_built_contracts_still_share_no_private_layer():
    """A Contract built in code skips the type's checks: produces/consumes refuse reserved layers again."""
    contract = Contract(layers={name: OPEN for name in [*PRIVATE_LAYERS, "notes"]})
    assert produced_layers(contract, "alice") == ["notes"]
    assert consumed_layers(contract, "alice") == ["notes"]
    private = new_event(AlwaysAdd(line="mine"), agent="alice", layer="mind")
    with pytest.raises(HubError) as refused:
        check_batch([private], "alice", contract)
    assert refused.value.status == 403 and refused.value.code == "reserved-layer"


def test_a_stored_contract_naming_mind_is_read_without_it():
    assert lenient_contract({"mind": msgspec.to_builtins(OPEN), "notes": msgspec.to_builtins(OPEN)}).layers == {
        "notes": OPEN}


@pytest.fixture
def hub_with_mind(tmp_path):
    """A hub whose stored contract names `mind` (as one made before the rule could have)."""
    db = str(tmp_path / "hub.db")
    storage = open_storage(db)
    layers = {"mind": msgspec.to_builtins(OPEN),
              "insights": {"path": "memory/insights.md", "format": "entries", "producers": ["*"],
                           "consumers": ["*"]}}
    storage.push([new_event(ContractChange(layers=layers), agent=HUB_AGENT, layer="_contract")])
    # and a private event that reached the hub somehow: it must never be handed out
    storage.push([new_event(PageIngest(slug="secret", frontmatter={"type": "x"}, text="private"), agent="bob",
                            layer="mind")])
    tokens = {name: storage.add_agent(name) for name in ("alice", "bob")}
    storage.close()
    with HubServer(db) as server:
        server.tokens = tokens
        yield server, tmp_path


def test_a_hub_that_had_mind_in_its_contract_never_ships_a_private_page(hub_with_mind):
    server, tmp = hub_with_mind
    alice, bob = tmp / "alice", tmp / "bob"
    for name, root in (("alice", alice), ("bob", bob)):
        Memory.init(root, name).close()
        (tmp / f"{name}.token").write_text(server.tokens[name])
        run_mem("remote", "add", "origin", server.url, "--token-file", tmp / f"{name}.token", "-w", root, check=True)
    (tmp / "page.md").write_bytes(PAGE)
    run_mem("page", "write", "private", "--file", tmp / "page.md", "-w", alice, check=True)
    pushed = run_mem("push", "-w", alice, check=True)
    assert pushed.stdout.decode().strip() == "pushed 0 events to origin"
    storage = open_storage(server.db)
    before = storage.head()
    assert [e.layer for e in storage.pull(0, ["insights", "mind"], 100)] == ["mind"]  # the planted one
    client = HubClient(server.url, server.tokens["alice"])
    assert "mind" not in client.contract().contract.layers
    private = new_event(AlwaysAdd(line="my rule"), agent="alice", layer="mind")
    with pytest.raises(HubRefused) as refused:
        client.push([private])
    assert refused.value.status == 403 and refused.value.code == "reserved-layer"
    client.close()
    assert storage.head() == before
    pulled = run_mem("pull", "-w", bob, check=True)
    assert pulled.stdout.decode().strip() == "pulled 0 events from origin"
    assert not (bob / "mind" / "secret.md").exists() and not (bob / "team").exists()
    assert log_rows(bob) == []
    storage.close()


def test_the_contract_request_tells_no_agent_of_an_event_it_may_not_read(hub_with_mind):
    """Regression (nc22b): GET /v1/contract?holds=ID answered the hub position of any event it held, so an agent
    learnt that an event of a layer it may not read was there, and where. Such an id is now left out, as one the
    hub does not hold; the agent's own events are still answered (what lets it see a hub restored from a backup)."""
    server, _tmp = hub_with_mind
    storage = open_storage(server.db)
    [planted] = storage.pull(0, ["mind"], 10)
    storage.close()
    with HubClient(server.url, server.tokens["alice"]) as alice:
        mine = new_event(EntryAppend(type="FACT", date="2026-12-03", content="mine"), agent="alice", layer="insights")
        [pushed] = alice.push([mine]).results
        assert alice.contract([planted.id, mine.id]).holds == {mine.id: pushed.position}
    with HubClient(server.url, server.tokens["bob"]) as bob:
        assert bob.contract([planted.id]).holds == {planted.id: planted.seq}  # its author's


BAD_PATHS = [("./mind/", "pages"), ("./mind.md", "entries"), ("./.mem/", "pages"), ("a/./mind.md", "entries"),
             (".git/hooks/", "pages"), ("notes\n/", "pages"), ("no\x00tes/", "pages"), ("/etc/", "pages"),
             ("../x.md", "entries"), ("a/../mind/", "pages"), ("MIND/", "pages"), ("Mind.md", "entries"),
             ("a//b/", "pages"), ("notes\u2028x.md", "entries"), ("C:/x/", "pages"), ("a\\b/", "pages"),
             ("docs/.hidden.md", "entries"), ("mind/team/", "pages"), ("team/a\u202etxt.md", "entries"),
             ("con/", "pages"), ("team/nul.md", "entries"), ("notes /", "pages"), ("team./x.md", "entries"),
             ("x" * 300 + "/", "pages"), ("memory/a:b.md", "entries"), ("team/a?b/", "pages"),
             ("memory/com\u00b9.md", "entries")]


@pytest.mark.parametrize("path, format", BAD_PATHS)
def test_contract_paths_are_checked_on_their_normal_form(path, format):
    spec = {"path": path, "format": format, "producers": ["*"], "consumers": ["*"]}
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"layers": {"notes": spec}}, Contract)
    toml = f'[layers.notes]\npath = {msgspec.json.encode(path).decode()}\nformat = "{format}"\n' \
           'producers = ["*"]\nconsumers = ["*"]\n'
    with pytest.raises(InvalidInput, match="layer notes: path"):
        parse_contract(toml)


def test_good_paths_pass():
    for path, format in (("team/notes/", "pages"), ("memory/cross-domain-insights.md", "entries"),
                         ("content/drafts/", "pages"), ("mindful/x.md", "entries")):
        msgspec.convert({"layers": {"notes": {"path": path, "format": format, "producers": ["*"],
                                              "consumers": ["*"]}}}, Contract)


def test_mem_hub_contract_apply_refuses_a_path_into_mind(tmp_path):
    (tmp_path / "c.toml").write_text(MIND_CONTRACT.replace("layers.mind", "layers.notes")
                                     .replace('"team/notes/"', '"./mind/"'))
    result = run_mem("hub", "contract", "apply", tmp_path / "c.toml", "--db", tmp_path / "hub.db")
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        "error: layer notes: path './mind/': the path has an empty or '.' segment; write it in normal form"]


def test_mem_hub_contract_apply_refuses_a_path_a_filesystem_cannot_hold(tmp_path):
    """Regression: a shared layer's path could hold U+202E or a Windows device name, which every page's slug refuses
    (a consumer on Windows could not write it; a reader sees `exe.txt` for `txt.exe`)."""
    hub = ("--db", tmp_path / "hub.db")
    run_mem("hub", "init", *hub, check=True)
    for path, says in (("team/a\u202etxt.md", "holds a character that is not printable (a line break, a control or "
                                               "direction mark)"),
                       ("team/aux.md", "uses 'aux', a name Windows keeps for a device")):
        (tmp_path / "c.toml").write_text(f'[layers.notes]\npath = "{path}"\nformat = "entries"\n'
                                         'producers = ["*"]\nconsumers = ["*"]\n')
        result = run_mem("hub", "contract", "apply", tmp_path / "c.toml", *hub)
        assert result.returncode == 1 and result.stderr.decode().splitlines() == [
            f"error: layer notes: path {path!r}: the path {says}"], result.stderr
    assert run_mem("hub", "contract", "show", *hub, check=True).stdout.decode() == "# hub position 0\n"


@pytest.mark.parametrize("layer, why", [("mind", "agent, loop, mind are each agent's own and are never shared"),
                                        ("_contract", "the hub keeps its contract's history there")])
def test_the_hubs_refusal_names_the_reserved_layer_and_why_it_is_reserved(layer, why):
    """Regression: an event in `_contract` was refused for being 'each agent's own' (the private layers' reason)."""
    event = new_event(AlwaysAdd(line="mine"), agent="alice", layer=layer)
    with pytest.raises(HubError) as refused:
        check_batch([event], "alice", Contract(layers={"notes": OPEN}))
    assert refused.value.code == "reserved-layer"
    assert f"is in layer {layer!r}, which is reserved: {why};" in str(refused.value)


@pytest.mark.parametrize("layer", sorted(RESERVED_LAYERS))
def test_mem_layer_add_names_the_reserved_layer_and_why_it_is_reserved(tmp_path, layer):
    """Regression: a local layer named `mind` or `_contract` was refused as a badly spelled name, listing the
    reserved names without saying why."""
    Memory.init(tmp_path / "w", "alice").close()
    refused = run_mem("-w", tmp_path / "w", "layer", "add", layer, "notes.md")
    why = ("the hub keeps its contract's history there" if layer == "_contract"
           else "agent, loop, mind are each agent's own and are never shared")
    assert (refused.returncode, refused.stderr.decode()) == (1, f"error: layer name {layer!r} is reserved: {why}\n")
