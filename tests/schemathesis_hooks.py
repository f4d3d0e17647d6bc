"""Loaded by schemathesis in tests/test_hub_fuzz.py (SCHEMATHESIS_HOOKS): how to read the hub's msgpack pull
answers (sync.wire.MSGPACK), so that they are checked against the hub's OpenAPI description as the JSON ones are."""

import msgspec
import schemathesis

from sync.wire import MSGPACK


@schemathesis.deserializer(MSGPACK)
def msgpack_answer(ctx, response):
    return msgspec.msgpack.decode(response.content)
