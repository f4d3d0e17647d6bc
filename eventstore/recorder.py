"""The one interface every event-log backend implements (SQLite here; the hub has its own storage)."""

import hashlib
import struct
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence

import msgspec
import zstandard

from .envelope import (CODEC_RAW, CODEC_REDACTED, CODEC_ZSTD, COMPRESS_THRESHOLD, Event, compress, compute_digest,
                       decode_body, encode_body, unpack_body)
from .errors import Damaged, IdConflict, InvalidInput, MemError
from .ids import is_uuid, now_ms, uuid_bytes, uuid_text
from .kinds import KINDS, ImportGap, Redacted
from .redaction import redacted_form

ZERO_CHAIN = bytes(32)
StateRows = dict[str, str] | Callable[[list[int]], dict[str, str]] | None
_sha256 = hashlib.sha256
try:  # CPython's own sha256 (`_sha2` from 3.12, `_sha256` before): the same digest, far less code to run cold
    from _sha2 import sha256 as small_sha256
except ImportError:
    try:
        from _sha256 import sha256 as small_sha256
    except ImportError:
        small_sha256 = hashlib.sha256
_link_input = struct.Struct(">32s32sQQ").pack  # previous link, digest, seq and recorded_at (8 bytes each, big-endian)
_EMPTY = bytearray()
"""Never changed: `_EMPTY + value` is a new bytearray copy of `value`, made by the `+` operator's own slot, which
costs about half what `bytearray(value)` does (a type call that parses its arguments): four a row (see plan_rows)."""
TAGS = {cls: tag for tag, cls in KINDS.items()}


def chain_link(previous: bytes | None, digest: bytes, seq: int, recorded_at: int) -> bytes:
    """The next link of the hash chain: sha256(previous link, digest, seq, recorded_at). The chain
    covers where and when this log recorded the event, which `--at` reads depend on."""
    return _sha256(_link_input(previous or ZERO_CHAIN, digest, seq, recorded_at)).digest()


id_bytes, id_text = uuid_bytes, uuid_text


ROW_FAULTS = (MemError, TypeError, AttributeError, ValueError, OverflowError, RecursionError, zstandard.ZstdError,
              msgspec.MsgspecError)
"""What reading a stored row that was changed outside mindlog raises (a body that is not zstd but marked so, a
TEXT value where bytes were written, a body that does not decode): `damaged_row` turns it into one line."""


def damaged_row(seq, exc: BaseException) -> Damaged:
    """A stored row that does not read as mindlog wrote it, named by its seq, `mem verify` named for the rest."""
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return Damaged(f"the event log's row at seq {seq} is damaged ({detail}): it was changed outside mindlog; "
                   "`mem verify` names the first bad seq")


def _type_name(value) -> str:
    return "text" if isinstance(value, str) else type(value).__name__


def stored_body(codec: int, body) -> bytes:
    """A stored body's bytes as written (zstd undone), each way a row changed outside mindlog can fail to be one
    refused in words (InvalidInput): for `damaged_row`, once the fast path has failed on a row."""
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise InvalidInput(f"its body is {_type_name(body)}, not the bytes mindlog wrote")
    if codec == CODEC_ZSTD:
        try:
            return unpack_body(codec, bytes(body))
        except zstandard.ZstdError as exc:
            raise InvalidInput(f"its body is marked compressed but is not zstd: {exc}") from None
    if codec not in (CODEC_RAW, CODEC_REDACTED):
        raise InvalidInput(f"unknown codec {codec}")
    return bytes(body)


def row_to_event(row) -> Event:
    """A stored row (seq, id bytes, ts, recorded_at, agent, layer, kind, codec, body, digest, chain); a
    redacted row's body is its `Redacted` stand-in. A row that does not read is `damaged_row` at its seq."""
    seq, id, ts, recorded_at, agent, layer, kind, codec, body, digest, chain = row
    try:
        return Event(id=id_text(id), ts=ts, agent=agent, layer=layer, body=decode_body(unpack_body(codec, body)),
                     digest=digest.hex(), seq=seq, recorded_at=recorded_at, chain=chain.hex())
    except ROW_FAULTS as exc:
        try:  # the same row read again step by step: the words of the step that fails
            decode_body(stored_body(codec, body))
            for value, what in ((digest, "digest"), (chain, "chain")):
                if not isinstance(value, (bytes, bytearray, memoryview)):
                    raise InvalidInput(f"its {what} is {_type_name(value)}, not the bytes mindlog wrote")
        except ROW_FAULTS as found:
            exc = found
        raise damaged_row(seq, exc) from None


