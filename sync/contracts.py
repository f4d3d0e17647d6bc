"""Producer/consumer contracts: which agent may write which shared layer, and who reads it.

The contract type and who-may-do-what (`produces`, `consumes`) live in eventstore.layers, so the
projections use them too; this module reads and writes contract files.
"""

import re
import tomllib

import msgspec

from eventstore.errors import InvalidInput
from eventstore.layers import (FORMATS, LAYER_KINDS, LAYER_NAME_PATTERN, Contract, ContractLayer, consumed_layers,
                               consumes, is_reserved, lenient_contract, path_problem, paths_overlap,
                               produced_layers, produces, why_reserved)


def parse_contract(text: str) -> Contract:
    """Parses and checks a contract file (TOML with a [layers.NAME] table per layer)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"the contract is not valid TOML: {exc}") from None
    for name in data.get("layers", {}) if isinstance(data.get("layers"), dict) else ():
        if is_reserved(name):
            raise InvalidInput(f"layer name {name!r} is reserved: {why_reserved(name)}")
        if not re.match(LAYER_NAME_PATTERN, name):
            raise InvalidInput(f"layer name {name!r} must be lowercase letters, digits, '-' or '_'")
        spec = data["layers"][name]
        if isinstance(spec, dict) and isinstance(spec.get("path"), str):
            problem = path_problem(spec["path"], spec.get("format"))
            if problem:
                raise InvalidInput(f"layer {name}: path {spec['path']!r}: {problem}")
    try:
        contract = msgspec.convert(data, Contract)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"the contract is not valid: {_layer_problem(data) or exc}") from None
    named = sorted(contract.layers.items())
    for i, (name, spec) in enumerate(named):
        for other, other_spec in named[i + 1:]:
            if paths_overlap(spec.path, other_spec.path):
                raise InvalidInput(f"layers {name} ({spec.path}) and {other} ({other_spec.path}) overlap: a file "
                                   "would belong to both" + _in_any_case(spec.path, other_spec.path))
    return contract


def _in_any_case(a: str, b: str) -> str:
    """Says why two overlapping paths overlap when only letter case tells them apart."""
    same_spelling = a.startswith(b) or b.startswith(a)
    return "" if same_spelling else " on a filesystem that ignores letter case (macOS, Windows)"


def _layer_problem(data: dict) -> str | None:
    """The first layer that does not convert, as `layers.NAME.FIELD: why` (msgspec says `$.layers[...]`)."""
    layers = data.get("layers")
    for name, spec in layers.items() if isinstance(layers, dict) else ():
        try:
            msgspec.convert(spec, ContractLayer)
        except msgspec.ValidationError as exc:
            why, _, at = str(exc).partition(" - at `$")
            if at == ".format`" and why.startswith("Invalid enum value"):  # which values are: `entry` for `entries`
                why += f" (a layer's format is {' or '.join(map(repr, FORMATS))})"
            return f"layers.{name}{at.rstrip('`')}: {why}"
    return None


def to_toml(contract: Contract) -> str:
    out = []
    for name, layer in sorted(contract.layers.items()):
        out.append(f"[layers.{name}]")
        out.append(f'path = "{layer.path}"')
        out.append(f'format = "{layer.format}"')
        out.append("producers = [" + ", ".join(f'"{p}"' for p in layer.producers) + "]")
        out.append("consumers = [" + ", ".join(f'"{c}"' for c in layer.consumers) + "]")
        if not layer.scan_secrets:
            out.append("scan_secrets = false")
        out[-1] += "\n"
    return "\n".join(out)


__all__ = ["Contract", "ContractLayer", "LAYER_KINDS", "consumed_layers", "consumes", "lenient_contract",
           "parse_contract", "produced_layers", "produces", "to_toml"]


def backfill_agent(agent: str, layer: str) -> str:
    """The name the hub records an agent's backfill of `layer` under, as if an agent's pulls (hub agent names never
    hold a '/')."""
    return f"{agent}/{layer}"


class Unreceived(msgspec.Struct):
    """A layer's events an agent never received: those up to `upto`, its pull cursor when the contract at hub position
    `since` made it a consumer of `layer` (the hub sends an agent only its layers' events, so its cursor had passed
    them), but those up to `backfilled`, what its client fetched of that past since (sync/client.py `_backfill`)."""

    layer: str
    since: int
    upto: int
    backfilled: int

    def missed(self, position: int) -> bool:
        return self.backfilled < position <= self.upto


def became_consumer(contracts: list, agent: str, layer: str):
    """The contract event (of `contracts`, the hub's in order, up to the moment asked about) from which `agent` has
    consumed `layer` without a break, or None when it has since the first contract (its pulls brought every event)."""
    since = None
    for event, contract in contracts:
        if not consumes(contract, agent, layer):
            since = None
        elif since is None:
            since = event
    return None if since is contracts[0][0] else since
