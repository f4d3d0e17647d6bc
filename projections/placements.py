"""Where each layer's file was at each moment: the contract in force then, never today's.

A workspace places its shared layers by the hub's contract it had taken, and its local layers by its
config. Both change: an admin drops a layer or moves its path, the agent declares a layer of its own.
A point-in-time read (`mem show --seq`, `history`, `checkout`, `believed`, search as of a moment) places
the files as they were then (`Views.contract_at`): the hub's contract from the `contract.change` events
this agent recorded in its own `agent` layer whenever a contract it took moved, dropped or added a
layer's file (Memory.set_contract), the local layers from the config as of then.

Before the first such event the contract it replaced (`previous`) was in force; a workspace that
recorded none places every moment by the contract it has now.

A hub's mirror (sync.mirror) holds the hub's own contract changes (layer `_contract`), folded here too
(`record_hub`): as of each one, every layer a contract had named by then, each where the latest of them
placed it (`with_newer`), which is what the mirror places now; so the hub's pages place a moved layer's
past at its path then.
"""

import json

import msgspec

from eventstore.layers import Contract, lenient_contract, paths_overlap

TABLE = "contract_versions"
SCHEMA = f"CREATE TABLE IF NOT EXISTS {TABLE} (seq INTEGER PRIMARY KEY, layers TEXT NOT NULL, previous TEXT NOT NULL);"
IN_FORCE = (f"SELECT (SELECT MAX(seq) FROM {TABLE} WHERE seq <= ?1), (SELECT MIN(seq) FROM {TABLE}), "
            "(SELECT MAX(seq) FROM config_versions WHERE seq <= ?1)")
"""The seqs that decide the placement as of a seq: the last contract taken by then, the first ever taken (its
`previous` held before it), the last config version by then. Three seeks on primary keys."""


def record(db, seq: int, body) -> None:
    """Folds a `contract.change` of the agent's own layer (see the module's docstring)."""
    db.execute(f"INSERT OR REPLACE INTO {TABLE} VALUES (?,?,?)",
               (seq, json.dumps(body.layers, sort_keys=True), json.dumps(body.previous or {}, sort_keys=True)))


def record_hub(db, seq: int, body) -> None:
    """Folds a hub's contract change (layer `_contract`, in a hub's mirror) as the layers ever named by then
    (`with_newer`), when that moves, drops or adds a layer's file."""
    last = db.execute(f"SELECT layers FROM {TABLE} WHERE seq < ? ORDER BY seq DESC LIMIT 1", (seq,)).fetchone()
    before = lenient_contract(json.loads(last[0])) if last else Contract()
    ever = with_newer(before, lenient_contract(body.layers))
    if placement(ever) != placement(before):
        db.execute(f"INSERT OR REPLACE INTO {TABLE} VALUES (?,?,?)",
                   (seq, _json(ever), _json(before)))


def _json(contract: Contract) -> str:
    return json.dumps(msgspec.to_builtins(contract.layers), sort_keys=True)


def with_newer(ever: Contract, newer: Contract) -> Contract:
    """`ever` with the layers of a newer contract, each placed as the newer one says; a layer from before
    whose place another layer now takes (the same path, or one inside the other) is left out."""
    kept = {name: spec for name, spec in ever.layers.items() if name not in newer.layers and not any(
        paths_overlap(spec.path, other.path) for other in newer.layers.values())}
    return Contract(layers={**kept, **newer.layers})


def placement(contract) -> dict[str, tuple[str, str]]:
    """Where and how each shared layer is rendered: all of a contract that decides its files."""
    return {name: (spec.path, spec.format) for name, spec in (contract.layers.items() if contract else ())}


def hub_contract(db, taken: int | None, first: int | None) -> Contract | None:
    """The hub's contract in force by IN_FORCE's seqs; None when this workspace recorded none (the current one holds)."""
    if taken is not None:
        return lenient_contract(json.loads(db.execute(f"SELECT layers FROM {TABLE} WHERE seq = ?", (taken,)).fetchone()[0]))
    if first is not None:
        return lenient_contract(json.loads(db.execute(f"SELECT previous FROM {TABLE} WHERE seq = ?", (first,)).fetchone()[0]))
    return None


def changes(db, upto: int) -> list[int]:
    """The seqs at which a contract taken moved, dropped or added a file, newest first."""
    return [seq for (seq,) in db.execute(f"SELECT seq FROM {TABLE} WHERE seq <= ? ORDER BY seq DESC", (upto,))]


def named_layers(db) -> set[str]:
    """Every layer a recorded contract named (a dropped one too)."""
    names = set()
    for layers, previous in db.execute(f"SELECT layers, previous FROM {TABLE}"):
        names.update(json.loads(layers), json.loads(previous))
    return names


def present(db) -> bool:
    """Views that have the table (read-only views made before it place every moment by the current contract)."""
    return db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (TABLE,)).fetchone() is not None
