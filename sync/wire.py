"""The wire protocol: every request and response body is one of these Structs (JSON, optionally zstd; a pull
answer in msgpack to a client that accepts it)."""

from typing import ClassVar

import msgspec

from eventstore.envelope import Event
from eventstore.layers import Contract, ContractLayer

__all__ = ["MAX_PULL", "MSGPACK", "Contract", "ContractLayer", "ContractResponse", "Problem", "PullPage", "PullResponse", "PushRequest", "PushResponse",
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


class PullPage(msgspec.Struct):
    """A PullResponse with each event left encoded: what a consumer reads, so that one event that does not
    decode is rejected alone instead of spoiling its page, and what the hub writes in msgpack, each event
    made from its stored bytes (sync.storage.placed_stored) without decoding them."""

    events: list[msgspec.Raw]
    cursor: str
    more: bool
    head: int = 0
    packed: ClassVar[bool] = False
    """Whether its events are msgpack (else JSON)."""


class ContractResponse(msgspec.Struct):
    """The contract in force, its position, the token's agent, and the hub's head (its last position, in any
    layer, when it answered: how far a puller has to go; 0 from a hub that does not say)."""

    contract: Contract
    position: int
    agent: str
    head: int = 0
    holds: dict[str, int] | None = None
    """Asked for (`holds`: event ids), the position of each of those the hub holds; None when not asked (or from a
    hub that does not answer it)."""
    now: int = 0
    """The hub's clock when it answered (milliseconds since 1970; 0 from a hub that does not say): a push holds back
    only the events the hub's clock refuses (`sync.hub.check_minted`), whatever this machine's clock says."""


class Problem(msgspec.Struct, omit_defaults=True):
    """RFC 9457 problem details; `type` is stable."""

    type: str
    title: str
    status: int
    detail: str = ""
    field: str = ""
    """The part of the request at fault, like `events[0].body.slug` (an extension member)."""


PROBLEM_BASE = "https://mindlog.dev/problems/"

MSGPACK = "application/msgpack"
"""The media type of a pull answer in msgpack (asked with `Accept`): the events are sent as the hub stores them
(msgpack), with neither end encoding them again. Everything else, and a pull without it, is JSON."""

MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""The largest request body the hub reads, compressed or decompressed: an event's 8 MiB body, escaped in JSON. A push
is cut into requests of half that at most (`sync.client.push_bodies`)."""

MAX_PULL = 20_000
"""The most events one pull answer holds: a catch-up's pages are this large, so a million events take 50
requests and 50 local transactions."""
