"""Audit blobs (brotli of a JSON document), read within a bound: a blob from a file, or from a log
written before imports were checked, never expands past `MAX_BLOB_BYTES`."""

import json

import brotli

from .errors import InvalidInput, TooLarge

MAX_BLOB_BYTES = 64 * 1024 * 1024
BROTLI_QUALITY = 5
_CHUNK = 1024 * 1024


def decompress(data: bytes, what: str = "an audit blob", limit: int = MAX_BLOB_BYTES) -> bytes:
    """Brotli, streamed and bounded: a blob from a file (or a log) never expands past `limit`."""
    decoder = brotli.Decompressor()
    try:
        parts = [decoder.process(bytes(data), output_buffer_limit=_CHUNK)]
        total = len(parts[0])
        while not decoder.is_finished():
            if total > limit:
                break
            part = decoder.process(b"", output_buffer_limit=_CHUNK)
            if not part and decoder.can_accept_more_data():
                raise InvalidInput(f"{what} is not valid brotli: the stream is truncated")
            parts.append(part)
            total += len(part)
    except brotli.error:
        raise InvalidInput(f"{what} is not valid brotli") from None
    if total > limit:
        raise TooLarge(f"{what} expands to more than {limit // (1024 * 1024)} MiB; not read")
    return b"".join(parts)


def blob_json(data: bytes, what: str = "an audit blob"):
    """An audit blob's JSON document, decompressed within the limit."""
    try:
        return json.loads(decompress(data, what))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise InvalidInput(f"{what} does not hold valid JSON") from None


def is_loop_source(source: str) -> bool:
    """Whether an audit row's `source` names a loop archive (`loop`, `loop:<name>`)."""
    return source == "loop" or source.startswith("loop:")


def dumps(value, sort_keys: bool = False) -> str:
    """JSON as ADF writes it (JSON.stringify): compact, UTF-8 kept.

    Loop content is written with sorted keys, the order the log's canonical encoding gives it back."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys)


def compress(document) -> tuple[bytes, int]:
    """A blob of a JSON document, and the length of its JSON text."""
    text = dumps(document).encode("utf-8")
    return brotli.compress(text, quality=BROTLI_QUALITY), len(text)