REDACTED = TAGS[Redacted]


def kind_condition(kinds: Sequence[str] | None, placeholder: str) -> tuple[str | None, list[str]]:
    """The WHERE condition (and its parameters) of a filter on kinds as events are listed. A redacted event's row
    keeps the kind it was written as (its digest covers it) and holds its `Redacted` stand-in (CODEC_REDACTED),
    which lists it as `redacted`: it is found by that name, and by the kind it was written as."""
    stored = [kind for kind in kinds or () if kind != REDACTED]
    either = [f"kind IN ({','.join([placeholder] * len(stored))})"] if stored else []
    if REDACTED in (kinds or ()):
        either.append(f"codec = {CODEC_REDACTED}")
    return (f"({' OR '.join(either)})" if either else None), stored


def skipped(body) -> int:
    """Seqs left unused before this event: only an ImportGap skips any (an imported file's gap)."""
    return body.skipped if isinstance(body, ImportGap) else 0


def recording_times(at: int | Sequence[int] | None, last: int) -> int | list[int]:
    """When a batch is recorded: now, or `at` (ms); a sequence gives each event's own time (a hub's mirror
    copies many hub commits in one transaction). Never before `last`, the log's newest, nor backwards."""
    if at is None or isinstance(at, int):
        return max(now_ms() if at is None else at, last)
    times = []
    for each in at:
        last = max(each, last)
        times.append(last)
    return times


ROW_WIDTH = 11
"""Values per stored row: (seq, id, ts, recorded_at, agent, layer, kind, codec, body, digest, chain)."""


def rows_of(values: list) -> list[tuple]:
    """`plan_rows`' values grouped into one tuple per row."""
    return list(zip(*[iter(values)] * ROW_WIDTH))


PLAIN_TAGS = {cls: tag for cls, tag in TAGS.items() if cls not in (Redacted, ImportGap)}
"""The stored kind of each body stored under its own kind at the next seq: not a `Redacted` stand-in (stored under
its original's kind) nor an ImportGap (it skips seqs)."""


def stored_form(event: Event) -> tuple[bytes, bytes, str, int, bytes, int]:
    """How an event is stored: (id bytes, digest bytes, kind, codec, stored body, seqs skipped before it). The body
    as `Event.raw_body()` gives it (for an event from elsewhere, `check_event` left the checked bytes there), zstd
    above COMPRESS_THRESHOLD; a `Redacted` stand-in as is, CODEC_REDACTED, under its original's kind.
    `Event.stored_keys` refuses an event without a 32-byte digest."""
    body = event.body
    cls = type(body)
    id, digest = event.stored_keys()
    raw = event.raw_body()
    if cls is Redacted:
        return id, digest, body.original, CODEC_REDACTED, raw, 0
    if len(raw) > COMPRESS_THRESHOLD:
        return id, digest, TAGS[cls], CODEC_ZSTD, compress(raw), skipped(body)
    return id, digest, TAGS[cls], CODEC_RAW, raw, skipped(body)


