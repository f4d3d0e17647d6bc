"""Layer names, and the contract that shares layers: the schema the hub enforces and the projections
render each shared layer by.

The names mindlog uses itself are defined here once. The contract type refuses them (and every path
that would land in the wiki, the log, or a hidden directory) as it is decoded, so no contract can
make a private layer shared; the hub and the client refuse them again, independently.
"""

import posixpath
import re
from typing import Annotated, Literal, get_args

import msgspec

from .errors import InvalidInput
from .kinds import ENTRIES, PAGES, kinds_of
from .validate import WINDOWS_REFUSES, folded, segment_problem

MIND = "mind"
"""The wiki: mind.md, mind/<slug>.md, mind/log.md."""
LOOP = "loop"
"""The transcript and its compactions."""
AGENT = "agent"
"""Files, messages and config of the agent (ADF's other tables)."""
CONTRACT_LAYER = "_contract"
"""The hub's own layer: each contract change is an event in it."""

PRIVATE_LAYERS = frozenset({MIND, LOOP, AGENT})
RESERVED_LAYERS = PRIVATE_LAYERS | {CONTRACT_LAYER}

Format = Literal["pages", "entries"]
FORMATS: tuple[str, ...] = get_args(Format)
assert set(FORMATS) == {PAGES, ENTRIES}, "each shared-layer format is a kind group of the same name"
LAYER_KINDS: dict[str, frozenset[str]] = {format: kinds_of(format) | {"redaction"} for format in FORMATS}
"""The event kinds a shared layer of each format takes (a redaction travels in the layer of its targets)."""

RESERVED_PATH_ROOTS = frozenset({"mind.md", MIND, ".mem"})
"""First path segments a shared layer may not use (compared case-insensitively)."""

_RESERVED_ALTERNATION = "|".join(sorted(RESERVED_LAYERS))
LAYER_NAME_PATTERN = rf"^(?!(?:{_RESERVED_ALTERNATION})$)[a-z][a-z0-9_-]{{0,63}}$"

LayerName = Annotated[str, msgspec.Meta(
    pattern=LAYER_NAME_PATTERN,
    description="lowercase letters, digits, '-' or '_', starting with a letter; not one of "
                + ", ".join(sorted(PRIVATE_LAYERS)))]
AGENT_NAME = r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"
"""An agent's name: what a contract can name (AgentPattern), so what `mem init` and `mem hub agent add` take."""
AgentPattern = Annotated[str, msgspec.Meta(pattern=rf"^(\*|{AGENT_NAME})$")]
AgentList = Annotated[list[AgentPattern], msgspec.Meta(min_length=1)]


def check_agent_name(name: str) -> None:
    """Refuses a name no contract could name (its producers and consumers match AGENT_NAME), so that an agent is never
    one only `*` reaches."""
    if not isinstance(name, str) or re.fullmatch(AGENT_NAME, name, re.ASCII) is None:
        raise InvalidInput(f"agent name {name!r} must be 1 to 64 ASCII letters, digits, '-' or '_', starting with a "
                           "letter or digit")


def is_reserved(layer: str) -> bool:
    return layer in RESERVED_LAYERS


def why_reserved(layer: str) -> str:
    """Why a reserved layer name can never be a shared layer (said by every refusal of one)."""
    if layer == CONTRACT_LAYER:
        return "the hub keeps its contract's history there"
    return f"{', '.join(sorted(PRIVATE_LAYERS))} are each agent's own and are never shared"


def takes(spec: "ContractLayer", kind: str) -> bool:
    """Whether a layer of `spec`'s format takes an event of `kind` (the kind a redacted event was written as)."""
    return kind in LAYER_KINDS[spec.format]


def format_of(kind: str) -> str | None:
    """The format whose layers an event of `kind` belongs to (None for a redaction, which travels in either)."""
    return next((format for format in FORMATS if kind in kinds_of(format)), None)


def paths_overlap(a: str, b: str) -> bool:
    """Whether two layers' paths cannot both be: the same path, one inside the other's folder, or one under the
    other's file (`memory/d.md/sub.md` beside `memory/d.md`: no filesystem holds both, and every command after the
    second's first entry failed on the disk), in any letter case (on macOS and Windows `Content/Drafts/x.md` is a
    file of `content/drafts/`) and in any Unicode normalization (`café` in NFC and in NFD: one name on macOS)."""
    a, b = folded(a).rstrip("/"), folded(b).rstrip("/")
    return a == b or b.startswith(a + "/") or a.startswith(b + "/")


