"""Layers one agent declares for itself, with no hub: the typed-entry files of the memory architecture.

A workspace declares a local layer in its config, as an event (`layers.<name>` = path and format),
so `mem entry add decisions "[DECISION] ..."` works alone and the entry file is materialised like a
page. The declared layers join the hub's contract for rendering and writing only: a push never reads
them, and a pull does not take a hub layer of the same name, so a local layer never leaves the agent
and no teammate's events mix into it; when a hub layer has its name or a path overlapping its path, the local
layer wins, for this agent.
"""

import re

from eventstore.errors import InvalidInput, UnsafePath, for_each
from eventstore.layers import (FORMATS, LAYER_NAME_PATTERN, Contract, ContractLayer, is_reserved,
                               path_problem, paths_overlap, why_reserved)

from .adf import config_object

_NAME = re.compile(LAYER_NAME_PATTERN)


def declared(config: dict, agent: str) -> dict[str, ContractLayer]:
    """The local layers in a config (malformed ones, set by hand with `mem config set`, are skipped). None is
    scanned for secrets by a hub (`scan_secrets` false): it is never pushed, so `--allow-secret` puts a secret
    in one as in a page."""
    found = {}
    for name, spec in sorted(config_object(config, "layers").items()):
        if not (isinstance(spec, dict) and isinstance(spec.get("path"), str) and _NAME.match(name)
                and spec.get("format", "entries") in FORMATS):
            continue
        try:
            found[name] = ContractLayer(path=spec["path"], format=spec.get("format", "entries"), producers=[agent],
                                        consumers=[agent], scan_secrets=False)
        except ValueError:
            continue
    return found


def merged(hub: Contract | None, config: dict, agent: str) -> Contract | None:
    """The hub's contract plus the local layers, but the hub's layers a local one shadows (`shadowed`); None when
    neither exists."""
    local = declared(config, agent)
    if not local:
        return hub
    hub_layers = hub.layers if hub else {}
    left_out = shadowed(hub_layers, local)
    return Contract(layers={**{name: spec for name, spec in hub_layers.items() if name not in left_out}, **local})


def shadowed(hub_layers: dict[str, ContractLayer], local: dict[str, ContractLayer]) -> dict[str, str]:
    """The hub's layers this agent does not take, each with why: one named as a local layer, or whose path overlaps
    a local layer's (added to the hub's contract after it). The local layer wins, for this agent: a hub layer of its
    name must not draw its private events out, and no teammate's events may land in its file."""
    found = {}
    for name, spec in sorted(hub_layers.items()):
        if name in local:
            found[name] = f"layer {name!r} is this agent's local layer: the hub's layer of that name is not taken here"
            continue
        mine = next((other for other, own in local.items() if paths_overlap(own.path, spec.path)), None)
        if mine is not None:
            found[name] = (f"the hub's layer {name!r} ({spec.path}) is not taken here: it overlaps this agent's local "
                           f"layer {mine!r} ({local[mine].path}), which wins")
    return found


def checked_spec(key: str, value, contract: Contract | None) -> dict:
    """The value of config key `layers.<name>` (set by `mem config set`), checked as `mem layer add` checks it."""
    name = key.removeprefix("layers.")
    check_name(name)
    if not (isinstance(value, dict) and isinstance(value.get("path"), str)
            and isinstance(value.get("format", "entries"), str) and set(value) <= {"path", "format"}):
        formats = " or ".join(f'"{format}"' for format in sorted(FORMATS))
        raise InvalidInput(f"{key} declares a local layer: give {{\"path\": PATH, \"format\": {formats}}} "
                           f"(as `mem layer add` does), not {value!r:.80}")
    return check(name, value["path"], value.get("format", "entries"), contract)


def check_name(name: str) -> None:
    if is_reserved(name):
        raise InvalidInput(f"layer name {name!r} is reserved: {why_reserved(name)}")
    if not _NAME.match(name):
        raise InvalidInput(f"layer name {name!r} must be lowercase letters, digits, '-' or '_', starting with a "
                           "letter")


def check(name: str, path: str, format: str, contract: Contract | None) -> dict:
    """The config value declaring a local layer, or a refusal."""
    check_name(name)
    if format not in FORMATS:
        raise InvalidInput(f"a layer's format is {' or '.join(FORMATS)}, not {format!r}")
    problem = path_problem(path, format)
    if problem:
        raise InvalidInput(f"layer path {path!r}: {problem}")
    for other, spec in (contract.layers.items() if contract else ()):
        if other == name:
            raise InvalidInput(f"layer {name!r} already exists (at {spec.path})")
        if paths_overlap(spec.path, path):
            raise InvalidInput(f"{path} overlaps layer {other!r} ({spec.path})")
    return {"path": path, "format": format}


def refuse_own_files(name: str, spec: dict, own_paths: list[str]) -> None:
    """A local layer may not be declared where the agent's own file (`mem file write`) is: that file would keep its
    path and the layer's file would never be written (as when a hub's contract moves a layer there: `Views.blocked`).
    A hub's change is not the agent's to refuse; its own declaration is."""
    layer = {name: ContractLayer(path=spec["path"], format=spec["format"], producers=[], consumers=[])}
    taken = [path for path in own_paths if layer_owning(path, layer)]
    if taken:
        more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
        raise InvalidInput(f"{taken[0]}{more} is this agent's own file: layer {name!r} cannot be placed over it. "
                           f"Choose another path, or move the file first (`mem show {taken[0]} | mem file write "
                           f"OTHER-PATH --file -`, then `mem file delete {taken[0]}`)")


def layer_owning(path: str, layers: dict[str, ContractLayer]) -> str | None:
    """The layer whose events own `path` (its entries file, or a page in its folder), or None."""
    return next((name for name, spec in layers.items()
                 if path == spec.path or (spec.format == "pages" and path.startswith(spec.path))), None)


def refuse_layer_path(path: str, contract: Contract | None) -> None:
    """`mem file write` may not write a layer's file: the layer's events own it (and its bytes on disk)."""
    name = layer_owning(path, contract.layers if contract else {})
    if name is not None:
        spec = contract.layers[name]
        how, tool = ((f"`mem entry add {name} \"[TYPE] ...\"`", f"entry_add with layer {name}")
                     if spec.format == "entries" else
                     (f"`mem page write SLUG --layer {name}`", f"create of /memories/{spec.path}SLUG.md"))
        raise InvalidInput(**for_each(f"{path} belongs to layer {name!r}; write it with ", how, tool))  # nc36b
    twin = next((name for name, spec in (contract.layers if contract else {}).items()
                 if paths_overlap(path, spec.path)), None)
    if twin is not None:  # `memory/Insights.md` beside the layer's memory/insights.md: one file on macOS (nc24a)
        raise UnsafePath(f"{path} cannot be written: layer {twin!r} has {contract.layers[twin].path} there, the same "
                         "name but for letter case or Unicode normalization, or one inside the other")
