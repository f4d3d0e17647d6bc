"""Event ids (UUIDv7), seqs as users write them, and clocks."""

import os
import re
import time

_last_ms = 0
_last_rand = 0


def seq_number(digits: str) -> int:
    """The whole number a run of ASCII digits a user gave names (a seq, `[S<seq>]`): OverflowError past 19 digits,
    beyond any seq as SQLite's 64-bit integers are (the edges say "past what the log holds"), where Python would
    refuse 4,301 digits or more with a ValueError."""
    if len(digits) > 19:
        raise OverflowError(f"{len(digits)} digits")
    return int(digits)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def uuid7(ms: int | None = None) -> str:
    """A UUIDv7 in its canonical text form (see uuid7_bytes)."""
    return uuid_text(uuid7_bytes(ms))


def uuid7_bytes(ms: int | None = None) -> bytes:
    """A UUIDv7's 16 bytes: 48 bits of milliseconds, then random bits, monotonic within one process.

    Ids made in one process sort in creation order even within one millisecond, which
    keeps the log's id index append-friendly.
    """
    global _last_ms, _last_rand
    ms = now_ms() if ms is None else ms
    if ms <= _last_ms:
        ms = _last_ms
        rand = _last_rand + 1
    else:
        rand = int.from_bytes(os.urandom(10), "big") >> 6  # 74 random bits
    _last_ms, _last_rand = ms, rand
    return uuid7_layout(ms, (rand >> 62) & 0xFFF, rand & ((1 << 62) - 1))


def uuid7_layout(ms: int, rand_a: int, rand_b: int) -> bytes:
    """The 16 bytes of the UUIDv7 of `ms` whose 12 bits after the version are `rand_a` and 62 bits after the
    variant `rand_b` (RFC 9562's layout; uuid7_bytes draws them, an import derives them)."""
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    return value.to_bytes(16, "big")


def uuid_text(raw: bytes) -> str:
    """The canonical lowercase text form of a UUID's 16 bytes (the form ids travel in)."""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


MINTED_AHEAD_MS = 86_400_000
"""How far past a hub's clock an event id's time may lie (sync.hub.check_minted): a writer's clock a day fast."""


def uuid7_ms(text: str) -> int:
    """The milliseconds a UUIDv7 in text form was made at (its first 48 bits)."""
    return int(text[:8] + text[9:13], 16)


def uuid_bytes(text: str) -> bytes:
    return bytes.fromhex(text.replace("-", ""))


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_uuid(text: str) -> bool:
    """A UUID in its canonical lowercase text form (the only form ids travel in), matched whole:
    `X` and `X\n` must never both pass, or two ids would name one 16-byte stored id."""
    return isinstance(text, str) and _UUID.fullmatch(text) is not None
