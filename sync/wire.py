"""The wire protocol: every request and response body is one of these Structs (JSON, optionally zstd)."""

import msgspec

from eventstore.envelope import Event
from eventstore.layers import Contract, ContractLayer

__all__ = ["MAX_PULL", "Contract", "ContractLayer", "ContractResponse", "Problem", "PullResponse", "PushRequest", "PushResponse",
           "PushResult"]


class PushRequest(msgspec.Struct, forbid_unknown_fields=True):
    events: list[Event]


class PushResult(msgspec.Struct):
    id: str
    position: int
    duplicate: bool


class PushResponse(msgspec.Struct):
    results: list[PushResult]


class PullResponse(msgspec.Struct):
    """Events after the cursor, in hub order; each event's `seq` is its hub position. `head` is the hub's
    last position (in any layer) when the page was read: how far a puller has to go."""

    events: list[Event]
    cursor: str
    more: bool
    head: int = 0


class ContractResponse(msgspec.Struct):
    """The contract in force, its position, the token's agent, and the hub's head (its last position, in any
    layer, when it answered: how far a puller has to go; 0 from a hub that does not say)."""

    contract: Contract
    position: int
    agent: str
    head: int = 0


class Problem(msgspec.Struct, omit_defaults=True):
    """RFC 9457 problem details; `type` is stable."""

    type: str
    title: str
    status: int
    detail: str = ""
    field: str = ""
    """The part of the request at fault, like `events[0].body.slug` (an extension member)."""


PROBLEM_BASE = "https://mindlog.dev/problems/"

MAX_PULL = 20_000
"""The most events one pull answer holds: a catch-up's pages are this large, so a million events take 50
requests and 50 local transactions."""
