"""The event envelope, its digest and chain, and how bodies are stored (msgpack, zstd above a threshold).

The digest covers the header fields and the hash of the body, not the body itself: a redaction can
remove a body while the digest (and the chain over the digests) still verifies.
"""

import hashlib
import threading

import msgspec
import zstandard

from .errors import DigestMismatch, InvalidInput, TooLarge, UnknownKind
from .ids import is_uuid, now_ms, uuid7_bytes, uuid_bytes, uuid_text
from .kinds import KINDS, Body, BodyUnion, Redacted

COMPRESS_THRESHOLD = 512
MAX_BODY_BYTES = 8 * 1024 * 1024
CODEC_RAW = 0
CODEC_ZSTD = 1
CODEC_REDACTED = 2  # the stored body is a `Redacted` body standing in for the removed one


class Event(msgspec.Struct, kw_only=True, omit_defaults=True, dict=True):
    """One immutable event. `seq`, `recorded_at` and `chain` are this store's; the rest travel.

    An event made here keeps its encoded body (`raw_body()`), so appending does not encode twice.
    """

    id: str
    ts: int
    agent: str
    layer: str
    body: BodyUnion
    digest: str = ""
    seq: int | None = None
    recorded_at: int | None = None
    chain: str | None = None

    @property
    def kind(self) -> str:
        return self.body.__struct_config__.tag

    @property
    def original_kind(self) -> str:
        """The kind the event was written as (a redacted event's body is `redacted`)."""
        return self.body.original if isinstance(self.body, Redacted) else self.body.__struct_config__.tag

    def raw_body(self) -> bytes:
        raw = self.__dict__.get("_raw")
        if raw is None:
            raw = self.__dict__["_raw"] = encode_body(self.body)
        return raw

    def stored_keys(self) -> tuple[bytes, bytes]:
        """The id and the digest as the log stores them (16 and 32 bytes). An event made here carries
        them from `new_event`, which had them before their text; they are taken only while `id` and
        `digest` are still the very strings they were made with. A digest that is not 64 hex digits
        is refused: the log's chain links are computed over exactly 32 bytes of it."""
        found = self.__dict__.get("_keys")
        if found is not None and found[0] is self.id and found[1] is self.digest:
            return found[2] or uuid_bytes(self.id), found[3]
        try:
            digest = bytes.fromhex(self.digest)
        except ValueError:
            digest = b""
        if len(digest) != 32:
            raise InvalidInput(f"event {self.id} has no digest of 64 hex digits", field="digest")
        return uuid_bytes(self.id), digest

    def body_hash(self) -> bytes:
        """sha256 of the body as written; a redacted event carries it in place of its body."""
        found = self.__dict__.get("_hash")
        if found is None:
            found = self.__dict__["_hash"] = (bytes.fromhex(self.body.body_hash) if isinstance(self.body, Redacted)
                                             else hashlib.sha256(self.raw_body()).digest())
        return found


MAX_TS = 253402300799999
"""The last millisecond of 9999-12-31 UTC: every `ts` is a time ISO 8601 can write."""


class Tag(msgspec.Struct):
    """Only the tag of a body: what an undecodable body claims to be."""

    kind: str


class Allowed(msgspec.Struct):
    """Only what the secret scanner found in a write made with --allow-secret (`Body.allowed_secrets`)."""

    allowed_secrets: list[str] = []


_body_encoder = msgspec.msgpack.Encoder(order="deterministic")
_body_decoder = msgspec.msgpack.Decoder(BodyUnion)
_tag_decoder = msgspec.msgpack.Decoder(Tag)
_allowed_decoder = msgspec.msgpack.Decoder(Allowed)
_canonical_encoder = msgspec.msgpack.Encoder(order="deterministic")


class _Zstd(threading.local):
    """A zstd compressor and decompressor for each thread: zstandard's objects may not be used by two threads at
    once (a web page's requests, served from a thread pool, read large bodies side by side and failed with
    'Destination buffer is too small' or 'Data corruption detected')."""

    def __init__(self):
        self.compressor = zstandard.ZstdCompressor(level=3)
        self.decompressor = zstandard.ZstdDecompressor()


_zstd = _Zstd()


def encode_body(body: Body) -> bytes:
    try:
        return _body_encoder.encode(body)
    except OverflowError:  # a JSON value given by a user (a config value, --tokens, content blocks)
        raise InvalidInput("the value holds a number too large to record: whole numbers lie between -2**63 "
                           "and 2**64 - 1") from None
    except UnicodeEncodeError as exc:  # JSON may escape a lone surrogate ("\ud800"), which UTF-8 cannot hold
        raise InvalidInput(f"the value holds text that is not valid Unicode ({exc.object[exc.start:exc.end]!a}, a "
                           "lone surrogate)") from None


def decode_body(raw: bytes) -> Body:
    try:
        return _body_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        check_tag(_tag_of(raw))
        raise InvalidInput(f"invalid event body: {exc}") from None
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"undecodable event body: {exc}") from None
    except RecursionError:
        raise InvalidInput("the event body is nested too deeply") from None


_bodies_decoder = msgspec.msgpack.Decoder(list[BodyUnion])


