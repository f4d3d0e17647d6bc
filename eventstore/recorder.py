"""The one interface every event-log backend implements (SQLite here; the hub has its own storage)."""

import functools
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence

import msgspec

from .envelope import Event, compute_digest, decode_body, pack_body, unpack_body
from .errors import IdConflict
from .kinds import ImportGap

ZERO_CHAIN = bytes(32)


def chain_link(previous: bytes | None, digest: bytes) -> bytes:
    """The next link of the hash chain: sha256(previous link + this event's digest)."""
    return hashlib.sha256((previous or ZERO_CHAIN) + digest).digest()


def id_bytes(id: str) -> bytes:
    return bytes.fromhex(id.replace("-", ""))


def id_text(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def row_to_event(row) -> Event:
    """A stored row (seq, id bytes, ts, recorded_at, agent, layer, kind, codec, body, digest, chain)."""
    seq, id, ts, recorded_at, agent, layer, kind, codec, body, digest, chain = row
    return Event(id=id_text(id), ts=ts, agent=agent, layer=layer, body=decode_body(unpack_body(codec, body)),
                 digest=digest.hex(), seq=seq, recorded_at=recorded_at, chain=chain.hex())


def skipped(body) -> int:
    """Seqs left unused before this event: only an ImportGap skips any (an imported file's gap)."""
    return body.skipped if isinstance(body, ImportGap) else 0


def plan_rows(prepared, known: dict[str, tuple[str, int]], seq: int, chain: bytes, recorded_at: int):
    """Numbers a batch after the log's last (seq, chain): returns the rows to insert, each event's seq,
    and the new last (seq, chain). `known` maps ids already stored to (digest, seq); ids repeated in
    the batch are stored once. A known id with another digest refuses the whole batch."""
    rows, seqs = [], []
    for event, raw in prepared:
        found = known.get(event.id)
        if found is not None:
            if found[0] != event.digest:
                raise IdConflict(f"event {event.id} is already in the log with a different digest")
            seqs.append(found[1])
            continue
        seq += 1 + skipped(event.body)
        digest = bytes.fromhex(event.digest)
        chain = chain_link(chain, digest)
        codec, stored = pack_body(raw)
        rows.append((seq, id_bytes(event.id), event.ts, recorded_at, event.agent, event.layer, event.kind,
                     codec, stored, digest, chain))
        known[event.id] = (event.digest, seq)
        seqs.append(seq)
    return rows, seqs, seq, chain


class VerifyReport(msgspec.Struct):
    ok: bool
    checked: int
    head: int
    first_bad_seq: int | None = None
    problem: str | None = None


class Recorder(ABC):
    """An append-only, commit-ordered event log whose seqs are gapless but for the seqs an ImportGap
    event says it skips (`skipped`), and the small key/value store (sync cursors) that commits with it.
    Every caller (the projections, sync, the CLI) uses only these methods, so any backend that passes
    tests/recorder_conformance.py can hold a workspace's log.

    `append` is atomic for the whole batch and idempotent per event id: an id already present
    with the same digest returns its existing seq, with another digest the batch is refused.
    """

    # --- write --------------------------------------------------------------------------------

    @abstractmethod
    def append(self, events: Sequence[Event], *, state: dict[str, str] | None = None,
               verify: bool = False) -> list[int]:
        """Appends atomically and returns each event's seq. `state` rows (a sync cursor) commit in the
        same transaction; `verify` recomputes every digest first (events from elsewhere)."""

    @abstractmethod
    def state(self, key: str) -> str | None:
        """A value kept with the log (a sync cursor), or None."""

    @abstractmethod
    def set_state(self, key: str, value: str) -> None: ...

    # --- read ---------------------------------------------------------------------------------

    @abstractmethod
    def read_rows(self, after: int = 0, upto: int | None = None, *, kinds: Sequence[str] | None = None,
                  layers: Sequence[str] | None = None, agent: str | None = None, since_ms: int | None = None,
                  limit: int | None = None, newest_first: bool = False) -> Iterator[tuple]:
        """Stored rows in seq order (see `row_to_event`), filtered by seq range, kind, layer, agent, time."""

    def read(self, after=0, upto=None, *, kinds=None, layers=None, agent=None, since_ms=None, limit=None,
             newest_first=False) -> Iterator[Event]:
        for row in self.read_rows(after, upto, kinds=kinds, layers=layers, agent=agent, since_ms=since_ms,
                                  limit=limit, newest_first=newest_first):
            yield row_to_event(row)

    @abstractmethod
    def fold_rows(self, after: int, upto: int) -> Iterator[tuple]:
        """What the projections fold, in seq order and undecoded: (seq, id bytes, ts, layer, kind, codec,
        stored body, agent). `agent` may be None for events of the `mind` layer (the wiki fold does not
        keep it), which spares a column per row on a replay."""

    @abstractmethod
    def get(self, id: str) -> Event | None: ...

    @abstractmethod
    def get_by_seq(self, seq: int) -> Event | None: ...

    @abstractmethod
    def seq_after(self, after: int, count: int) -> int | None:
        """The seq of the `count`-th event after seq `after` (None when fewer follow): a batch of
        `count` events, whatever seqs an ImportGap skipped."""

    @abstractmethod
    def head(self) -> int:
        """The last seq (0 for an empty log)."""

    @abstractmethod
    def recorded_at(self, seq: int) -> int | None:
        """When this seq was recorded here (ms); a seq an ImportGap skipped counts as recorded with that
        ImportGap; None after the head."""

    @abstractmethod
    def seq_at(self, recorded_at_ms: int) -> int:
        """The last seq recorded at or before this time (0 when none)."""

    @abstractmethod
    def verify(self, progress: Callable[[int], None] | None = None) -> VerifyReport:
        """Checks every event (see `verify_rows`); `progress` is called with the count checked so far."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def verify_rows(rows: Iterable[tuple], head: int, progress=None) -> VerifyReport:
    """Checks stored rows (seq, id, ts, recorded_at, agent, layer, kind, codec, body, digest, chain) in
    seq order: gapless seqs (but for what an ImportGap skips), bodies that decode to their kind,
    digests, and the chain."""
    expected_seq, chain, checked = 0, ZERO_CHAIN, 0
    for seq, id, ts, _recorded, agent, layer, kind, codec, body, digest, stored_chain in rows:
        bad = functools.partial(VerifyReport, ok=False, checked=checked, head=head, first_bad_seq=seq)
        try:
            raw = unpack_body(codec, bytes(body))
            decoded = decode_body(raw)
        except Exception as exc:  # noqa: BLE001 - any failure here is corruption to report
            return bad(problem=f"body does not decode: {exc}")
        expected_seq += 1 + skipped(decoded)
        if seq != expected_seq:
            return bad(problem=f"gap: expected seq {expected_seq}, found {seq}")
        if decoded.__struct_config__.tag != kind:
            return bad(problem=f"kind column {kind!r} disagrees with the body's {decoded.__struct_config__.tag!r}")
        digest = bytes(digest)
        if compute_digest(id, ts, agent, layer, kind, raw) != digest.hex():
            return bad(problem="digest mismatch: the event's content was changed after it was appended")
        chain = chain_link(chain, digest)
        if chain != bytes(stored_chain):
            return bad(problem="chain mismatch: an event before this one was changed, removed or reordered")
        checked += 1
        if progress:
            progress(checked)
    return VerifyReport(ok=True, checked=checked, head=head)