def plan_rows(events: Sequence[Event], known: dict[str, tuple[str, int]] | None, seq: int, chain: bytes,
              recorded_at: int | list[int]):
    """Numbers a batch after the log's last (seq, chain): returns the values of the rows to insert,
    one row after another (ROW_WIDTH each, see `rows_of`), each event's seq, and the new last (seq,
    chain). `known` maps ids already stored to (digest, seq); ids repeated in the batch are stored once.
    A known id with another digest refuses the whole batch. `known=None` says every id is new (the
    caller's unique index refuses the batch otherwise), which spares the bookkeeping on the common
    path. `recorded_at` is the batch's time, or each event's (`recording_times`). Each event is stored
    in its `stored_form`.

    The loop is the append's hot path. The common event, made here (`new_event`) or checked (`check_event`),
    carries its id and digest bytes and its encoded body, a small body stored as is: for it `stored_form` is
    written out (the rest go through it), and `chain_link` too. The values come flat, as a multi-row INSERT binds
    them. The byte columns are bytearrays (`_EMPTY + value`): Python's sqlite3 binds a bytearray as a blob
    directly, but sends every `bytes` value through its adapter lookup first (about 0.6 µs each, four per row);
    PostgreSQL's driver takes either."""
    values, seqs = [], []
    add_row = values.extend
    sha256, link_input, blob, plain = _sha256, _link_input, _EMPTY, PLAIN_TAGS
    times = None if isinstance(recorded_at, int) else iter(recorded_at)
    for event in events:
        if times is not None:
            recorded_at = next(times)
        if known is not None:
            found = known.get(event.id)
            if found is not None:
                if found[0] != event.digest:
                    raise IdConflict(f"event {event.id} is already in the log with a different digest")
                seqs.append(found[1])
                continue
        try:
            text_id, text_digest, id, digest = event.__dict__["_keys"]
            stored = event.__dict__["_raw"]
            kind = plain[type(event.body)]
        except KeyError:
            text_id = None
        if text_id is event.id and text_digest is event.digest and len(stored) <= COMPRESS_THRESHOLD:
            seq += 1
            codec = CODEC_RAW
            if id is None:
                id = uuid_bytes(text_id)
        else:
            id, digest, kind, codec, stored, skip = stored_form(event)
            seq += 1 + skip
        chain = sha256(link_input(chain, digest, seq, recorded_at)).digest()
        add_row((seq, blob + id, event.ts, recorded_at, event.agent, event.layer, kind, codec, blob + stored,
                 blob + digest, blob + chain))
        if known is not None:
            seqs.append(seq)
            known[event.id] = (event.digest, seq)
    return values, seqs if known is not None else values[::ROW_WIDTH], seq, chain


UNREDACTABLE = frozenset({"redaction", "contract.change", "import.gap"})


def redaction_updates(events: Sequence[Event], stored, unsent: Iterable[str] = ()) -> list[tuple[int, bytes, bytes]]:
    """(codec, new body, id bytes) for every target of the batch's redactions that is in the log, in the
    redaction's own layer and not redacted yet: the first redaction of a target wins, in the batch as across
    batches (as on the hub). One exception: a target redacted already by a redaction that comes back LATER
    in this batch (a pull: the batch is in hub order, and an agent's own redaction comes back at the place
    the hub gave it) takes the earlier one's reason and `by`, as the hub did; so does one redacted by a
    redaction of `unsent` (a pull: this agent's own, not pushed yet, so it will come after the batch's in hub
    order). `stored(id bytes)` gives (kind, codec, body, layer) or None. Called inside the append's
    transaction, after its rows are inserted."""
    updates, done, unsent = [], set(), frozenset(unsent)
    place = {event.id: at for at, event in enumerate(events) if event.kind == "redaction"}
    for at, event in enumerate(events):
        if event.kind != "redaction":
            continue
        for target in event.body.target_ids:
            if not is_uuid(target):  # refused on every way in (validate.body); one a hub took before it was names none
                continue
            found = None if target in done else stored(id_bytes(target))
            if found is None:
                continue
            kind, codec, body, layer = found
            if layer != event.layer or kind in UNREDACTABLE:
                continue
            if codec == CODEC_REDACTED:
                form = decode_body(unpack_body(codec, bytes(body)))
                if form.by == event.id or (form.by not in unsent and place.get(form.by, -1) <= at):
                    continue
                form = msgspec.structs.replace(form, reason=event.body.reason, by=event.id)
            else:
                form = redacted_form(kind, unpack_body(codec, bytes(body)), event.body.reason, event.id)
            updates.append((CODEC_REDACTED, encode_body(form), id_bytes(target)))
            done.add(target)  # a later redaction of it in the same batch finds it redacted, as in the next
    return updates


class VerifyReport(msgspec.Struct):
    """`first_bad_seq` and `problem`: the first problem found; `later`: the problems after it (each checked from the
    row's stored chain and seq, so a change is reported once, not again at every row after it), the first
    LATER_PROBLEMS of them, and `more` how many of them that leaves out."""
    ok: bool
    checked: int
    head: int
    first_bad_seq: int | None = None
    problem: str | None = None
    redacted: int = 0
    later: list[tuple[int, str]] = []
    more: int = 0