def decode_bodies(raws: list[bytes], decoder: msgspec.msgpack.Decoder = _bodies_decoder) -> list[Body]:
    """Many encoded bodies at once (one msgpack array, one call into msgspec: a replay's hot path);
    when one of them does not decode, each is decoded alone, so the error is decode_body's own.
    `decoder`: another decoder of a list of bodies, one that validates them alike (a fold's lighter Structs:
    fold.LEAN_BODIES); a body it refuses is decoded alone as a `Body`."""
    n = len(raws)
    header = bytes([0x90 | n]) if n < 16 else (b"\xdc" + n.to_bytes(2, "big") if n < 65536
                                                 else b"\xdd" + n.to_bytes(4, "big"))
    try:
        return decoder.decode(b"".join([header, *raws]))
    except (msgspec.DecodeError, RecursionError):
        return [decode_body(raw) for raw in raws]


def secrets_allowed(codec: int, stored: bytes) -> bool:
    """Whether a stored body was written with --allow-secret over a finding, read without decoding the rest of it."""
    try:
        return bool(_allowed_decoder.decode(unpack_body(codec, stored)).allowed_secrets)
    except (msgspec.DecodeError, RecursionError):
        return False


def _tag_of(raw: bytes) -> str | None:
    try:
        return _tag_decoder.decode(raw).kind
    except (msgspec.DecodeError, RecursionError):
        return None


def check_tag(kind: str | None) -> None:
    """Refuses a decoded `kind` tag that names no kind this version knows."""
    if isinstance(kind, str) and kind not in KINDS:
        raise UnknownKind(f"unknown event kind {kind!r}", field="body.kind")


def compute_digest(id: str, ts: int, agent: str, layer: str, kind: str, body_hash: bytes) -> str:
    """H(header fields, H(body)): `body_hash` is sha256 of the encoded body."""
    return digest_bytes(id, ts, agent, layer, kind, body_hash).hex()


def digest_bytes(id: str, ts: int, agent: str, layer: str, kind: str, body_hash: bytes) -> bytes:
    return hashlib.sha256(_canonical_encoder.encode([id, ts, agent, layer, kind, body_hash])).digest()


def compress(raw: bytes) -> bytes:
    return _zstd.compressor.compress(raw)


def unpack_body(codec: int, stored: bytes) -> bytes:
    return _zstd.decompressor.decompress(stored) if codec == CODEC_ZSTD else stored


def new_event(body: Body, *, agent: str, layer: str, ts: int | None = None, id: str | None = None) -> Event:
    """A fresh event from this producer, with its id, origin time and digest."""
    ts = now_ms() if ts is None else ts
    id_raw = None if id else uuid7_bytes(ts)
    id = id or uuid_text(id_raw)
    raw = encode_body(body)
    check_body_size(raw)
    body_hash = hashlib.sha256(raw).digest()
    digest_raw = digest_bytes(id, ts, agent, layer, body.__struct_config__.tag, body_hash)
    digest = digest_raw.hex()
    event = Event(id=id, ts=ts, agent=agent, layer=layer, body=body, digest=digest)
    event.__dict__.update(_raw=raw, _hash=body_hash, _keys=(id, digest, id_raw, digest_raw))
    return event


EVENT_LIMIT = f"an event (a message, a page, a file) may be at most {MAX_BODY_BYTES // 2**20} MiB"


def check_body_size(raw: bytes) -> None:
    if len(raw) > MAX_BODY_BYTES:
        raise TooLarge(f"the event is {len(raw) / 2**20:.1f} MiB encoded; {EVENT_LIMIT}")


_TAG = {cls: tag for tag, cls in KINDS.items()}
_sha256 = hashlib.sha256
_encode_body = _body_encoder.encode
_encode_canonical = _canonical_encoder.encode


def check_event(event: Event) -> bytes:
    """Validates an event that came from elsewhere: its id, names, and digest. Returns its body bytes.

    The hub runs it on every pushed event and a consumer on every pulled one (a catch-up, a million): the
    kind, body hash and original kind are worked out here once, not through the Event properties, and the
    digest (`digest_bytes`) is written out."""
    id, body = event.id, event.body
    if not is_uuid(id):
        raise InvalidInput(f"event id {id!r} is not a UUID in canonical lowercase form", field="id")
    agent, layer, ts = event.agent, event.layer, event.ts
    if not agent or not layer:
        raise InvalidInput("event agent and layer must be non-empty")
    if not 0 <= ts <= MAX_TS:
        raise InvalidInput(f"event {id}: ts {ts} is not a time between 1970 and 9999", field="ts")
    cls = type(body)
    kind = _TAG.get(cls) or body.__struct_config__.tag
    if kind not in KINDS:
        raise UnknownKind(f"unknown event kind {kind!r}")
    raw = _encode_body(body)
    if len(raw) > MAX_BODY_BYTES:
        check_body_size(raw)
    kept = event.__dict__
    kept["_raw"] = raw
    if cls is Redacted:
        kept.pop("_hash", None)
        if body.original not in KINDS or body.original in ("redacted", "redaction") or len(body.body_hash) != 64:
            raise InvalidInput(f"event {id}: a redacted body must name its original kind and body hash")
        try:
            body_hash = bytes.fromhex(body.body_hash)
        except ValueError:
            raise InvalidInput(f"event {id}: the redacted body's hash is not hex") from None
        kind = body.original
    else:
        body_hash = _sha256(raw).digest()
    kept["_hash"] = body_hash
    digest = event.digest
    digest_raw = _sha256(_encode_canonical([id, ts, agent, layer, kind, body_hash])).digest()
    if digest != digest_raw.hex():
        raise DigestMismatch(f"event {id}: digest does not match its content (tampered or corrupt)")
    kept["_keys"] = (id, digest, None, digest_raw)  # as `stored_keys` reads them: the appends after need not parse it
    return raw