def path_problem(path: str, format: str) -> str | None:
    """Why `path` cannot hold a shared layer of `format`, or None.

    A path must be written in its normal form (no '.', '..' or empty segments), relative, printable,
    outside the wiki and mindlog's own directory, and in no hidden directory (`.git/hooks/`); each of its
    names must be one every filesystem takes, as a page's slug must (`validate.segment_problem`)."""
    if not path:
        return "the path is empty"
    if any(ord(c) < 32 or ord(c) == 127 or c in "\\\u2028\u2029\x85" for c in path):
        return "the path contains a control character, a line separator or a backslash"
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        return "the path is absolute; give one relative to the workspace"
    directory = path.endswith("/")
    segments = path[:-1].split("/") if directory else path.split("/")
    if ".." in segments:
        return "the path must stay inside the workspace (no '..')"
    if any(segment in ("", ".") for segment in segments):
        return "the path has an empty or '.' segment; write it in normal form"
    if posixpath.normpath(path) + ("/" if directory else "") != path:
        return "the path is not in normal form"
    if segments[0].lower() in RESERVED_PATH_ROOTS:
        return "the path belongs to the wiki or to mindlog itself"
    if any(segment.startswith(".") for segment in segments):
        return "the path enters a hidden file or directory"
    if len(path) > 512:
        return "the path is longer than 512 characters"
    for segment in segments:
        if problem := segment_problem(segment):
            return f"the path {problem}"
    if any(mark in path for mark in WINDOWS_REFUSES):
        return f"the path holds one of {WINDOWS_REFUSES}, which Windows refuses in a name"
    if format == PAGES and not directory:
        return "a pages layer's path is a directory ending in '/'"
    if format == ENTRIES and not path.endswith(".md"):
        return "an entries layer's path is a .md file"
    return None


class ContractLayer(msgspec.Struct, forbid_unknown_fields=True):
    path: str
    format: Format
    producers: AgentList
    consumers: AgentList
    scan_secrets: bool = True

    def __post_init__(self):
        problem = path_problem(self.path, self.format)
        if problem:
            raise ValueError(f"path {self.path!r}: {problem}")


class Contract(msgspec.Struct, forbid_unknown_fields=True):
    layers: dict[LayerName, ContractLayer] = {}


def lenient_contract(layers: dict) -> Contract:
    """A stored contract, keeping only the layers that pass today's rules (for history written before them)."""
    kept = {}
    for name, spec in layers.items() if isinstance(layers, dict) else ():
        try:
            kept.update(msgspec.convert({"layers": {name: spec}}, Contract).layers)
        except msgspec.ValidationError:
            continue
    return Contract(layers=kept)


# `produces` and `consumes` refuse reserved layers once more, so a contract that got past the type
# (built in code, or stored before the rule) still never shares a private layer.
def produces(contract: Contract, agent: str, layer: str) -> bool:
    spec = contract.layers.get(layer)
    return spec is not None and not is_reserved(layer) and ("*" in spec.producers or agent in spec.producers)


def consumes(contract: Contract, agent: str, layer: str) -> bool:
    spec = contract.layers.get(layer)
    return spec is not None and not is_reserved(layer) and ("*" in spec.consumers or agent in spec.consumers)


def left(contract: Contract | None, agent: str, layer: str) -> bool:
    """A layer this agent neither produces nor consumes (any more): nothing of it comes from the hub or goes there,
    so what its log holds of it is its own copy (an agent may redact it; that redaction is never pushed)."""
    return contract is None or not (produces(contract, agent, layer) or consumes(contract, agent, layer))


ONLY_REDACTIONS = frozenset({"redaction"})
"""The kinds taken of a layer that takes redactions alone (of an agent's own events, of a layer it produces alone)."""


def redacts_own_alone(contract: Contract, agent: str, layer: str, kind: str) -> bool:
    """Whether an event of `kind` in `layer` by an agent that consumes the layer without producing it (any more) goes
    to the hub all the same: a redaction naming only the agent's own events (checked where the events are known).
    Forgetting what one wrote does not end with the right to write more: a producer demoted after a leak takes it
    back itself, not only through the hub's administrator (nc28b)."""
    return kind == "redaction" and consumes(contract, agent, layer) and not produces(contract, agent, layer)


def produced_layers(contract: Contract, agent: str) -> list[str]:
    return sorted(name for name in contract.layers if produces(contract, agent, name))


def consumed_layers(contract: Contract, agent: str) -> list[str]:
    return sorted(name for name in contract.layers if consumes(contract, agent, name))


def produced_only(contract: Contract, agent: str) -> list[str]:
    """The layers `agent` produces without consuming them: of those, a pull brings it the redactions alone."""
    return sorted(name for name in contract.layers if produces(contract, agent, name)
                  and not consumes(contract, agent, name))
