"""Producer/consumer contracts: which agent may write which shared layer, and who reads it."""

import re
import tomllib

import msgspec

from eventstore.errors import InvalidInput

from eventstore.layers import Contract, ContractLayer

LAYER_KINDS = {"entries": ("entry.append", "redaction"),
               "pages": ("page.ingest", "page.update", "page.delete", "page.rename", "redaction")}
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")


def parse_contract(text: str) -> Contract:
    """Parses and checks a contract file (TOML with a [layers.NAME] table per layer)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"the contract is not valid TOML: {exc}") from None
    try:
        contract = msgspec.convert(data, Contract)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"the contract is not valid: {exc}") from None
    for name, layer in contract.layers.items():
        if not _NAME.match(name):
            raise InvalidInput(f"layer name {name!r} must be lowercase letters, digits, '-' or '_'")
        path = layer.path
        if path.startswith("/") or ".." in path.split("/") or "\\" in path or not path:
            raise InvalidInput(f"layer {name}: path {path!r} must be relative, inside the workspace")
        if path == "mind.md" or path.split("/")[0] in ("mind", ".mem"):
            raise InvalidInput(f"layer {name}: path {path!r} belongs to the wiki or to mindlog itself")
        if layer.format == "pages" and not path.endswith("/"):
            raise InvalidInput(f"layer {name}: a pages layer's path is a directory ending in '/'")
        if layer.format == "entries" and not path.endswith(".md"):
            raise InvalidInput(f"layer {name}: an entries layer's path is a .md file")
        if not layer.producers or not layer.consumers:
            raise InvalidInput(f"layer {name}: producers and consumers must not be empty")
    paths = [layer.path for layer in contract.layers.values()]
    if len(set(paths)) != len(paths):
        raise InvalidInput("two layers share one path")
    return contract


def produces(contract: Contract, agent: str, layer: str) -> bool:
    spec = contract.layers.get(layer)
    return spec is not None and ("*" in spec.producers or agent in spec.producers)


def consumes(contract: Contract, agent: str, layer: str) -> bool:
    spec = contract.layers.get(layer)
    return spec is not None and ("*" in spec.consumers or agent in spec.consumers)


def consumed_layers(contract: Contract, agent: str) -> list[str]:
    return sorted(name for name in contract.layers if consumes(contract, agent, name))


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


__all__ = ["Contract", "ContractLayer", "LAYER_KINDS", "consumed_layers", "consumes",
           "parse_contract", "produces", "to_toml"]