LATER_PROBLEMS = 20


class Recorder(ABC):
    """An append-only, commit-ordered event log whose seqs are gapless but for the seqs an ImportGap
    event says it skips (`skipped`), and the small key/value store (sync cursors) that commits with it.
    Every caller (the projections, sync, the CLI) uses only these methods, so any backend that passes
    tests/recorder_conformance.py can hold a workspace's log.

    `append` is atomic for the whole batch and idempotent per event id: an id already present
    with the same digest returns its existing seq, with another digest the batch is refused.
    """

    unscrubbed: bool = False
    """A redaction's rewritten bodies may still be on disk in their old form (SQLiteLog.scrub could not yet
    empty the WAL past another process's read): the next append tries again."""

    _inside: int | None = None
    """The thread running an append's `state` function (`_state_rows`): its reads go through the append's own
    connection, inside its transaction; every other read through a connection that sees only committed events."""

    # --- write --------------------------------------------------------------------------------

    def _state_rows(self, state: StateRows, seqs: list[int]) -> dict[str, str] | None:
        """The rows `state` gives, a function called inside the append's transaction (see `append`)."""
        if not callable(state):
            return state
        self._inside = threading.get_ident()
        try:
            return state(seqs)
        finally:
            self._inside = None

    @abstractmethod
    def append(self, events: Sequence[Event], *, state: StateRows = None,
               verify: bool = False, recorded_at: int | Sequence[int] | None = None,
               unsent: Iterable[str] = ()) -> list[int]:
        """Appends atomically and returns each event's seq. `unsent` (a pull): the ids of this agent's own
        redactions not pushed yet, which give way to the batch's redactions of the same targets (see
        redaction_updates). `state` rows (a sync cursor) commit in the
        same transaction; given as a function, it is called inside that transaction with the seqs (rows
        that depend on where the events landed, and on state as it is under the write lock); `verify` recomputes every digest first (events from elsewhere).
        `recorded_at` (ms) records the batch at that time instead of now (a hub's mirror keeps the
        hub's times), a sequence each event at its own (several hub commits in one transaction); it
        never goes backwards along the log."""

    @abstractmethod
    def state(self, key: str) -> str | None:
        """A value kept with the log (a sync cursor), or None."""

    @abstractmethod
    def set_state(self, key: str, value: str) -> None: ...

    # --- read ---------------------------------------------------------------------------------

    def activity_rows(self, after: int, upto: int) -> Iterator[tuple]:
        """(seq, recorded_at, agent, layer, kind) in seq order, no body: what the activity counts need."""
        for row in self.read_rows(after, upto):
            yield row[0], row[3], row[4], row[5], row[6]

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

    def chain_rows(self, after: int, upto: int) -> Iterator[tuple]:
        """(seq, digest, recorded_at, chain) of the last row at or before seq `after` (none when there is none), then
        of every row after it up to `upto`, in seq order: what `broken_link` checks. Backends read just these columns."""
        last = None
        for row in self.read_rows(0, upto):
            if row[0] <= after:
                last = row
                continue
            if last is not None:
                yield last[0], last[9], last[3], last[10]
                last = None
            yield row[0], row[9], row[3], row[10]
        if last is not None:
            yield last[0], last[9], last[3], last[10]

    @abstractmethod
    def fold_rows(self, after: int, upto: int, *, mind_ids: bool = True) -> Iterator[tuple]:
        """What the projections fold, in seq order and undecoded: (seq, id bytes, ts, layer, codec, stored body,
        agent). `layer` and `agent` are None for events of the `mind` layer (the wiki fold keeps neither), and
        the kind is the decoded body's own (a redacted event's stand-in has the original kind): a replay reads
        a million rows, and each string column costs it a decode per row. Without `mind_ids` the id of a `mind`
        event may be None too: a rebuild whose writer reads those ids from a SQLite log itself."""

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
    def count(self, upto: int | None = None) -> int:
        """How many events the log holds up to seq `upto` (all: None): the head, less the seqs ImportGaps skipped."""

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


def broken_link(rows: Iterable[tuple], after: int) -> int | None:
    """The first seq after `after` whose chain link does not follow from the row before it (`chain_rows`' rows), as
    `verify_rows` checks it: one sha256 a row. The row at or before `after` is taken as it stands (a push checked it
    when it sent it); with none, the chain starts from zero. None: every link holds."""
    chain = ZERO_CHAIN
    for seq, digest, recorded_at, stored in rows:
        try:
            digest, stored = bytes(digest), bytes(stored)
        except TypeError:  # a TEXT value where mindlog wrote bytes
            if seq > after:
                return seq
            digest = stored = b""
        if seq <= after:
            chain = stored
            continue
        chain = chain_link(chain, digest, seq, recorded_at)
        if chain != stored:
            return seq
    return None


_CODECS = frozenset((CODEC_RAW, CODEC_ZSTD, CODEC_REDACTED))


def verify_rows(rows: Iterable[tuple], head: int, progress=None) -> VerifyReport:
    """Checks stored rows (seq, id, ts, recorded_at, agent, layer, kind, codec, body, digest, chain) in
    seq order: gapless seqs (but for what an ImportGap skips) and times that never go backwards, bodies
    that decode to their kind, digests over the header and the body's hash (a redacted body names the
    hash of the body it replaced), and the chain. Past a problem the check goes on from the row's own seq and
    stored chain: each damaged row is named, not every row after the first."""
    expected_seq, chain, checked, redacted, last_recorded = 0, ZERO_CHAIN, 0, 0, 0
    problems: list[tuple[int, str]] = []
    for seq, id, ts, recorded_at, agent, layer, kind, codec, body, digest, stored_chain in rows:
        problem, body_hash = None, None
        if recorded_at < last_recorded:
            problem = "recorded_at goes backwards: the event's recording time was changed"
        last_recorded = recorded_at
        decoded = None
        if problem is None and codec not in _CODECS:
            problem = f"unknown codec {codec}"
        if problem is None and isinstance(body, str):
            problem = (f"the body column holds {body} where mindlog wrote bytes: the file was changed outside mindlog "
                       "(every reader of the row fails on it)")
        if problem is None:
            try:
                raw = unpack_body(codec, bytes(body))
                decoded = decode_body(raw)
            except Exception as exc:  # noqa: BLE001 - any failure here is corruption to report
                problem = f"body does not decode: {exc}"
        expected_seq += 1 + (skipped(decoded) if decoded is not None else 0)
        if problem is None and seq != expected_seq:
            problem = f"gap: expected seq {expected_seq}, found {seq}"
        expected_seq = seq
        if problem is None and codec == CODEC_REDACTED:
            if not isinstance(decoded, Redacted) or decoded.original != kind or len(decoded.body_hash) != 64:
                problem = "a redacted body disagrees with the event's kind or names no body hash"
            else:
                try:
                    body_hash = bytes.fromhex(decoded.body_hash)
                    redacted += 1
                except ValueError:
                    problem = "a redacted body's body hash is not hex"
        elif problem is None and decoded.__struct_config__.tag != kind:
            problem = f"kind column {kind!r} disagrees with the body's {decoded.__struct_config__.tag!r}"
        elif problem is None:
            body_hash = _sha256(raw).digest()
        digest = bytes(digest)
        if problem is None and compute_digest(id, ts, agent, layer, kind, body_hash) != digest.hex():
            problem = "digest mismatch: the event's header or body was changed after it was appended"
        if problem is None and chain_link(chain, digest, seq, recorded_at) != bytes(stored_chain):
            problem = ("chain mismatch: an event before this one was changed, removed or reordered, or its seq or "
                       "recording time changed")
        chain = bytes(stored_chain)
        if problem is not None:
            problems.append((seq, problem))
        elif not problems:
            checked += 1
        if progress:
            progress(checked)
    if problems:
        (first_bad_seq, problem), later = problems[0], problems[1:]
        return VerifyReport(ok=False, checked=checked, head=head, first_bad_seq=first_bad_seq, problem=problem,
                            redacted=redacted, later=later[:LATER_PROBLEMS], more=max(len(later) - LATER_PROBLEMS, 0))
    return VerifyReport(ok=True, checked=checked, head=head, redacted=redacted)
